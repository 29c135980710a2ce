//! The monitoring probe of every scenario: a tiny exporter (`bench hog exporter`, 5 ms of
//! CPU per scrape) runs in the plan's monitoring slice for the whole bench, and during each
//! measured window the bench scrapes it once a second with a 10 s deadline (Prometheus's
//! default scrape timeout), as a monitoring server on another host would.

use crate::exporter::{probe, ProbeStats};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One scrape a second.
pub const EVERY: Duration = Duration::from_secs(1);
/// A scrape not answered in this long counts as lost.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// The exporter, stopped when dropped.
pub struct Exporter {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        crate::child::stop(&mut self.child, libc::SIGTERM, Duration::from_secs(2));
    }
}

impl Exporter {
    /// Start it in the cgroups whose `cgroup.procs` files are given, and wait (up to 10 s)
    /// until it answers.
    pub fn start(
        exe: &Path,
        port: u16,
        procs: &[PathBuf],
        limit: Duration,
    ) -> Result<Exporter, String> {
        let mut c = Command::new(exe);
        c.args(["hog", "exporter", "--port", &port.to_string()])
            .args(["--seconds", &limit.as_secs().max(1).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = bulkhead_testkit::groups::spawn_joined(&mut c, procs)
            .map_err(|e| format!("cannot start the monitoring exporter: {e}"))?;
        let mut e = Exporter {
            child,
            addr: ([127, 0, 0, 1], port).into(),
        };
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if probe(e.addr, Duration::from_secs(2)).is_ok() {
                return Ok(e);
            }
            if let Ok(Some(st)) = e.child.try_wait() {
                return Err(format!("the monitoring exporter ended at its start ({st})"));
            }
            if Instant::now() > until {
                return Err(format!(
                    "the monitoring exporter did not answer on {} within 10 s",
                    e.addr
                ));
            }
            std::thread::yield_now();
        }
    }
}

/// Scrapes running in a thread of the bench.
pub struct Prober {
    thread: JoinHandle<Vec<Option<Duration>>>,
}

impl Prober {
    /// Scrape `addr` every second from `after` on, for `span`.
    pub fn start(addr: SocketAddr, after: Duration, span: Duration) -> Prober {
        let begin = Instant::now() + after;
        let thread = std::thread::spawn(move || {
            let mut times = Vec::new();
            let mut next = begin;
            while next < begin + span && !crate::stop::requested() {
                // The schedule of the measurement, not a synchronisation: scrape on the tick.
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                times.push(probe(addr, DEADLINE).ok());
                // A slow scrape delays the next one, as a scraper's interval does.
                next = (next + EVERY).max(Instant::now());
            }
            times
        });
        Prober { thread }
    }

    pub fn finish(self) -> ProbeStats {
        let times = self.thread.join().unwrap_or_default();
        ProbeStats::from(&times, DEADLINE)
    }
}
