//! A sandbox's start, executed: clone3 into new namespaces, the mounts and device nodes of a
//! [`Program`] the caller built as plain data, pivot_root, a tiny init as PID 1, privileges
//! dropped, exec. The parent forwards signals, enforces timeouts and waits.
//!
//! The caller (bulkhead's sandbox module) decides everything; this module only performs it,
//! so all the `unsafe` of a sandbox start is here, in [`parent`], [`child`] and [`idmap`].

mod child;
mod idmap;
mod parent;
mod program;

pub use idmap::idmapped_tree;
pub use parent::run;
pub use program::{Create, Filter, IdRange, Op, Program, Target};

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

/// A fork-like clone3 (no CLONE_VM, SIGCHLD on exit) with namespace `flags`: 0 in the child,
/// the child's PID in the parent, -1 on error.
///
/// # Safety
/// As fork: the caller is single-threaded, and the child only execs or exits, working on
/// data prepared before the call.
unsafe fn clone3(flags: u64) -> libc::c_long {
    let mut args = CloneArgs {
        flags,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    // SAFETY: clone_args is valid for the size given; the fork semantics are the caller's
    // to uphold (see above).
    unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    }
}

/// The signals bulkhead forwards to the sandbox.
const FORWARDED: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// The forwarded signals plus SIGCHLD.
fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise the set they are given, a local value.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED.iter().chain(&[libc::SIGCHLD]) {
            libc::sigaddset(&mut set, *s);
        }
        set
    }
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
