//! What the machine did during a scenario, sampled every few hundred milliseconds while the
//! load runs: the database threads' run-queue waits, the CPU time of the server, helper and
//! load generator slices, and the machine's idle and steal time. The measured window's
//! figures come from the samples nearest to its start and end.

use super::diag::{IoProbe, IoSnap, IoWindow};
use bulkhead::plan::SliceName;
use bulkhead_sys::sched;
use bulkhead_testkit::groups::Groups;
use bulkhead_testkit::host::{cpu_times, CpuTimes};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    /// Summed over the database's threads.
    pub wait_ns: u64,
    pub runs: u64,
    pub server_us: Option<u64>,
    pub helper_us: Option<u64>,
    pub loadgen_us: Option<u64>,
    pub cpu: Option<CpuTimes>,
    /// The I/O path's counters, when the scenario follows them.
    pub io: Option<IoSnap>,
}

/// The window's figures.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Window {
    /// CPUs used, on average.
    pub server_cpus: f64,
    pub helper_cpus: f64,
    pub loadgen_cpus: f64,
    /// CPUs the machine left idle.
    pub idle_cpus: f64,
    /// Share of the machine's CPU time stolen by the hypervisor.
    pub steal: f64,
    /// The database threads' mean run-queue wait per time they ran, microseconds.
    pub wait_per_run_us: f64,
    /// The database's threads waiting for a CPU, on average (their run-queue wait over the
    /// window's length).
    #[serde(default)]
    pub runq_threads: f64,
}

pub struct Sampler<'a> {
    fs: &'a Groups,
    /// The database's main process; every process of the server slice is read.
    pid: u32,
    slices: [SliceName; 3],
    /// Where the hog runs when it is not in the helper slice (the "free" cgroup).
    hog_dir: Option<PathBuf>,
    io: Option<&'a IoProbe>,
    pub samples: Vec<Sample>,
}

impl<'a> Sampler<'a> {
    /// `slices`: server, helper, load generator.
    pub fn new(fs: &'a Groups, pid: u32, slices: [SliceName; 3]) -> Sampler<'a> {
        Sampler {
            fs,
            pid,
            slices,
            hog_dir: None,
            io: None,
            samples: Vec::new(),
        }
    }

    /// Also read the I/O path's counters with every sample.
    pub fn follow_io(&mut self, probe: Option<&'a IoProbe>) {
        self.io = probe;
    }

    /// Count the hog's CPU in this plain cgroup (relative to the bench root) instead.
    pub fn hog_in(&mut self, rel: PathBuf) {
        self.hog_dir = Some(rel);
    }

    pub fn take(&mut self) {
        let (mut wait_ns, mut runs) = (0, 0);
        let [server, helper, loadgen] = &self.slices;
        // Every process of the server slice (PostgreSQL runs one per connection).
        let mut pids = self.fs.pids(server);
        if pids.is_empty() {
            pids.push(self.pid as i32);
        }
        for pid in pids {
            for tid in sched::threads(pid) {
                if let Some(s) = sched::schedstat(pid, tid) {
                    wait_ns += s.wait_ns;
                    runs += s.slices;
                }
            }
        }
        self.samples.push(Sample {
            at: Instant::now(),
            wait_ns,
            runs,
            server_us: self.fs.cpu_usage_us(server),
            helper_us: match &self.hog_dir {
                Some(d) => self.fs.dir_cpu_usage_us(d),
                None => self.fs.cpu_usage_us(helper),
            },
            loadgen_us: self.fs.cpu_usage_us(loadgen),
            cpu: cpu_times(),
            io: self.io.map(IoProbe::snap),
        });
    }

    fn nearest(&self, t: Instant) -> Option<usize> {
        (0..self.samples.len()).min_by_key(|&i| {
            let at = self.samples[i].at;
            if at > t {
                at - t
            } else {
                t - at
            }
        })
    }

    /// The figures between the samples nearest to `from` and `to`.
    pub fn window(&self, from: Instant, to: Instant) -> Window {
        let (Some(a), Some(b)) = (self.nearest(from), self.nearest(to)) else {
            return Window::default();
        };
        figures(&self.samples[a], &self.samples[b])
    }

    /// The I/O path between the samples nearest to `from` and `to`, if it was followed.
    pub fn io_window(&self, from: Instant, to: Instant) -> Option<IoWindow> {
        let probe = self.io?;
        let (a, b) = (self.nearest(from)?, self.nearest(to)?);
        let snaps: Vec<&IoSnap> = self.samples[a..=b.max(a)]
            .iter()
            .filter_map(|s| s.io.as_ref())
            .collect();
        Some(probe.window(&snaps))
    }
}

fn figures(a: &Sample, b: &Sample) -> Window {
    let secs = b.at.saturating_duration_since(a.at).as_secs_f64();
    if secs <= 0.0 {
        return Window::default();
    }
    let cpus = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (Some(x), Some(y)) if y >= x => (y - x) as f64 / 1e6 / secs,
        _ => 0.0,
    };
    let (idle_cpus, steal) = match (a.cpu, b.cpu) {
        (Some(x), Some(y)) if y.total > x.total => {
            let total = (y.total - x.total) as f64;
            let ncpu = total / (secs * bulkhead_sys::process::clock_ticks() as f64);
            (
                (y.idle - x.idle) as f64 / total * ncpu,
                (y.steal - x.steal) as f64 / total,
            )
        }
        _ => (0.0, 0.0),
    };
    let runs = b.runs.saturating_sub(a.runs);
    let waited = b.wait_ns.saturating_sub(a.wait_ns) as f64;
    Window {
        runq_threads: waited / 1e9 / secs,
        server_cpus: cpus(a.server_us, b.server_us),
        helper_cpus: cpus(a.helper_us, b.helper_us),
        loadgen_cpus: cpus(a.loadgen_us, b.loadgen_us),
        idle_cpus,
        steal,
        wait_per_run_us: if runs > 0 {
            waited / 1e3 / runs as f64
        } else {
            0.0
        },
    }
}
