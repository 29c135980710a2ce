//! Signals: the self-pipe for forwarding what bulkhead receives, dispositions, the
//! blocked-signal waits of a supervising parent, and ending like a child did.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The signals bulkhead passes on to what it supervises (a sandbox, a `run` service): those
/// of a user or a service manager asking it to stop, reload or report, and window size
/// changes. (`run --hugepages` forwards its own shorter list.)
pub const FORWARDED: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// The write end of the pipe the handler writes signal numbers to.
static PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; one byte from the stack to our own pipe.
        unsafe { libc::write(fd, (&raw const b).cast(), 1) };
    }
}

/// While it lives, the given signals are caught and their numbers can be read with
/// [`SignalReader::recv`] (one pipe per process: installing a second one replaces the first).
/// Dropping it puts the default dispositions back and wakes a reader with None.
pub struct SignalPipe {
    signals: Vec<i32>,
    read: OwnedFd,
    write: OwnedFd,
}

/// The reading side, for a thread that forwards.
pub struct SignalReader(OwnedFd);

impl SignalPipe {
    pub fn install(signals: &[i32]) -> std::io::Result<SignalPipe> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        PIPE.store(write.as_raw_fd(), Ordering::Relaxed);
        for &s in signals {
            set_handler(s, on_signal as *const () as libc::sighandler_t);
        }
        Ok(SignalPipe {
            signals: signals.to_vec(),
            read,
            write,
        })
    }

    /// A second handle on the reading side (for a forwarding thread).
    pub fn reader(&self) -> std::io::Result<SignalReader> {
        Ok(SignalReader(self.read.try_clone()?))
    }
}

impl SignalReader {
    /// The pipe's fd, to wait on it with other fds (then [`SignalReader::recv`] does not block).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// The next signal caught, or None once the pipe is dropped.
    pub fn recv(&self) -> Option<i32> {
        let mut b = [0u8; 1];
        loop {
            match rustix::io::read(&self.0, &mut b) {
                Ok(1) if b[0] != 0 => return Some(b[0] as i32),
                Err(rustix::io::Errno::INTR) => continue,
                _ => return None,
            }
        }
    }
}

impl Drop for SignalPipe {
    fn drop(&mut self) {
        for &s in &self.signals {
            set_handler(s, libc::SIG_DFL);
        }
        PIPE.store(-1, Ordering::Relaxed);
        let _ = rustix::io::write(self.write.as_fd(), &[0u8]);
    }
}

fn set_handler(sig: i32, handler: libc::sighandler_t) {
    // SAFETY: `handler` is SIG_DFL, SIG_IGN, `on_signal` (only write(2)), `relay` (only
    // kill(2)) or `on_stop` (only an atomic store): all async-signal-safe.
    unsafe { libc::signal(sig, handler) };
}

/// Ignore a signal in this process (as system(3) does with SIGINT while it waits).
pub fn ignore(sig: i32) {
    set_handler(sig, libc::SIG_IGN);
}

/// The default disposition for a signal.
pub fn default(sig: i32) {
    set_handler(sig, libc::SIG_DFL);
}

/// Set once a signal [`catch_stop`] caught has come.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Turn these signals into a request to stop, which [`stop_requested`] reports: for a
/// process that must finish what it is doing (clean up, print its report) instead of dying.
pub fn catch_stop(signals: &[i32]) {
    for &s in signals {
        set_handler(s, on_stop as *const () as libc::sighandler_t);
    }
}

/// Whether a signal [`catch_stop`] caught has come.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_reload(_: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
}

/// Turn these signals (SIGHUP) into a request to re-read the configuration, which
/// [`reload_requested`] reports once per signal: a daemon's reload, as systemd's
/// `ExecReload=kill -HUP $MAINPID` and init scripts' `reload` send it.
pub fn catch_reload(signals: &[i32]) {
    for &s in signals {
        set_handler(s, on_reload as *const () as libc::sighandler_t);
    }
}

/// Whether a signal [`catch_reload`] caught has come since the last call.
pub fn reload_requested() -> bool {
    RELOAD.swap(false, Ordering::SeqCst)
}

/// The process [`Relay`] forwards to.
static TARGET: AtomicI32 = AtomicI32::new(0);

extern "C" fn relay(sig: libc::c_int) {
    let pid = TARGET.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// While it lives, the given signals are passed on to one process (a child bulkhead
/// supervises): installed before the fork, aimed with [`Relay::target`] after it. Dropping it
/// puts the default dispositions back.
pub struct Relay {
    signals: Vec<i32>,
}

impl Relay {
    pub fn install(signals: &[i32]) -> Relay {
        for &s in signals {
            set_handler(s, relay as *const () as libc::sighandler_t);
        }
        Relay {
            signals: signals.to_vec(),
        }
    }

    pub fn target(&self, pid: i32) {
        TARGET.store(pid, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        TARGET.store(0, Ordering::SeqCst);
        for &s in &self.signals {
            set_handler(s, libc::SIG_DFL);
        }
    }
}

/// End this process the way a child ended, given its wait status: killed by the same signal
/// (its default action, unblocked, without a core file of bulkhead's own), as sudo and
/// timeout(1) do, so whoever waits for bulkhead sees what it would have seen had the command
/// been exec'd in place (a shell's `$?` is 128+N either way; systemd's Result= and Restart=
/// tell a signal from an exit code). Returns the exit code to exit with otherwise: the
/// child's code, or 128+N if the signal did not end this process.
pub fn end_like(status: i32) -> i32 {
    let code = crate::process::exit_code(status, crate::exit::RUN_FAILED);
    if !libc::WIFSIGNALED(status) {
        return code;
    }
    let sig = libc::WTERMSIG(status);
    let mut core = rustix::process::getrlimit(rustix::process::Resource::Core);
    core.current = Some(0);
    let _ = rustix::process::setrlimit(rustix::process::Resource::Core, core);
    set_handler(sig, libc::SIG_DFL);
    // SAFETY: sigset operations on a local set, then raise(3) of a signal whose disposition
    // is now the default.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &raw const set, std::ptr::null_mut());
        libc::raise(sig);
    }
    code
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_caught_stop_signal_is_a_request() {
        assert!(!super::stop_requested());
        super::catch_stop(&[libc::SIGURG]);
        crate::process::kill(std::process::id() as i32, libc::SIGURG).unwrap();
        let t0 = std::time::Instant::now();
        while !super::stop_requested() && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        super::default(libc::SIGURG);
        assert!(super::stop_requested());
    }
}
