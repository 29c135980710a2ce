//! `bulkhead spawn`'s options.

use bulkhead::actions::spawn::{Bind, Choice, Net};
use bulkhead::plan::sandbox::parse_tmpfs_size;
use bulkhead::plan::SliceName;
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(
    long_about = "Run a command in a sandbox: new mount, PID, UTS, IPC, cgroup and network \
namespaces, pivoted into ROOTFS, with a minimal /dev, a read-only /sys, a private /tmp, the \
usual /proc paths masked, a reduced capability bounding set, no_new_privs and a default \
seccomp filter. With --ephemeral the command gets a writable copy of ROOTFS that is discarded \
when it exits, made by the fastest method the file system allows (btrfs snapshot, reflink \
copy, overlayfs). bulkhead exits with the command's exit code (128+N for signal N).",
    after_help = "Exit status: the command's; 124 when --timeout killed it; 125 when the \
sandbox could not be started; 126 when the command is not executable and 127 when the root \
has no such command.\n\nExamples:\n  bulkhead spawn -D /var/lib/machines/debian --ephemeral -- \
/bin/sh -c 'apt-get update'\n  bulkhead spawn -D debian -x --slice db-helper --bind \
/srv/backup:/backup:ro -- /usr/bin/pg_dump ...\n  bulkhead spawn --boot -D debian -x -- \
systemd.unit=multi-user.target   # boot the root's systemd; Ctrl-C halts it"
)]
pub struct SpawnArgs {
    /// The root file system: a directory, or the name of an image (bulkhead image list)
    #[arg(short = 'D', long = "directory", value_name = "ROOTFS")]
    pub directory: String,
    /// Give the command a writable copy of ROOTFS that is discarded on exit
    #[arg(short = 'x', long)]
    pub ephemeral: bool,
    /// How the ephemeral copy is made: auto, btrfs, reflink, overlay or copy
    #[arg(long, value_name = "METHOD")]
    pub snapshot: Option<Choice>,
    /// Without --ephemeral: mount ROOTFS writable (it is read-only otherwise)
    #[arg(long)]
    pub writable: bool,
    /// The slice to run in (as in the plan: db-helper)
    #[arg(long, short = 's', value_name = "SLICE", value_parser = super::slice_name)]
    pub slice: Option<SliceName>,
    /// none: a network namespace without lo; private: with lo up; host: the host's network
    #[arg(long, default_value = "private", value_name = "MODE")]
    pub net: Net,
    /// The sandbox's host name [default: ROOTFS's directory name]
    #[arg(long, value_name = "NAME")]
    pub hostname: Option<String>,
    /// Bind a host path into the sandbox (repeatable); DST defaults to SRC
    #[arg(long, value_name = "SRC[:DST[:ro]]")]
    pub bind: Vec<Bind>,
    /// Bind a host path read-only (same as --bind SRC:DST:ro)
    #[arg(long = "bind-ro", value_name = "SRC[:DST]")]
    pub bind_ro: Vec<Bind>,
    /// Mount a tmpfs at this path inside the sandbox (repeatable)
    #[arg(long, value_name = "DST")]
    pub tmpfs: Vec<PathBuf>,
    /// The size of /tmp and of each --tmpfs; writing past it fails with ENOSPC [default: 256M]
    #[arg(long, value_name = "SIZE", value_parser = parse_tmpfs_size)]
    pub tmp_size: Option<u64>,
    /// The size of /dev/shm [default: 64M]
    #[arg(long, value_name = "SIZE", value_parser = parse_tmpfs_size)]
    pub shm_size: Option<u64>,
    /// The size of the tmpfs that holds an --ephemeral overlay's changes (the root's writes)
    /// [default: 1G]
    #[arg(long, value_name = "SIZE", value_parser = parse_tmpfs_size)]
    pub overlay_size: Option<u64>,
    /// A user namespace: root inside is an unprivileged ID outside. `auto` leases a free 64K
    /// range (never one another live sandbox holds; /etc/subuid is honoured); or give
    /// BASE[:SIZE]
    #[allow(rustdoc::broken_intra_doc_links)] // --help text: BASE[:SIZE] is the syntax
    #[arg(long = "private-users", value_name = "auto|BASE[:SIZE]", num_args = 0..=1, default_missing_value = "auto")]
    pub private_users: Option<String>,
    /// Run as this user (a name from the root's /etc/passwd, or a UID)
    #[arg(long, short = 'u', value_name = "USER")]
    pub uid: Option<String>,
    /// Run with this group (name from the root's /etc/group, or a GID)
    #[arg(long, value_name = "GROUP")]
    pub gid: Option<String>,
    /// Working directory inside the sandbox [default: /, or the user's home with --uid]
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Set an environment variable (repeatable)
    #[arg(long = "env", short = 'E', value_name = "KEY=VALUE", value_parser = bulkhead::plan::env::parse_env_assignment)]
    pub env: Vec<(String, String)>,
    /// Kill the whole sandbox after this long (e.g. 30s, 5min)
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<std::time::Duration>,
    /// Exec the command as PID 1 (it must reap zombies and handle signals itself) instead of
    /// under bulkhead's tiny init
    #[arg(long)]
    pub as_pid1: bool,
    /// Boot the root's init (/sbin/init, else /lib/systemd/systemd) as PID 1 in a container
    /// as systemd expects one; the words after -- are its arguments (systemd.unit=...).
    /// SIGTERM/SIGINT stop it with SIGRTMIN+3 (--stop-timeout, default 90s, then kill)
    #[arg(long, conflicts_with_all = ["uid", "gid", "cwd"])]
    pub boot: bool,
    /// Pass fds 3..3+N (sockets bulkhead inherited) to the command by the systemd protocol:
    /// LISTEN_FDS=N and LISTEN_PID set to the command's PID inside the sandbox
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub listen_fds: u32,
    /// When bulkhead gets SIGTERM or SIGINT, forward it, and kill the whole sandbox if it
    /// has not exited this long after (e.g. 10s)
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub stop_timeout: Option<std::time::Duration>,
    /// Give the command its own pseudo-terminal (it always has its own session, so it can
    /// never type into the caller's terminal)
    #[arg(long, short = 't')]
    pub pty: bool,
    /// The default seccomp filter: yes or no
    #[arg(long, default_value = "yes", value_name = "yes|no", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub seccomp: bool,
    /// Print every operation the start would make, and make none
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Say how the root was made and how long the start took
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// The command and its arguments (with --boot: the init's arguments)
    #[arg(last = true, required_unless_present = "boot", value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

fn parse_timeout(s: &str) -> std::result::Result<std::time::Duration, String> {
    let d = bulkhead::units::parse_duration(s)?;
    if d.is_zero() {
        return Err("the timeout must be longer than 0".into());
    }
    Ok(d)
}

fn parse_bool(s: &str) -> std::result::Result<bool, String> {
    match s {
        "yes" | "true" | "on" | "1" => Ok(true),
        "no" | "false" | "off" | "0" => Ok(false),
        _ => Err(format!("'{s}' is not yes or no")),
    }
}
