//! The optional probe of the protected service: a thread that, once a period, times a TCP
//! connect or a Redis `PING` on a kept connection. The guard takes the slowest round trip
//! since it last looked, and a round trip still in flight counts as the time it has taken so
//! far: a service that stalls (or drips its answer a byte at a time) shows as slow while it
//! stalls. Each round trip has one deadline, whatever the service sends meanwhile; one that
//! misses it counts as the deadline.
//!
//! The peer is checked where the kernel can tell: when the probed address is one this host
//! listens on, the listening socket must be held by a process of the protected slice
//! ([`PeerCheck`]). Anyone else who binds the port (while the service is down) makes the
//! probe fail, with the reason in `status`, instead of steering the guard.

use bulkhead_cgroups::CgroupFs;
use bulkhead_plan::guard::Probe;
use bulkhead_plan::SliceName;
use bulkhead_sys::sockdiag;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Shared between the probing thread and the guard.
#[derive(Default)]
struct Shared {
    /// Slowest round trip since the guard last took it, milliseconds.
    worst_ms: Mutex<Option<f64>>,
    /// When the round trip in flight started.
    pending: Mutex<Option<Instant>>,
    /// The last failure, for `status`.
    error: Mutex<Option<String>>,
    stop: AtomicBool,
}

pub struct Prober {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Prober {
    /// Probe once a period; `owner`, when given, is the slice whose process must hold the
    /// probed port.
    pub fn start(
        probe: Probe,
        period: Duration,
        owner: Option<PeerCheck>,
    ) -> std::io::Result<Prober> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let timeout = period.max(Duration::from_millis(500));
        let thread = std::thread::Builder::new()
            .name("guard-probe".into())
            .spawn(move || probe_loop(probe, period, timeout, owner, &s))?;
        Ok(Prober {
            shared,
            thread: Some(thread),
        })
    }

    /// The slowest round trip since the last call, or the one in flight if it has taken
    /// longer.
    pub fn take(&self) -> Option<f64> {
        let done = self.shared.worst_ms.lock().ok()?.take();
        let pending = self
            .shared
            .pending
            .lock()
            .ok()?
            .map(|t| t.elapsed().as_secs_f64() * 1e3);
        match (done, pending) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn error(&self) -> Option<String> {
        self.shared.error.lock().ok()?.clone()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn set<T>(m: &Mutex<T>, v: T) {
    if let Ok(mut g) = m.lock() {
        *g = v;
    }
}

fn probe_loop(
    probe: Probe,
    period: Duration,
    timeout: Duration,
    mut owner: Option<PeerCheck>,
    s: &Shared,
) {
    let mut conn: Option<TcpStream> = None;
    let addr = match probe {
        Probe::Tcp(a) | Probe::Redis(a) => a,
    };
    while !s.stop.load(Ordering::Relaxed) {
        // Before a new connection, and outside the timed round trip: whose port it is.
        let checked = match owner.as_mut() {
            Some(o) if conn.is_none() => o.check(addr),
            _ => Ok(()),
        };
        let started = Instant::now();
        let result = match checked {
            Err(why) => Err(std::io::Error::other(why)),
            Ok(()) => {
                set(&s.pending, Some(started));
                let deadline = started + timeout;
                let r = match probe {
                    Probe::Tcp(_) => connect(addr, deadline).map(drop),
                    Probe::Redis(_) => ping(&mut conn, addr, deadline),
                };
                set(&s.pending, None);
                r
            }
        };
        let ms = match &result {
            Ok(()) => started.elapsed().as_secs_f64() * 1e3,
            Err(e)
                if e.kind() == std::io::ErrorKind::TimedOut
                    || e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                started.elapsed().as_secs_f64() * 1e3
            }
            Err(_) => f64::NAN,
        };
        set(&s.error, result.err().map(|e| format!("{probe}: {e}")));
        if ms.is_finite() {
            if let Ok(mut w) = s.worst_ms.lock() {
                *w = Some(w.map_or(ms, |old| old.max(ms)));
            }
        }
        std::thread::sleep(period.saturating_sub(started.elapsed()));
    }
}

fn too_late() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no answer within the probe's deadline",
    )
}

