//! A tiny monitoring exporter and the probe that scrapes it, as Prometheus scrapes
//! node_exporter: `bench hog exporter` answers each HTTP GET after a fixed amount of its own
//! CPU time (5 ms: the work of rendering a scrape), one connection at a time; [`probe`] times
//! one GET with a deadline. Placed in the monitoring slice, it shows whether the agents that
//! watch the database still answer while the database and its helpers keep the CPUs busy.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The most of a request the exporter reads.
const MAX_REQUEST: usize = 8 * 1024;
/// How long the exporter waits for a client's request (a silent client cannot hold it).
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Spin until this thread has run for `work` more CPU time (preemption does not count).
fn burn(work: Duration) {
    let until = thread_cpu() + work;
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    while thread_cpu() < until {
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        std::hint::black_box(x);
    }
}

/// Read a request's head (up to the blank line, bounded in size and time).
fn read_head(s: &mut TcpStream) -> std::io::Result<()> {
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut chunk)?;
        if n == 0 || buf.len() + n > MAX_REQUEST {
            return Err(std::io::Error::other("no complete request"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

/// Serve on 127.0.0.1:`port` until `done()` says so; how many scrapes it answered.
pub fn serve(port: u16, work: Duration, done: impl Fn() -> bool) -> std::io::Result<u64> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    let mut answered = 0u64;
    while !done() {
        let mut s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Nothing to accept: wait on the socket, not on a fixed pause.
                wait_readable(&listener, Duration::from_millis(200));
                continue;
            }
            Err(e) => return Err(e),
        };
        s.set_nonblocking(false)?;
        if read_head(&mut s).is_err() {
            continue;
        }
        burn(work);
        let body = format!("bulkhead_bench_scrapes_total {answered}\n");
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(reply.as_bytes()).is_ok() {
            answered += 1;
        }
    }
    Ok(answered)
}

fn wait_readable(l: &TcpListener, most: Duration) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(l, PollFlags::IN)];
    let t = Timespec {
        tv_sec: most.as_secs() as i64,
        tv_nsec: i64::from(most.subsec_nanos()),
    };
    let _ = poll(&mut fds, Some(&t));
}

/// One scrape: connect, GET /metrics, read the whole answer, within `deadline`; its time.
pub fn probe(addr: SocketAddr, deadline: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    let left = || {
        deadline
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(1))
    };
    let mut s = TcpStream::connect_timeout(&addr, deadline).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(left()))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: exporter\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        s.set_read_timeout(Some(left()))
            .map_err(|e| e.to_string())?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) if got.len() + n <= MAX_REQUEST => got.extend_from_slice(&chunk[..n]),
            Ok(_) => return Err("the answer is too long".into()),
            Err(e) => return Err(format!("no answer within {deadline:?}: {e}")),
        }
        if start.elapsed() > deadline {
            return Err(format!("no answer within {deadline:?}"));
        }
    }
    if !got.starts_with(b"HTTP/1.1 200") {
        return Err("not an HTTP 200 answer".into());
    }
    Ok(start.elapsed())
}

/// What the probes of one run saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProbeStats {
    /// Probes sent (one a second).
    pub sent: u64,
    /// Answered within the deadline.
    pub answered: u64,
    /// Answered within 1 s.
    pub within_1s: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    /// The slowest answer, or the deadline for one that never came.
    pub max_ms: f64,
}

impl ProbeStats {
    /// From each probe's time (None: no answer within the deadline).
    pub fn from(times: &[Option<Duration>], deadline: Duration) -> ProbeStats {
        // An unanswered probe counts at the deadline: percentiles then never flatter.
        let mut ms: Vec<f64> = times
            .iter()
            .map(|t| t.unwrap_or(deadline).as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        let q = |p: f64| crate::stats::quantile(&ms, p);
        ProbeStats {
            sent: times.len() as u64,
            answered: times.iter().filter(|t| t.is_some()).count() as u64,
            within_1s: times
                .iter()
                .filter(|t| t.is_some_and(|d| d <= Duration::from_secs(1)))
                .count() as u64,
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
            max_ms: ms.last().copied().unwrap_or(f64::NAN),
        }
    }

    /// The share answered within 1 s (NaN: none sent).
    pub fn share_within_1s(&self) -> f64 {
        if self.sent == 0 {
            f64::NAN
        } else {
            self.within_1s as f64 / self.sent as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unanswered_probe_counts_at_the_deadline() {
        let d = Duration::from_secs(10);
        let times = [
            Some(Duration::from_millis(5)),
            Some(Duration::from_millis(1500)),
            None,
            Some(Duration::from_millis(7)),
        ];
        let s = ProbeStats::from(&times, d);
        assert_eq!((s.sent, s.answered, s.within_1s), (4, 3, 2));
        assert_eq!(s.max_ms, 10_000.0);
        assert_eq!(s.share_within_1s(), 0.5);
        assert!(ProbeStats::from(&[], d).share_within_1s().is_nan());
    }

    #[test]
    fn the_exporter_answers_a_probe_after_its_work() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let server = std::thread::spawn(move || {
            serve(port, Duration::from_millis(5), move || {
                flag.load(std::sync::atomic::Ordering::Relaxed)
            })
        });
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(10);
        let took = loop {
            match probe(addr, Duration::from_secs(5)) {
                Ok(t) => break t,
                Err(e) if Instant::now() > deadline => panic!("no answer: {e}"),
                Err(_) => std::thread::yield_now(),
            }
        };
        assert!(took >= Duration::from_millis(5), "answered in {took:?}");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(server.join().unwrap().unwrap() >= 1);
    }
}
