//! File descriptors: how many `serve` may hold at most, checked against RLIMIT_NOFILE before
//! anything is bound. The limit is raised as far as needed (root may raise the hard limit up
//! to /proc/sys/fs/nr_open); where that fails, `serve` refuses to start and says which socket
//! needs how many. Targets get the soft limit `serve` started with.

use bulkhead_plan::socket::{Mode, SocketSpec};
use bulkhead_plan::Plan;
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use std::sync::OnceLock;

/// What `serve` holds besides its sockets' connections: stdio, the event loop, status files,
/// netns threads, pidfds, a margin.
const BASE: u64 = 64;

/// The soft limit `serve` started with, for its targets.
static TARGET_SOFT: OnceLock<u64> = OnceLock::new();

/// Descriptors one connection (or UDP flow) holds in `serve`.
fn per_connection(spec: &SocketSpec) -> u64 {
    let udp = spec.listen.iter().any(|(e, _)| !e.is_stream());
    match spec.mode {
        // A connected socket towards the backend.
        Mode::Proxy if udp => 1,
        // The client, the backend and two splice pipes.
        Mode::Proxy => 6,
        // The connection, its copy for the target's stdout, the child's pidfd.
        Mode::PerConnection => 3,
        // The target accepts.
        Mode::Pass => 0,
    }
}

/// The most descriptors one socket may hold: its listeners (and their copies), a notify
/// socket, and every connection.
pub fn needed(spec: &SocketSpec) -> u64 {
    3 * spec.listen.len() as u64 + 2 + per_connection(spec) * u64::from(spec.max_connections)
}

/// The soft limit for targets, if `serve` changed its own.
pub fn target_soft() -> Option<u64> {
    TARGET_SOFT.get().copied()
}

/// Make sure RLIMIT_NOFILE covers every socket at its limits, raising it if needed.
pub fn ensure(plan: &Plan, specs: &[SocketSpec]) -> Result<()> {
    let total = BASE + specs.iter().map(needed).sum::<u64>();
    let (soft, hard) = bulkhead_sys::process::nofile_limit();
    if soft >= total {
        return Ok(());
    }
    let _ = TARGET_SOFT.set(soft);
    match bulkhead_sys::process::set_nofile_limit(total, hard.max(total)) {
        Ok(()) => Ok(()),
        Err(e) => Err(too_few(plan, specs, total, (soft, hard), &e)),
    }
}

fn too_few(
    plan: &Plan,
    specs: &[SocketSpec],
    total: u64,
    (soft, hard): (u64, u64),
    e: &std::io::Error,
) -> Error {
    let biggest = specs.iter().max_by_key(|s| needed(s));
    let mut d = Diagnostic::error(format!(
        "serve may need {total} file descriptors at its limits, and RLIMIT_NOFILE is {soft} (hard {hard}); raising it failed: {}",
        errno_text(e)
    ));
    if let Some(s) = biggest {
        d = d
            .at(plan.source.at(s.loc))
            .context(format!("[socket.{}] max_connections", s.name))
            .hint(format!(
                "socket '{}' alone may hold {} (max_connections {} x {} each): lower max_connections, or raise the limit (LimitNOFILE= in serve's unit, or give serve CAP_SYS_RESOURCE)",
                s.name,
                needed(s),
                s.max_connections,
                per_connection(s)
            ));
    }
    Error::invalid(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_costs_what_it_holds() {
        let plan = Plan::parse(
            r#"
[socket.tcp]
listen = ["1"]
backend = "127.0.0.1:2"
[socket.tcp.target]
command = ["/bin/true"]
[socket.udp]
listen = ["udp:127.0.0.1:3"]
backend = "udp:127.0.0.1:4"
ready = "notify"
[socket.udp.target]
command = ["/bin/true"]
[socket.inetd]
listen = ["5", "6"]
mode = "per-connection"
max_connections = 10
[socket.inetd.target]
command = ["/bin/true"]
[socket.pass]
listen = ["7"]
mode = "pass"
[socket.pass.target]
command = ["/bin/true"]
"#,
            None,
        )
        .unwrap();
        let n = |name: &str| needed(&plan.sockets[name]);
        assert_eq!(n("tcp"), 3 + 2 + 1024 * 6);
        assert_eq!(n("udp"), 3 + 2 + 1024);
        assert_eq!(n("inetd"), 6 + 2 + 10 * 3);
        assert_eq!(n("pass"), 3 + 2);
        let specs: Vec<SocketSpec> = plan.sockets.values().cloned().collect();
        let e = too_few(
            &plan,
            &specs,
            7000,
            (1024, 4096),
            &std::io::Error::from_raw_os_error(libc::EPERM),
        )
        .to_string();
        assert!(e.contains("[socket.tcp] max_connections"), "{e}");
        assert!(e.contains("max_connections 1024 x 6"), "{e}");
        assert!(e.contains("RLIMIT_NOFILE is 1024 (hard 4096)"), "{e}");
    }
}
