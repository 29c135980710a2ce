//! `bulkhead serve`: socket activation for the plan's `[socket.NAME]` sections.

use crate::Cli;
use bulkhead::activate::{self, Log, TargetLauncher};
use bulkhead::error::{Error, Result};
use bulkhead::plan::Plan;
use clap::Args;
use std::ffi::OsString;

#[derive(Args)]
#[command(
    long_about = "Listen on the plan's sockets and start each socket's target on the first \
connection. Connections that arrive while the target starts wait (they are not refused) until \
it is ready: its backend accepts a connection (ready = \"connect\") or it sent READY=1 on \
$NOTIFY_SOCKET (ready = \"notify\"). In proxy mode bulkhead copies the bytes both ways with \
splice(2); in pass mode it hands the listening sockets to the target (LISTEN_FDS, as systemd \
does) and steps aside; in per-connection mode each connection gets its own target with the \
connection on stdin and stdout. A target is stopped (SIGTERM, then SIGKILL after \
stop_timeout) idle_timeout after its last connection closed, and started again by the next \
one. A target with rootfs runs in an ephemeral sandbox (bulkhead spawn), else as a plain \
command (bulkhead run), in its slice.\n\nRuns in the foreground and logs to stderr; when \
systemd starts it (Type=notify), it says READY=1 once every socket listens. SIGTERM or SIGINT \
stops the targets and exits.",
    after_help = "Plan keys of [socket.NAME]: listen (list: HOST:PORT, [V6]:PORT, PORT, \
udp:HOST:PORT, unix:/PATH), mode (proxy | pass | per-connection), backend, ready (connect | \
notify), idle_timeout (30s; \"infinity\"), start_timeout (10s), stop_timeout (10s), \
max_connections (1024; 64 per-connection), connection_idle_timeout, pipe_size, backlog, \
proxy_protocol (\"v1\" | \"v2\", sent to the target), accept_proxy_protocol (read from a load \
balancer), socket_mode, socket_user, socket_group. [socket.NAME.target]: command, rootfs, \
slice, user, group, working_directory, environment, network, bind, snapshot.\n\nExit status: \
0 after SIGTERM/SIGINT, 1 when serving failed, 2 for a bad plan or a socket that cannot be \
bound.\n\nExample:\n  bulkhead serve -c /etc/bulkhead/bulkhead.toml --socket app\n  \
bulkhead status          # state, connections, bytes, cold starts of each socket"
)]
pub struct ServeArgs {
    /// Serve only this socket (repeatable) [default: every socket of the plan]
    #[arg(long = "socket", value_name = "NAME")]
    sockets: Vec<String>,
    /// Print what would listen and how each target would start, and start nothing
    #[arg(long, short = 'n')]
    dry_run: bool,
}

pub fn serve(cli: &Cli, a: &ServeArgs) -> Result<i32> {
    let plan = Plan::load(cli.config.as_deref())?;
    let specs = activate::select(&plan, &a.sockets)?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::failed(format!("cannot find bulkhead's own binary: {e}")))?;
    let mut global_args: Vec<OsString> = Vec::new();
    if let Some(c) = &cli.config {
        // Absolute: the target may run with another working directory.
        let c = std::path::absolute(c).unwrap_or_else(|_| c.clone());
        global_args.extend(["--config".into(), c.into()]);
    }
    if !cli.cgroup_root.trim_matches('/').is_empty() {
        global_args.extend(["--cgroup-root".into(), cli.cgroup_root.clone().into()]);
    }
    if let Some(b) = clap::ValueEnum::to_possible_value(&cli.backend) {
        global_args.extend(["--backend".into(), b.get_name().into()]);
    }
    let launcher = TargetLauncher { exe, global_args };
    if a.dry_run {
        activate::check(&plan, &specs)?;
        for line in activate::describe(&specs, &launcher) {
            println!("{line}");
        }
        println!("dry run: nothing bound, nothing started");
        return Ok(0);
    }
    // A client that goes away must be an EPIPE for the proxy, not the end of bulkhead. The
    // targets get SIGPIPE back (std resets it for every child).
    // SAFETY: setting a signal disposition before the runtime's threads exist.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    activate::serve(&plan, specs, launcher, Log { quiet: cli.quiet })?;
    Ok(0)
}