/// What is left until `deadline`, or a timeout error.
fn left(deadline: Instant) -> std::io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(too_late());
    }
    Ok(d)
}

/// A socket timeout (EAGAIN) said as what it is.
fn timed_out(e: std::io::Error) -> std::io::Error {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => too_late(),
        _ => e,
    }
}

/// A connection to the service.
fn connect(addr: SocketAddr, deadline: Instant) -> std::io::Result<TcpStream> {
    TcpStream::connect_timeout(&addr, left(deadline)?).map_err(timed_out)
}

/// The longest reply line read ("+PONG\r\n" and error lines are short).
const MAX_REPLY: usize = 256;

/// One PING on the kept connection (made again after any failure), within `deadline`.
fn ping(conn: &mut Option<TcpStream>, addr: SocketAddr, deadline: Instant) -> std::io::Result<()> {
    if conn.is_none() {
        let c = connect(addr, deadline)?;
        c.set_nodelay(true)?;
        *conn = Some(c);
    }
    let r = (|| {
        let c = conn.as_mut().expect("connected above");
        c.set_write_timeout(Some(left(deadline)?))?;
        c.write_all(b"PING\r\n").map_err(timed_out)?;
        let line = read_line(c, deadline)?;
        if line.trim_end() == "+PONG" {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "unexpected reply {:?}",
                line.trim_end()
            )))
        }
    })();
    if r.is_err() {
        *conn = None;
    }
    r
}

/// One reply line of at most [`MAX_REPLY`] bytes, all of it before `deadline`: each read
/// waits only for what is left, so a service that sends a byte now and then cannot stretch
/// the round trip.
fn read_line(c: &mut TcpStream, deadline: Instant) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut buf = [0u8; 64];
    while !line.contains(&b'\n') {
        if line.len() >= MAX_REPLY {
            return Err(std::io::Error::other("reply line too long"));
        }
        c.set_read_timeout(Some(left(deadline)?))?;
        let want = buf.len().min(MAX_REPLY - line.len());
        let n = c.read(&mut buf[..want]).map_err(timed_out)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the service closed the connection",
            ));
        }
        line.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Checks that the probed port is held by a process of the protected slice: the kernel's
/// table of listening sockets (sock_diag) gives the socket that takes a connection to the
/// address, and /proc/PID/fd of the slice's processes who holds it. A verdict is kept while
/// the listening socket stays the same (for [`PeerCheck::RECHECK`] at most).
pub struct PeerCheck {
    reader: CgroupFs,
    slice: SliceName,
    /// The listening sockets last judged, and the verdict.
    last: Option<(Vec<u32>, Result<(), String>, Instant)>,
}

impl PeerCheck {
    pub const RECHECK: Duration = Duration::from_secs(10);

    pub fn new(reader: CgroupFs, slice: SliceName) -> PeerCheck {
        PeerCheck {
            reader,
            slice,
            last: None,
        }
    }

    /// Ok when a process of the slice holds the socket that takes connections to `addr`, or
    /// when no socket of this host does (a remote service: the kernel cannot tell).
    pub fn check(&mut self, addr: SocketAddr) -> Result<(), String> {
        let listeners = sockdiag::listeners(addr.port())
            .map_err(|e| format!("cannot read the kernel's socket table: {e}"))?;
        let taking = taking(&listeners, addr);
        if taking.is_empty() {
            return Ok(());
        }
        let inodes: Vec<u32> = taking.iter().map(|s| s.inode).collect();
        if let Some((seen, verdict, at)) = &self.last {
            if *seen == inodes && at.elapsed() < Self::RECHECK {
                return verdict.clone();
            }
        }
        let pids = self.reader.pids(&self.slice);
        let verdict = match taking
            .iter()
            .find(|s| !pids.iter().any(|p| sockdiag::holds(*p, s.inode)))
        {
            None => Ok(()),
            Some(s) => Err(format!(
                "{addr} is taken by a socket of UID {} that no process of slice {} holds (another program listens there)",
                s.uid, self.slice
            )),
        };
        self.last = Some((inodes, verdict.clone(), Instant::now()));
        verdict
    }
}

