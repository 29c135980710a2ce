//! The sending side of systemd's service notification protocol (sd_notify(3)): READY=1,
//! STATUS=..., WATCHDOG=1 as datagrams to $NOTIFY_SOCKET, and the watchdog interval from
//! $WATCHDOG_USEC (when $WATCHDOG_PID is unset or names this process).

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// A connection to the service manager, when bulkhead runs as a Type=notify service.
pub struct Notifier {
    sock: UnixDatagram,
    addr: std::os::unix::net::SocketAddr,
}

impl Notifier {
    /// `None` when $NOTIFY_SOCKET is not set (not started by systemd, or not Type=notify).
    pub fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        let bytes = path.as_encoded_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => abstract_addr(name)?,
            None => {
                std::os::unix::net::SocketAddr::from_pathname(std::path::Path::new(&path)).ok()?
            }
        };
        let sock = UnixDatagram::unbound().ok()?;
        Some(Notifier { sock, addr })
    }

    /// Send one message (`READY=1`, `STATUS=calibrating`, `WATCHDOG=1`); errors are dropped,
    /// as sd_notify's callers do.
    pub fn send(&self, msg: &str) {
        let _ = self.sock.send_to_addr(msg.as_bytes(), &self.addr);
    }
}

fn abstract_addr(name: &[u8]) -> Option<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name).ok()
}

/// How often systemd expects WATCHDOG=1 (`WatchdogSec=`), if it does for this process.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_the_socket() {
        let dir = std::env::temp_dir().join(format!("bh-notify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("sock");
        let _ = std::fs::remove_file(&path);
        let server = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            sock: UnixDatagram::unbound().unwrap(),
            addr: std::os::unix::net::SocketAddr::from_pathname(&path).unwrap(),
        };
        n.send("READY=1");
        let mut buf = [0u8; 64];
        let got = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..got], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
