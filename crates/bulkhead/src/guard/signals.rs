//! What the guard reads each period, cheaply (a handful of small files): the protected
//! slice's pressure stall totals (cpu, io, memory; from its directory on the unified
//! hierarchy, which hybrid hosts have too), its threads' run-queue waits
//! (/proc/PID/task/TID/schedstat), the CPU time of the protected slice and of each sideload,
//! the sideloads' I/O bytes and CPU pressure, and the machine's steal and idle time.

use super::control::{Reading, Use};
use bulkhead_cgroups::stats::{cpu_usage_us, io_bytes};
use bulkhead_cgroups::CgroupFs;
use bulkhead_plan::SliceName;
use bulkhead_sys::host::{cpu_times, CpuTimes};
use bulkhead_sys::psi::{read_totals, Totals};
use bulkhead_sys::sched;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// At most this many threads of the protected slice are read each period.
pub const MAX_THREADS: usize = 256;
/// The thread list is read again this often.
const THREADS_EVERY: Duration = Duration::from_secs(1);

/// The files the guard reads.
pub struct Sources {
    reader: CgroupFs,
    protect: SliceName,
    sideloads: Vec<SliceName>,
    /// cpu.pressure, io.pressure, memory.pressure of the protected slice, where they exist.
    pub psi: [Option<PathBuf>; 3],
    /// Each sideload's cpu.pressure, where it exists (the CPU progress floor's signal).
    pub side_psi: Vec<Option<PathBuf>>,
    threads: Vec<(i32, i32)>,
    threads_at: Option<Instant>,
}

/// One look at everything.
#[derive(Debug, Clone)]
pub struct Sample {
    at: Instant,
    psi: [Option<Totals>; 3],
    /// Summed over the protected slice's threads.
    wait_ns: u64,
    runs: u64,
    /// Which threads the sums cover (a changed set makes the difference meaningless).
    threads: usize,
    service_us: Option<u64>,
    side_cpu_us: Vec<Option<u64>>,
    /// Bytes read and written, per sideload.
    side_io: Vec<Option<(u64, u64)>>,
    side_wait: Vec<Option<Totals>>,
    cpu: Option<CpuTimes>,
}

/// What two samples say about the period between them.
#[derive(Debug, Clone, Default)]
pub struct Period {
    pub reading: Reading,
    /// Mean run-queue wait per time the protected threads ran, microseconds.
    pub wait_per_run_us: Option<f64>,
    /// CPUs the protected slice used.
    pub service_cpus: Option<f64>,
    /// Share of the machine's CPU time the hypervisor gave to others.
    pub steal: f64,
}

impl Sources {
    pub fn new(reader: CgroupFs, protect: SliceName, sideloads: Vec<SliceName>) -> Sources {
        let psi = ["cpu.pressure", "io.pressure", "memory.pressure"]
            .map(|f| pressure(&reader, &protect, f));
        let side_psi = sideloads
            .iter()
            .map(|s| pressure(&reader, s, "cpu.pressure"))
            .collect();
        Sources {
            reader,
            protect,
            sideloads,
            psi,
            side_psi,
            threads: vec![],
            threads_at: None,
        }
    }

    /// The protected slice's threads (at most [`MAX_THREADS`]), read again once a second.
    fn refresh_threads(&mut self) {
        if self.threads_at.is_some_and(|t| t.elapsed() < THREADS_EVERY) {
            return;
        }
        self.threads_at = Some(Instant::now());
        self.threads.clear();
        for pid in self.reader.pids(&self.protect) {
            for tid in sched::threads(pid) {
                if self.threads.len() >= MAX_THREADS {
                    return;
                }
                self.threads.push((pid, tid));
            }
        }
    }

    /// The protected slice's processes (for the scheduler slice re-check).
    pub fn protected_pids(&self) -> Vec<i32> {
        self.reader.pids(&self.protect)
    }