/// The listening sockets a connection to `addr` reaches, as the kernel picks them: one bound
/// to the very address, else one bound to any address of its family, else (for IPv4) an
/// IPv6 socket bound to any address.
fn taking(listeners: &[sockdiag::TcpSocket], addr: SocketAddr) -> Vec<sockdiag::TcpSocket> {
    let any = |ip: &IpAddr| ip.is_unspecified();
    let levels: [&dyn Fn(&SocketAddr) -> bool; 3] = [
        &|l| l.ip() == addr.ip(),
        &|l| any(&l.ip()) && l.is_ipv4() == addr.is_ipv4(),
        &|l| any(&l.ip()) && l.is_ipv6() && addr.is_ipv4(),
    ];
    for matches in levels {
        let found: Vec<_> = listeners
            .iter()
            .filter(|s| s.local.port() == addr.port() && matches(&s.local))
            .copied()
            .collect();
        if !found.is_empty() {
            return found;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;

    #[test]
    fn redis_ping_round_trips_are_timed() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut w = c;
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                std::thread::sleep(Duration::from_millis(3));
                let _ = w.write_all(b"+PONG\r\n");
                line.clear();
            }
        });
        let p = Prober::start(Probe::Redis(addr), Duration::from_millis(20), None).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let ms = p.take().expect("a round trip");
        assert!((3.0..500.0).contains(&ms), "{ms}");
        assert!(p.error().is_none());
    }

    #[test]
    fn a_refused_probe_is_an_error_not_a_latency() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let p = Prober::start(Probe::Tcp(addr), Duration::from_millis(20), None).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(p.take().is_none());
        assert!(p.error().is_some());
    }

    #[test]
    fn a_reply_dripped_byte_by_byte_times_out_at_one_deadline_and_shows_while_pending() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                // One byte every 100 ms, never a newline.
                std::thread::spawn(move || {
                    while c.write_all(b"+").is_ok() {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
            }
        });
        let p = Prober::start(Probe::Redis(addr), Duration::from_millis(50), None).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        // Still pending: it counts as the time it has taken.
        let pending = p.take().expect("the pending round trip");
        assert!(pending >= 200.0, "{pending}");
        std::thread::sleep(Duration::from_millis(600));
        // Timed out at the 500 ms deadline, although a byte came every 100 ms.
        let ms = p.take().expect("a round trip");
        assert!((450.0..2000.0).contains(&ms), "{ms}");
        let e = p.error().unwrap_or_default();
        assert!(e.contains("no answer within the probe's deadline"), "{e}");
    }

    #[test]
    fn the_listener_that_takes_a_connection_is_picked_as_the_kernel_does() {
        let s = |local: &str| sockdiag::TcpSocket {
            local: local.parse().unwrap(),
            remote: "0.0.0.0:0".parse().unwrap(),
            state: 10,
            uid: 0,
            inode: 1,
        };
        let a: SocketAddr = "127.0.0.1:6379".parse().unwrap();
        let all = [s("0.0.0.0:6379"), s("[::]:6379"), s("127.0.0.1:6380")];
        assert_eq!(taking(&all, a)[0].local, all[0].local);
        assert_eq!(taking(&all[1..], a)[0].local, all[1].local);
        assert!(taking(&all[2..], a).is_empty());
        let exact = [s("0.0.0.0:6379"), s("127.0.0.1:6379")];
        assert_eq!(taking(&exact, a).len(), 1);
        assert_eq!(taking(&exact, a)[0].local, exact[1].local);
    }
}
