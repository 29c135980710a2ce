//! The parent's side of a sandbox start: clone3, the ID maps of a user namespace, the go
//! signal, and the wait.
//!
//! The parent blocks the signals it forwards and SIGCHLD before the clone and waits with
//! sigtimedwait, so a timeout, a forwarded signal and the child's exit are one loop without
//! handlers. The child reports a failure before exec through a close-on-exec pipe: EOF
//! without a message means the command is running. A plain command's start
//! ([`super::command`]) waits with the same loop and the same mask.

use super::idmap::write_id_maps;
use super::title::Areas;
use super::trees::Trees;
use super::{child, clone3, close, pipe, signal_set, Failure, Program};
use crate::error::{errno_text, Diagnostic, Error};
use crate::exit::{RUN_FAILED, TIMEOUT};
use std::io::Read;
use std::os::fd::FromRawFd;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

/// The pipes between parent and child: the child's error report, the parent's lifeline (the
/// child dies when it closes), and the go after the ID maps are written.
struct Pipes {
    err: (i32, i32),
    life: (i32, i32),
    go: (i32, i32),
}

/// Start the sandbox and wait for it. Returns (exit code, timed out).
pub fn run(
    p: &Program,
    timeout: Option<Duration>,
    stop_timeout: Option<Duration>,
) -> Result<(i32, bool), Failure> {
    // The binds' trees, cloned here from the descriptors the caller decided on; attached by
    // the child. Raw numbers made before the clone: the child does not allocate.
    let trees = Trees::prepare(p)?;
    let (root_trees, op_trees) = (Trees::raw(&trees.root), Trees::raw(&trees.ops));
    let areas = init_areas(p)?;
    let set = signal_set();
    let restore = Restore::block(&set);
    let pipes = Pipes {
        err: pipe()?,
        life: pipe()?,
        go: pipe()?,
    };
    // SAFETY: clone3 without CLONE_VM is a fork of this single-threaded process; the child
    // runs `child::main`, which never returns.
    let pid = unsafe { clone3(p.clone_flags, None) };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        for fd in [pipes.err, pipes.life, pipes.go] {
            close(fd.0);
            close(fd.1);
        }
        return Err(clone_failed(&e));
    }
    if pid == 0 {
        close(pipes.err.0);
        close(pipes.life.1);
        close(pipes.go.1);
        let raw = child::RawTrees {
            root: &root_trees,
            ops: &op_trees,
        };
        child::main(p, raw, areas, pipes.err.1, pipes.life.0, pipes.go.0)
    }
    let pid = pid as libc::pid_t;
    close(pipes.err.1);
    close(pipes.life.0);
    close(pipes.go.0);
    if let Some(range) = p.userns {
        if let Err(e) = write_id_maps(pid, range) {
            let _ = crate::process::kill(pid, libc::SIGKILL);
            crate::process::wait(pid, true);
            for fd in [pipes.go.1, pipes.err.0, pipes.life.1] {
                close(fd);
            }
            return Err(e);
        }
    }
    // Let the child go on (it waits for the ID maps in a user namespace).
    // SAFETY: one byte from a static buffer to our own pipe.
    unsafe { libc::write(pipes.go.1, b"g".as_ptr().cast(), 1) };
    close(pipes.go.1);
    let (status, timed_out) = wait_loop(pid, &set, timeout, stop_timeout, true, p.stop_signal);
    close(pipes.life.1);
    let msg = read_report(pipes.err.0);
    drop(restore);
    let code = crate::process::exit_code(status, RUN_FAILED);
    if timed_out {
        return Ok((TIMEOUT, true));
    }
    if !msg.is_empty() {
        return Err(Failure::new(
            code,
            Error::failed_with(report_diagnostic(&msg)),
        ));
    }
    Ok((code, false))
}

/// Where the init blanks the host's command line and environment (with an init only).
fn init_areas(p: &Program) -> Result<Option<Areas>, Failure> {
    if !p.init {
        return Ok(None);
    }
    Areas::of_self().map(Some).ok_or_else(|| {
        Failure::new(
            RUN_FAILED,
            Error::failed(
                "cannot read the argument area of this process from /proc/self/stat, \
                 so the sandbox's init could not hide the host's command line; \
                 is /proc mounted?",
            ),
        )
    })
}

fn clone_failed(e: &std::io::Error) -> Failure {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => "creating namespaces needs root (CAP_SYS_ADMIN)",
        Some(libc::ENOSPC) => "a namespace limit is reached: see /proc/sys/user/max_*_namespaces",
        Some(libc::ENOSYS) => "clone3 needs Linux 5.3 or newer",
        _ => "check the kernel's namespace support",
    };
    Failure::new(
        RUN_FAILED,
        Error::failed_with(
            Diagnostic::error(format!(
                "cannot create the sandbox's namespaces: {}",
                errno_text(e)
            ))
            .hint(hint),
        ),
    )
}

