//! `bulkhead spawn`: a command in a sandbox.

use crate::{backend, parse_slice, report, require_slice, Cli};
use bulkhead::error::{Diagnostic, Error, Result};
use bulkhead::run::EXIT_RUN_FAILED;
use bulkhead::sandbox::{self, Bind, Net, SandboxSpec, UserRange};
use bulkhead::snapshot::Choice;
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Args)]
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
/srv/backup:/backup:ro -- /usr/bin/pg_dump ..."
)]
pub struct SpawnArgs {
    /// The root file system: a directory, or the name of an image (bulkhead image list)
    #[arg(short = 'D', long = "directory", value_name = "ROOTFS")]
    directory: String,
    /// Give the command a writable copy of ROOTFS that is discarded on exit
    #[arg(short = 'x', long)]
    ephemeral: bool,
    /// How the ephemeral copy is made: auto, btrfs, reflink, overlay or copy
    #[arg(long, value_name = "METHOD")]
    snapshot: Option<Choice>,
    /// Without --ephemeral: mount ROOTFS writable (it is read-only otherwise)
    #[arg(long)]
    writable: bool,
    /// The slice to run in (as in the plan: db-helper)
    #[arg(long, short = 's', value_name = "SLICE")]
    slice: Option<String>,
    /// none: a network namespace without lo; private: with lo up; host: the host's network
    #[arg(long, default_value = "private", value_name = "MODE")]
    net: Net,
    /// The sandbox's host name [default: ROOTFS's directory name]
    #[arg(long, value_name = "NAME")]
    hostname: Option<String>,
    /// Bind a host path into the sandbox (repeatable); DST defaults to SRC
    #[arg(long, value_name = "SRC[:DST[:ro]]")]
    bind: Vec<Bind>,
    /// Bind a host path read-only (same as --bind SRC:DST:ro)
    #[arg(long = "bind-ro", value_name = "SRC[:DST]")]
    bind_ro: Vec<Bind>,
    /// Mount a tmpfs at this path inside the sandbox (repeatable)
    #[arg(long, value_name = "DST")]
    tmpfs: Vec<PathBuf>,
    /// A user namespace: root inside is an unprivileged ID outside. `auto` picks a 64K range
    /// from the sandbox's PID; or give BASE[:SIZE]
    #[arg(long = "private-users", value_name = "auto|BASE[:SIZE]", num_args = 0..=1, default_missing_value = "auto")]
    private_users: Option<String>,
    /// Run as this user (a name from the root's /etc/passwd, or a UID)
    #[arg(long, short = 'u', value_name = "USER")]
    uid: Option<String>,
    /// Run with this group (name from the root's /etc/group, or a GID)
    #[arg(long, value_name = "GROUP")]
    gid: Option<String>,
    /// Working directory inside the sandbox [default: /, or the user's home with --uid]
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Set an environment variable (repeatable)
    #[arg(long = "env", short = 'E', value_name = "KEY=VALUE", value_parser = bulkhead::plan::env::parse_env_assignment)]
    env: Vec<(String, String)>,
    /// Kill the whole sandbox after this long (e.g. 30s, 5min)
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    timeout: Option<std::time::Duration>,
    /// Exec the command as PID 1 (it must reap zombies and handle signals itself) instead of
    /// under bulkhead's tiny init
    #[arg(long)]
    as_pid1: bool,
    /// Pass fds 3..3+N (sockets bulkhead inherited) to the command by the systemd protocol:
    /// LISTEN_FDS=N and LISTEN_PID set to the command's PID inside the sandbox
    #[arg(long, value_name = "N", default_value_t = 0)]
    listen_fds: u32,
    /// When bulkhead gets SIGTERM or SIGINT, forward it, and kill the whole sandbox if it
    /// has not exited this long after (e.g. 10s)
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    stop_timeout: Option<std::time::Duration>,
    /// The default seccomp filter: yes or no
    #[arg(long, default_value = "yes", value_name = "yes|no", value_parser = parse_bool, action = clap::ArgAction::Set)]
    seccomp: bool,
    /// Print every operation the start would make, and make none
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Say how the root was made and how long the start took
    #[arg(long, short = 'v')]
    verbose: bool,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
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

fn parse_users(s: &str) -> Result<UserRange> {
    let bad = || {
        Error::invalid(
            Diagnostic::error(format!("--private-users={s}: not auto or BASE[:SIZE]"))
                .hint("e.g. --private-users=auto, or --private-users=524288:65536"),
        )
    };
    if s == "auto" {
        // A 64K range per sandbox, above the IDs a host normally gives out (systemd-nspawn's
        // range starts at 0x80000), picked from bulkhead's PID so parallel sandboxes differ.
        let slot = std::process::id() % 0x6000;
        return Ok(UserRange {
            base: 0x80000 + slot * 0x10000,
            size: 0x10000,
        });
    }
    let (b, n) = match s.split_once(':') {
        Some((b, n)) => (b, Some(n)),
        None => (s, None),
    };
    let base: u32 = b.parse().map_err(|_| bad())?;
    let size: u32 = match n {
        Some(n) => n.parse().map_err(|_| bad())?,
        None => 0x10000,
    };
    if base == 0 || size == 0 || base.checked_add(size).is_none() {
        return Err(Error::invalid(
            Diagnostic::error(format!(
                "--private-users={s}: the range must start above 0 and fit in 32 bits"
            ))
            .hint("root inside is BASE outside; BASE 0 would be the host's root"),
        ));
    }
    Ok(UserRange { base, size })
}

pub fn spawn(cli: &Cli, a: &SpawnArgs) -> Result<i32> {
    let code = match spawn_inner(cli, a) {
        Ok(c) => c,
        Err(e) => {
            report(&e.error.diagnostics());
            e.code
        }
    };
    Ok(code)
}

fn spawn_inner(cli: &Cli, a: &SpawnArgs) -> std::result::Result<i32, bulkhead::run::RunError> {
    let rerr = |e: Error| bulkhead::run::RunError::with_code(EXIT_RUN_FAILED, e);
    let rootfs = bulkhead::image::resolve_image(&a.directory).map_err(rerr)?;
    let private_users = a
        .private_users
        .as_deref()
        .map(parse_users)
        .transpose()
        .map_err(rerr)?;
    let mut binds = a.bind.clone();
    binds.extend(a.bind_ro.iter().cloned().map(|mut b| {
        b.read_only = true;
        b
    }));
    let slice = a
        .slice
        .as_deref()
        .map(parse_slice)
        .transpose()
        .map_err(rerr)?;
    let spec = SandboxSpec {
        rootfs,
        ephemeral: a.ephemeral,
        snapshot: a.snapshot,
        writable: a.writable,
        slice: slice.clone(),
        net: a.net,
        hostname: a.hostname.clone(),
        binds,
        tmpfs: a.tmpfs.clone(),
        private_users,
        uid: a.uid.clone(),
        gid: a.gid.clone(),
        cwd: a.cwd.clone(),
        env: a.env.clone(),
        timeout: a.timeout,
        as_pid1: a.as_pid1,
        seccomp: a.seccomp,
        listen_fds: a.listen_fds,
        stop_timeout: a.stop_timeout,
        argv: a.command.clone(),
    };
    if a.dry_run {
        if a.ephemeral {
            println!(
                "# the root is an ephemeral snapshot of {} (--snapshot {}), made at start",
                spec.rootfs.display(),
                match &spec.snapshot {
                    None | Some(Choice::Auto) => "auto".to_string(),
                    Some(Choice::Only(m)) => m.to_string(),
                }
            );
        }
        if let Some(s) = &slice {
            println!("join slice {s}");
        }
        for line in sandbox::describe(&spec)? {
            println!("{line}");
        }
        return Ok(0);
    }
    if slice.is_some() && crate::systemd::spawn_slice_unsupported(cli) {
        return Err(rerr(Error::invalid(
            Diagnostic::error("spawn --slice cannot join systemd's slices yet: it works with the cgroupfs backend")
                .hint("start it with bulkhead run --slice S -- bulkhead spawn ..., or pass --backend cgroupfs with a delegated --cgroup-root"),
        )));
    }
    // The cgroup layout is read only when a slice is to be joined.
    let fs = match &slice {
        Some(s) => {
            let fs = backend(cli).map_err(rerr)?;
            require_slice(cli, &fs, s).map_err(rerr)?;
            Some(fs)
        }
        None => None,
    };
    let verbose = a.verbose && !cli.quiet;
    let mut note = |m: &str| {
        if verbose {
            eprintln!("bulkhead: {m}");
        }
    };
    let out = sandbox::spawn(
        fs.as_ref().map(|f| f as &dyn bulkhead::cgroup::Backend),
        &spec,
        &mut note,
    )?;
    if out.timed_out {
        if !cli.quiet {
            eprintln!(
                "bulkhead: the sandbox was killed: --timeout {} passed",
                a.timeout.map(|t| format!("{:?}", t)).unwrap_or_default()
            );
        }
    } else if verbose {
        eprintln!(
            "bulkhead: exit code {}, {:.2} ms from start to exit",
            out.code,
            out.elapsed.as_secs_f64() * 1e3
        );
    }
    Ok(out.code)
}
