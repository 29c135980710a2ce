//! A readiness socket for a booted container: `$NOTIFY_SOCKET` inside (systemd-nspawn gives
//! it at /run/host/notify), a datagram socket bound in bulkhead's own state directory and
//! bind-mounted into the container from a descriptor. Each datagram is read with its
//! sender's credentials (SO_PASSCRED), so only the container's processes count.

use crate::net::{self, Credentials};
use crate::statefile;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A bound notify socket; its file is removed on drop.
pub struct NotifySocket {
    sock: UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    /// Bind `dir`/`name` (`dir` is made 0700 if missing: bulkhead's own), replacing a socket
    /// an earlier bulkhead of the same PID left.
    pub fn bind(dir: &Path, name: &str) -> io::Result<NotifySocket> {
        statefile::ensure_dir(dir, 0o700)?;
        remove_stale(dir);
        let path = dir.join(name);
        statefile::remove_file(&path)?;
        let sock = UnixDatagram::bind(&path)?;
        net::set_passcred(&sock)?;
        Ok(NotifySocket { sock, path })
    }

    /// The socket file, opened (O_PATH) for a bind mount into the container.
    pub fn file(&self) -> io::Result<OwnedFd> {
        let flags =
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC;
        let fd = rustix::fs::open(&self.path, flags, rustix::fs::Mode::empty())?;
        let st = rustix::fs::fstat(&fd)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(io::Error::other(format!(
                "{} is not the socket bulkhead bound",
                self.path.display()
            )));
        }
        Ok(fd)
    }

    /// Let `uid`:`gid` (a user namespace's root, as host IDs) send to it.
    pub fn give_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        std::os::unix::fs::lchown(&self.path, Some(uid), Some(gid))
    }

    /// Wake a reader waiting in [`NotifySocket::recv`] at once (an empty datagram from this
    /// process to itself), so it can see that it is asked to stop.
    pub fn wake(&self) {
        let _ = self.sock.send_to(b"", &self.path);
    }

    /// Where it is bound on the host.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next datagram into `buf`, waiting at most `wait`: its length and sender, or None
    /// when nothing came.
    pub fn recv(
        &self,
        buf: &mut [u8],
        wait: Duration,
    ) -> io::Result<Option<(usize, Option<Credentials>)>> {
        let mut fds = [rustix::event::PollFd::new(
            &self.sock,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        match net::recv_with_credentials(self.sock.as_fd(), buf) {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        let _ = statefile::remove_file(&self.path);
    }
}

/// Remove the sockets (`notify-PID`) of bulkheads that are gone (killed with SIGKILL).
fn remove_stale(dir: &Path) {
    for name in statefile::names(dir).unwrap_or_default() {
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix("notify-"))
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !crate::process::alive(p)) {
            let _ = statefile::remove_file(&dir.join(name));
        }
    }
}

/// Whether a notify message says READY=1 (one assignment per line, as sd_notify sends).
pub fn says_ready(msg: &[u8]) -> bool {
    msg.split(|&b| b == b'\n').any(|l| l == b"READY=1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_one_line_of_the_message() {
        assert!(says_ready(b"READY=1"));
        assert!(says_ready(b"STATUS=up\nREADY=1\n"));
        assert!(!says_ready(b"READY=10"));
        assert!(!says_ready(b"STATUS=READY=1"));
    }

    #[test]
    fn a_datagram_is_read_with_its_sender() {
        let dir = std::env::temp_dir().join(format!("bulkhead-notifysock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A dead bulkhead's socket is removed (PID 0x7fffffff is never alive here).
        std::fs::write(dir.join("notify-2147483647"), "").unwrap();
        let s = NotifySocket::bind(&dir, "notify").unwrap();
        assert!(!dir.join("notify-2147483647").exists());
        assert!(s
            .recv(&mut [0u8; 64], Duration::from_millis(1))
            .unwrap()
            .is_none());
        let c = UnixDatagram::unbound().unwrap();
        c.send_to(b"READY=1", s.path()).unwrap();
        let mut buf = [0u8; 64];
        let (n, who) = s.recv(&mut buf, Duration::from_secs(5)).unwrap().unwrap();
        assert!(says_ready(&buf[..n]));
        assert_eq!(who.map(|w| w.pid), Some(std::process::id()));
        assert!(s.file().is_ok());
        // A reader is woken by an empty datagram of bulkhead's own, which is no READY=1.
        s.wake();
        let (n, who) = s.recv(&mut buf, Duration::from_secs(5)).unwrap().unwrap();
        assert_eq!(n, 0);
        assert_eq!(who.map(|w| w.pid), Some(std::process::id()));
        let path = s.path().to_path_buf();
        drop(s);
        assert!(!path.exists());
        let _ = std::fs::remove_dir(&dir);
    }
}