/// Wait for the sandbox's PID 1 (or a plain command), forwarding signals and enforcing the
/// timeouts. `own_session`: the child is in a session of its own (a sandbox), so a terminal's
/// ^C reaches only bulkhead and is passed on too. `stop_signal`: what SIGTERM and SIGINT
/// become (a booted init's own stop request). Returns its wait status and whether
/// `timeout` killed it.
pub(super) fn wait_loop(
    pid: libc::pid_t,
    set: &libc::sigset_t,
    timeout: Option<Duration>,
    stop_timeout: Option<Duration>,
    own_session: bool,
    stop_signal: Option<i32>,
) -> (i32, bool) {
    let deadline = timeout.map(|t| Instant::now() + t);
    // Set when bulkhead is asked to stop: the sandbox gets stop_timeout to exit by itself.
    let mut stop_deadline: Option<Instant> = None;
    let mut timed_out = false;
    loop {
        let next = match (deadline, stop_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let (sig, info) = wait_signal(set, next);
        if sig == libc::SIGCHLD || sig < 0 {
            if sig < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
                // The timeout: PID 1 dies, and with it the whole PID namespace.
                timed_out = stop_deadline.is_none_or(|s| Instant::now() < s);
                let _ = crate::process::kill(pid, libc::SIGKILL);
            }
            if let Some(st) = crate::process::wait(pid, false) {
                return (st, timed_out);
            }
            continue;
        }
        // Forward what was sent to bulkhead: not what the kernel sent when the child shares
        // bulkhead's process group (a terminal's ^C already reached it), nor what the child
        // sent itself (kill(0, ...) would come back to it twice).
        if forwarded(&info, pid, own_session) {
            let sent = match (stop_signal, sig) {
                (Some(s), libc::SIGTERM | libc::SIGINT) => s,
                _ => sig,
            };
            let _ = crate::process::kill(pid, sent);
        }
        if let (Some(t), None, libc::SIGTERM | libc::SIGINT) = (stop_timeout, stop_deadline, sig) {
            stop_deadline = Some(Instant::now() + t);
        }
    }
}

/// Whether a signal bulkhead received is passed on to its child `pid`.
fn forwarded(info: &libc::siginfo_t, pid: libc::pid_t, own_session: bool) -> bool {
    if info.si_code == libc::SI_KERNEL {
        return own_session;
    }
    // SAFETY: si_pid is the sender's PID for signals sent with kill(2) (SI_USER), which is
    // the only case it is read in.
    info.si_code != libc::SI_USER || unsafe { info.si_pid() } != pid
}

/// The next blocked signal of `set`, waiting at most until `deadline`; -1 (EAGAIN) at the
/// deadline.
fn wait_signal(set: &libc::sigset_t, deadline: Option<Instant>) -> (i32, libc::siginfo_t) {
    // SAFETY: a zeroed siginfo_t is a valid value for the kernel to fill in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let sig = match deadline {
        // SAFETY: waiting on a valid, initialised set with a local siginfo.
        None => unsafe { libc::sigwaitinfo(set, &raw mut info) },
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            let ts = libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            // SAFETY: as above, with a local timespec.
            unsafe { libc::sigtimedwait(set, &raw mut info, &raw const ts) }
        }
    };
    (sig, info)
}

/// What the child wrote before it died (nothing when exec worked).
fn read_report(fd: i32) -> Vec<u8> {
    let mut msg = Vec::new();
    // SAFETY: the read end of the error pipe is ours alone; the File closes it.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    let _ = f.read_to_end(&mut msg);
    msg
}

/// The child's report: a message, and a hint after "\nhint: ".
fn report_diagnostic(msg: &[u8]) -> Diagnostic {
    let text = String::from_utf8_lossy(msg).trim().to_string();
    match text.split_once("\nhint: ") {
        Some((t, h)) => Diagnostic::error(t.to_string()).hint(h.to_string()),
        None => Diagnostic::error(text),
    }
}

/// The signal mask before the start; restored (after draining the reaped child's SIGCHLD)
/// on drop.
pub(super) struct Restore(libc::sigset_t);

impl Restore {
    pub(super) fn block(set: &libc::sigset_t) -> Restore {
        // SAFETY: a zeroed sigset_t is valid; sigprocmask reads `set` and fills `old`.
        unsafe {
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigprocmask(libc::SIG_BLOCK, set, &raw mut old);
            Restore(old)
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        // SAFETY: signal set operations on local, initialised sets; sigtimedwait with a zero
        // timeout only consumes a pending SIGCHLD; the saved mask is put back.
        unsafe {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&raw mut pending);
            if libc::sigismember(&raw const pending, libc::SIGCHLD) == 1 {
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let mut chld: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&raw mut chld);
                libc::sigaddset(&raw mut chld, libc::SIGCHLD);
                libc::sigtimedwait(&raw const chld, null_mut(), &raw const ts);
            }
            libc::sigprocmask(libc::SIG_SETMASK, &raw const self.0, null_mut());
        }
    }
}
