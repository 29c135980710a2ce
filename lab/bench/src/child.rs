//! Stopping the processes a benchmark started: a signal, a grace period, then SIGKILL; a
//! server owned that way.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Send `sig`, wait up to `grace` for the child to exit, then SIGKILL it; how it ended.
pub fn stop(c: &mut Child, sig: i32, grace: Duration) -> Option<ExitStatus> {
    let _ = bulkhead_sys::process::kill(c.id() as i32, sig);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = c.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    c.wait().ok()
}

/// A server a benchmark started and owns: stopped with its own signal and grace on
/// [`Server::stop`] or when dropped.
pub struct Server {
    child: Option<Child>,
    signal: i32,
    grace: Duration,
}

impl Server {
    /// Own `child`; stopping sends `signal`, then SIGKILL after `grace`.
    pub fn new(child: Child, signal: i32, grace: Duration) -> Server {
        Server {
            child: Some(child),
            signal,
            grace,
        }
    }

    /// `Some(status)` when the server has exited (crashed or was killed).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Stop it (once; later calls do nothing).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop(&mut c, self.signal, self.grace);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_child_that_ignores_the_signal_is_killed_after_the_grace() {
        let mut c = std::process::Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 30"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t0 = std::time::Instant::now();
        let st = super::stop(&mut c, libc::SIGTERM, Duration::from_millis(200)).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(!st.success());
        let mut c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let st = super::stop(&mut c, libc::SIGTERM, Duration::from_secs(10)).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGTERM));
    }
}
