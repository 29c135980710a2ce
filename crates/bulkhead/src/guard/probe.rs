//! The optional probe of the protected service: a thread that, once a period, times a TCP
//! connect or a Redis `PING` on a kept connection. The guard takes the slowest round trip
//! since it last looked; a probe that times out counts as the timeout.

use bulkhead_plan::guard::Probe;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Shared between the probing thread and the guard.
#[derive(Default)]
struct Shared {
    /// Slowest round trip since the guard last took it, milliseconds.
    worst_ms: Mutex<Option<f64>>,
    /// The last failure, for `status`.
    error: Mutex<Option<String>>,
    stop: AtomicBool,
}

pub struct Prober {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Prober {
    pub fn start(probe: Probe, period: Duration) -> std::io::Result<Prober> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let timeout = period.max(Duration::from_millis(500));
        let thread = std::thread::Builder::new()
            .name("guard-probe".into())
            .spawn(move || probe_loop(probe, period, timeout, &s))?;
        Ok(Prober {
            shared,
            thread: Some(thread),
        })
    }

    /// The slowest round trip since the last call.
    pub fn take(&self) -> Option<f64> {
        self.shared.worst_ms.lock().ok()?.take()
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

fn probe_loop(probe: Probe, period: Duration, timeout: Duration, s: &Shared) {
    let mut conn: Option<BufReader<TcpStream>> = None;
    while !s.stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let result = match probe {
            Probe::Tcp(addr) => TcpStream::connect_timeout(&addr, timeout).map(drop),
            Probe::Redis(addr) => ping(&mut conn, addr, timeout),
        };
        let ms = match &result {
            Ok(()) => started.elapsed().as_secs_f64() * 1e3,
            Err(e)
                if e.kind() == std::io::ErrorKind::TimedOut
                    || e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                timeout.as_secs_f64() * 1e3
            }
            Err(_) => f64::NAN,
        };
        if let Ok(mut e) = s.error.lock() {
            *e = result.err().map(|e| format!("{probe:?}: {e}"));
        }
        if ms.is_finite() {
            if let Ok(mut w) = s.worst_ms.lock() {
                *w = Some(w.map_or(ms, |old| old.max(ms)));
            }
        }
        std::thread::sleep(period.saturating_sub(started.elapsed()));
    }
}

/// The longest reply line read ("+PONG\r\n" and error lines are short).
const MAX_REPLY: u64 = 256;

/// One PING on the kept connection (made again after any failure).
fn ping(
    conn: &mut Option<BufReader<TcpStream>>,
    addr: std::net::SocketAddr,
    timeout: Duration,
) -> std::io::Result<()> {
    if conn.is_none() {
        let c = TcpStream::connect_timeout(&addr, timeout)?;
        c.set_read_timeout(Some(timeout))?;
        c.set_write_timeout(Some(timeout))?;
        c.set_nodelay(true)?;
        *conn = Some(BufReader::new(c));
    }
    let r = (|| {
        let c = conn.as_mut().expect("connected above");
        c.get_mut().write_all(b"PING\r\n")?;
        let mut line = String::new();
        // One short line: a service that streams without a newline cannot grow this.
        c.by_ref().take(MAX_REPLY).read_line(&mut line)?;
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

#[cfg(test)]
mod tests {
    use super::*;
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
        let p = Prober::start(Probe::Redis(addr), Duration::from_millis(20)).unwrap();
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
        let p = Prober::start(Probe::Tcp(addr), Duration::from_millis(20)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(p.take().is_none());
        assert!(p.error().is_some());
    }
}