    pub fn sample(&mut self) -> Sample {
        self.refresh_threads();
        let (mut wait_ns, mut runs) = (0, 0);
        for &(pid, tid) in &self.threads {
            if let Some(s) = sched::schedstat(pid, tid) {
                wait_ns += s.wait_ns;
                runs += s.slices;
            }
        }
        Sample {
            at: Instant::now(),
            psi: self.psi.clone().map(|p| p.and_then(|p| read_totals(&p))),
            wait_ns,
            runs,
            threads: self.threads.len(),
            service_us: cpu_usage_us(&self.reader, &self.protect),
            side_cpu_us: self
                .sideloads
                .iter()
                .map(|s| cpu_usage_us(&self.reader, s))
                .collect(),
            side_io: self
                .sideloads
                .iter()
                .map(|s| io_bytes(&self.reader, s))
                .collect(),
            side_wait: self
                .side_psi
                .iter()
                .map(|p| p.as_ref().and_then(|p| read_totals(p)))
                .collect(),
            cpu: cpu_times(),
        }
    }
}

/// A slice's pressure file (`cpu.pressure`, ...) on the unified hierarchy, if it reads.
pub fn pressure(reader: &CgroupFs, slice: &SliceName, file: &str) -> Option<PathBuf> {
    let u = reader.layout.unified.as_ref()?;
    Some(reader.dir(u, slice).join(file)).filter(|p| read_totals(p).is_some())
}

/// A rate per second between two counters (None when either is missing or it went back).
fn rate(a: Option<u64>, b: Option<u64>, secs: f64) -> Option<f64> {
    let (a, b) = (a?, b?);
    (b >= a && secs > 0.0).then(|| (b - a) as f64 / secs)
}

/// The period between two samples.
pub fn period(prev: &Sample, cur: &Sample, probe_ms: Option<f64>) -> Period {
    let dt = cur.at.saturating_duration_since(prev.at);
    let secs = dt.as_secs_f64();
    let us = secs * 1e6;
    let share = |a: Option<Totals>, b: Option<Totals>| {
        rate(Some(a?.some_us), Some(b?.some_us), 1.0).map(|d| (d / us).min(1.0))
    };
    let psi_share = |i: usize| share(prev.psi[i], cur.psi[i]);
    let same_threads = prev.threads == cur.threads && cur.threads > 0;
    let wait =
        (same_threads && cur.wait_ns >= prev.wait_ns).then(|| (cur.wait_ns - prev.wait_ns) as f64);
    let runs = cur.runs.saturating_sub(prev.runs);
    // Without PSI, the threads' summed wait stands in for the CPU stall share.
    let cpu = psi_share(0).or_else(|| wait.map(|w| (w / 1e3 / us).min(1.0)));
    let sideloads = prev
        .side_cpu_us
        .iter()
        .zip(&cur.side_cpu_us)
        .zip(prev.side_io.iter().zip(&cur.side_io))
        .zip(prev.side_wait.iter().zip(&cur.side_wait))
        .map(|(((a, b), (x, y)), (p, q))| {
            let dir = |f: fn(&(u64, u64)) -> u64| {
                rate(x.as_ref().map(f), y.as_ref().map(f), secs).unwrap_or(0.0)
            };
            let (read, write) = (dir(|t| t.0), dir(|t| t.1));
            Use {
                cpu: rate(*a, *b, secs).map_or(0.0, |r| r / 1e6),
                io_bps: read + write,
                io_dir_bps: read.max(write),
                wait: share(*p, *q),
            }
        })
        .collect();
    let of_host = |f: fn(&CpuTimes) -> u64| match (prev.cpu, cur.cpu) {
        (Some(a), Some(b)) if b.total > a.total => {
            Some(f(&b).saturating_sub(f(&a)) as f64 / (b.total - a.total) as f64)
        }
        _ => None,
    };
    let steal = of_host(|t| t.steal).unwrap_or(0.0);
    Period {
        reading: Reading {
            dt,
            cpu,
            io: psi_share(1),
            memory: psi_share(2),
            probe_ms,
            sideloads,
            host_idle: of_host(|t| t.idle),
        },
        wait_per_run_us: (runs > 0).then(|| wait.unwrap_or(0.0) / 1e3 / runs as f64),
        service_cpus: rate(prev.service_us, cur.service_us, secs).map(|r| r / 1e6),
        steal,
    }
}
