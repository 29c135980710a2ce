//! A booted container's readiness (`spawn --boot`): `NOTIFY_SOCKET=/run/host/notify` inside,
//! as systemd-nspawn gives it, bound by bulkhead in /run/bulkhead/boot and bind-mounted
//! there after /run's tmpfs; a thread of bulkhead reads it while the container runs and
//! reports the first READY=1 from a process of the container (a descendant of bulkhead, by
//! the kernel's credentials of the datagram).

use super::setup::{cstr, HostRef, Op, Program, Target};
use super::UserRange;
use bulkhead_sys::error::{io_failed, Result};
use bulkhead_sys::notifysock::{says_ready, NotifySocket};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where the socket is inside the container.
pub const INSIDE: &str = "/run/host/notify";

/// Where bulkhead binds its end.
const DIR: &str = "/run/bulkhead/boot";

/// Bind bulkhead's end of the socket and put it in the container ([`ops`]); with a user
/// namespace (`users`) it belongs to the namespace's root, who must be able to send.
pub fn attach(program: &mut Program, users: Option<UserRange>) -> Result<NotifySocket> {
    let n = open()?;
    ops(program, Some(&n), n.path())?;
    if let Some(r) = users {
        n.give_to(r.base, r.base).map_err(|e| {
            io_failed(
                "cannot give the readiness socket to the sandbox's root",
                n.path(),
                e,
            )
        })?;
    }
    Ok(n)
}

/// Bind bulkhead's end of the socket.
fn open() -> Result<NotifySocket> {
    let dir = Path::new(DIR);
    NotifySocket::bind(dir, &format!("notify-{}", std::process::id()))
        .map_err(|e| io_failed("cannot bind the readiness socket in", dir, e))
}

/// The operations that put `sock` at [`INSIDE`] (after /run's tmpfs is mounted).
pub fn ops(program: &mut Program, sock: Option<&NotifySocket>, shown: &Path) -> Result<()> {
    let root = Path::new(std::ffi::OsStr::from_bytes(program.root.as_bytes())).to_path_buf();
    let inside = root.join(INSIDE.trim_start_matches('/'));
    program.ops.push(Op::Mkdir {
        path: cstr(root.join("run/host"))?,
        mode: 0o755,
    });
    program.ops.push(Op::Mknod {
        path: cstr(&inside)?,
        mode: libc::S_IFREG | 0o600,
        dev: 0,
    });
    let src = match sock {
        Some(s) => {
            let fd = s
                .file()
                .map_err(|e| io_failed("cannot open", s.path(), e))?;
            HostRef::hold(fd, cstr(s.path())?, &mut program.held)
        }
        // --dry-run: nothing is bound.
        None => HostRef {
            fd: -1,
            shown: cstr(shown)?,
        },
    };
    program.ops.push(Op::BindTree {
        src,
        target: Target::Abs(cstr(&inside)?),
        read_only: false,
        noatime: false,
        nodev: true,
    });
    Ok(())
}

/// Where [`open`] binds it (for `--dry-run`).
pub fn host_path() -> std::path::PathBuf {
    Path::new(DIR).join(format!("notify-{}", std::process::id()))
}

/// Read `sock` until READY=1 comes from a process of the container or `stop` is set (and the
/// socket woken: [`NotifySocket::wake`]); call
/// `on_ready` with the time since `start` at READY=1 and return it.
pub fn watch(
    sock: &NotifySocket,
    start: Instant,
    stop: &AtomicBool,
    on_ready: &(dyn Fn(Duration) + Sync),
) -> Option<Duration> {
    let me = std::process::id();
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let (n, sender) = match sock.recv(&mut buf, Duration::from_millis(50)) {
            Ok(Some(got)) => got,
            Ok(None) => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let ours = sender.is_some_and(|s| bulkhead_sys::process::descends_from(s.pid, me));
        if ours && says_ready(&buf[..n]) {
            let t = start.elapsed();
            on_ready(t);
            return Some(t);
        }
    }
    None
}
