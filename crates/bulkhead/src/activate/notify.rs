//! A target's readiness socket (sd_notify's $NOTIFY_SOCKET), made fresh for each start in
//! /run/bulkhead/sockets/NAME.notify. Its mode is 0666 so a target running as any user can
//! send; SO_PASSCRED makes the kernel attach each sender's PID, and a datagram counts only
//! when that process is the target or one of its descendants. A sandbox sees the directory
//! read-only.
// System calls only through bulkhead-sys (clippy.toml's list, issue 27).
#![deny(clippy::disallowed_methods)]

use super::sockfile;
use bulkhead_sys::net;
use socket2::{Domain, Socket, Type};
use std::io;
use std::path::Path;
use tokio::io::Interest;

/// Who sent a datagram, as the kernel says (PIDs in `serve`'s namespace).
pub type Sender = net::Credentials;

/// A bound notify socket.
pub struct NotifySocket {
    sock: tokio::net::UnixDatagram,
}

impl NotifySocket {
    /// Bind `dir`/notify, replacing the socket of an earlier start.
    pub fn open(dir: &Path) -> io::Result<NotifySocket> {
        bulkhead_sys::statefile::ensure_dir(dir, 0o755)?;
        let path = dir.join("notify");
        let place = sockfile::place(&path).map_err(|e| io::Error::other(e.to_string()))?;
        match rustix::fs::unlinkat(
            &place.dir,
            place.name.as_os_str(),
            rustix::fs::AtFlags::empty(),
        ) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        let s = Socket::new(Domain::UNIX, Type::DGRAM.cloexec(), None)?;
        sockfile::bind(&s, &path, Some(0o666))?;
        net::set_passcred(&s)?;
        s.set_nonblocking(true)?;
        let sock = tokio::net::UnixDatagram::from_std(s.into())?;
        Ok(NotifySocket { sock })
    }

    /// The next datagram into `buf`: its length and its sender (None if the kernel did not
    /// say, which SO_PASSCRED rules out).
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<(usize, Option<Sender>)> {
        loop {
            self.sock.readable().await?;
            match self
                .sock
                .try_io(Interest::READABLE, || recv_with_sender(&self.sock, buf))
            {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return r,
            }
        }
    }
}

fn recv_with_sender(
    sock: &tokio::net::UnixDatagram,
    buf: &mut [u8],
) -> io::Result<(usize, Option<Sender>)> {
    use std::os::fd::AsFd;
    net::recv_with_credentials(sock.as_fd(), buf)
}

pub use bulkhead_sys::process::descends_from as in_tree;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_is_the_process_and_its_descendants() {
        let me = std::process::id();
        let child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let mut child = child;
        assert!(in_tree(child.id(), me));
        assert!(in_tree(me, me));
        assert!(!in_tree(me, child.id()));
        assert!(!in_tree(1, me));
        let _ = child.kill();
        let _ = child.wait();
    }
}
