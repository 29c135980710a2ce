//! Sockets a service manager handed over by the systemd protocol (sd_listen_fds(3)):
//! `LISTEN_PID` names this process, `LISTEN_FDS` counts descriptors from 3 on, and
//! `LISTEN_FDNAMES` (optional) names them, colon-separated.

use std::os::fd::{FromRawFd, OwnedFd};

/// The first descriptor passed (SD_LISTEN_FDS_START).
const START: i32 = 3;
/// More than any real socket unit passes; a larger count is a broken environment.
const MAX: u32 = 1024;

/// One inherited descriptor and the name the socket unit gave it
/// (`FileDescriptorName=`, else the unit's name).
pub struct Passed {
    pub fd: OwnedFd,
    pub name: Option<String>,
}

/// Take the passed descriptors (once: the variables are removed, so that no child sees
/// them) and mark them close-on-exec. None when nothing was passed to this process.
///
/// Call before any thread starts: it changes the environment.
pub fn take() -> Option<Vec<Passed>> {
    let pid = std::env::var("LISTEN_PID").ok();
    let count = std::env::var("LISTEN_FDS").ok();
    let names = std::env::var("LISTEN_FDNAMES").ok();
    for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(v);
    }
    let pid: u32 = pid?.parse().ok()?;
    if pid != std::process::id() {
        return None;
    }
    let count: u32 = count?.parse().ok().filter(|n| *n <= MAX)?;
    let names: Vec<&str> = names
        .as_deref()
        .map(|n| n.split(':').collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for i in 0..count {
        let raw = START + i as i32;
        if !crate::fd::is_open(raw) {
            continue;
        }
        // SAFETY: the service manager passed `raw` to this process for it to own (LISTEN_PID
        // is our PID), it is open (checked above), and this is the only place that takes it:
        // the variables that announced it are gone.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC);
        let name = names
            .get(i as usize)
            .filter(|n| !n.is_empty())
            .map(|n| n.to_string());
        out.push(Passed { fd, name });
    }
    Some(out)
}
