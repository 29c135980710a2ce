//! Starting commands with clone3. A sandbox's start: clone3 into new namespaces, the mounts
//! and device nodes of a [`Program`] the caller built as plain data, pivot_root, a tiny init
//! as PID 1, privileges dropped, exec; the parent forwards signals, enforces timeouts and
//! waits. And a plain command's start ([`command`], `bulkhead run`): credentials, working
//! directory and exec, in place or in a child cloned straight into a cgroup
//! (CLONE_INTO_CGROUP), waited for by the same loop.
//!
//! The callers (bulkhead's sandbox and run modules) decide everything; this module only
//! performs it, so all the `unsafe` of a start is here, in `parent`, `child`, `idmap`
//! and [`command`].

mod child;
pub mod command;
mod idmap;
mod parent;
mod program;
mod title;
mod trees;

pub use command::{exec_here, spawn_into_cgroup, ExecFailure, ExecSpec, Running, SpawnError, Step};
pub use idmap::idmapped_tree;
pub use parent::run;
pub use program::{Create, Filter, HostRef, IdRange, Op, Program, Target};

use crate::error::{errno_text, Error};
use crate::exit::RUN_FAILED;

/// Why a sandbox did not run as asked: the exit code to give, and what went wrong.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub error: Error,
}

impl Failure {
    pub fn new(code: i32, error: Error) -> Failure {
        Failure { code, error }
    }
}

/// The last OS error, as a start failure.
fn os_err(what: &str) -> Failure {
    let e = std::io::Error::last_os_error();
    Failure::new(
        RUN_FAILED,
        Error::failed(format!("{what}: {}", errno_text(&e))),
    )
}

/// struct clone_args from linux/sched.h (the fields up to `cgroup`, size 88).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// CLONE_INTO_CGROUP (linux/sched.h, Linux 5.7): the child starts in the cgroup2 directory
/// whose descriptor is `clone_args.cgroup`.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// A fork-like clone3 (no CLONE_VM, SIGCHLD on exit) with namespace `flags`, and with
/// `cgroup` (a cgroup2 directory opened for reading) the child born in that cgroup: 0 in the
/// child, the child's PID in the parent, -1 on error.
///
/// # Safety
/// As fork: the caller is single-threaded (or the child makes only raw system calls), and the
/// child only execs or exits, working on data prepared before the call.
unsafe fn clone3(flags: u64, cgroup: Option<std::os::fd::RawFd>) -> libc::c_long {
    let mut args = CloneArgs {
        flags,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd as u64;
    }
    // SAFETY: clone_args is valid for the size given; the fork semantics are the caller's
    // to uphold (see above).
    unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &raw mut args,
            std::mem::size_of::<CloneArgs>(),
        )
    }
}

/// The forwarded signals plus SIGCHLD.
fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise the set they are given, a local value.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        for s in crate::signals::FORWARDED.iter().chain(&[libc::SIGCHLD]) {
            libc::sigaddset(&raw mut set, *s);
        }
        set
    }
}

/// `LISTEN_PID=<pid>` as a NUL-terminated environment entry, formatted without allocating
/// (it is filled in between clone and exec, once the PID is known).
fn listen_pid_var(pid: u32) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..11].copy_from_slice(b"LISTEN_PID=");
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (pid, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        out[11 + i] = digits[len - 1 - i];
    }
    out
}

/// A close-on-exec pipe as raw descriptors (the child side works with raw numbers).
fn pipe() -> Result<(i32, i32), Failure> {
    use std::os::fd::IntoRawFd;
    let (r, w) = crate::fd::pipe().map_err(|_| os_err("pipe2"))?;
    Ok((r.into_raw_fd(), w.into_raw_fd()))
}

/// Close a raw descriptor (errors are of no use here).
fn close(fd: i32) {
    // SAFETY: closing a descriptor this module opened and no one else owns.
    unsafe { libc::close(fd) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn listen_pid_is_formatted_in_place() {
        let text = |pid| {
            let b = super::listen_pid_var(pid);
            let end = b.iter().position(|&c| c == 0).unwrap();
            String::from_utf8(b[..end].to_vec()).unwrap()
        };
        assert_eq!(text(0), "LISTEN_PID=0");
        assert_eq!(text(7), "LISTEN_PID=7");
        assert_eq!(text(4194304), "LISTEN_PID=4194304");
        assert_eq!(text(u32::MAX), "LISTEN_PID=4294967295");
        assert_eq!(super::listen_pid_var(u32::MAX)[21], 0, "NUL-terminated");
    }
}
