//! Where the database's I/O waits, per scenario: the devices on its path (a loop device and
//! the disk under it: operations, their mean latency from queueing to completion, requests
//! in flight), the ext4 journals there (commits and their time), the slices' I/O per device
//! (io.stat: does the loop worker charge the helper's I/O to the helper on the disk below?)
//! and their I/O pressure, the machine's dirty and writeback memory, and the database
//! threads' blocked time by wait point ([`stacks`]). Counters are read with the bench's
//! other samples; the window's figures come from the samples at its start and end.

pub mod block;
pub mod stacks;

use block::{Device, DiskStat, DiskWindow, JournalStat};
use bulkhead_testkit::host::{pressure_totals, PressureTotals};
use serde::{Deserialize, Serialize};
use stacks::Waits;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A cgroup whose I/O is followed: its io.stat (v2) or blkio files (v1), its io.pressure.
#[derive(Debug, Clone)]
pub struct Group {
    pub label: String,
    pub io_dir: Option<(PathBuf, bool)>,
    pub pressure: Option<PathBuf>,
}

impl Group {
    /// `io_dir`: the directory in the io (v2, `true`) or blkio (v1) hierarchy; `unified`:
    /// the directory on cgroup2, where io.pressure is (hybrid hosts have it too).
    pub fn new(label: &str, io_dir: Option<(PathBuf, bool)>, unified: Option<PathBuf>) -> Group {
        Group {
            label: label.into(),
            io_dir,
            pressure: unified.map(|d| d.join("io.pressure")),
        }
    }
}

/// What to read: the devices on the database's path (and on the other file system the
/// helpers may write to), their journals, and the groups.
#[derive(Debug, Clone, Default)]
pub struct IoProbe {
    pub devices: Vec<Device>,
    journals: Vec<(String, PathBuf)>,
    pub groups: Vec<Group>,
}

/// Bytes read and written per device (`MAJ:MIN`).
type PerDev = BTreeMap<String, (u64, u64)>;

/// One reading.
#[derive(Debug, Clone)]
pub struct IoSnap {
    at: Instant,
    disks: Vec<Option<DiskStat>>,
    journals: Vec<Option<JournalStat>>,
    groups: Vec<(PerDev, Option<PressureTotals>)>,
    dirty: (u64, u64),
}

/// A device over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceFigures {
    #[serde(flatten)]
    pub device: Device,
    #[serde(flatten)]
    pub w: DiskWindow,
}

/// A journal over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct JournalFigures {
    pub commits_per_s: f64,
    /// The kernel's moving average of the commit time, averaged over the samples, ms.
    pub commit_ms: f64,
}

/// A group over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupFigures {
    pub label: String,
    /// (device name, read MiB/s, written MiB/s) for each device on the path.
    pub per_device: Vec<(String, f64, f64)>,
    /// Share of the time some (full: all) of its tasks stalled on I/O.
    pub io_some: f64,
    pub io_full: f64,
}

/// Everything the window says about the I/O path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IoWindow {
    pub devices: Vec<DeviceFigures>,
    /// By device name.
    pub journals: Vec<(String, JournalFigures)>,
    pub groups: Vec<GroupFigures>,
    pub dirty_mib: f64,
    pub dirty_max_mib: f64,
    pub writeback_mib: f64,
    /// Filled in from the wait sampler.
    #[serde(default)]
    pub waits: Waits,
    /// The database's threads waiting for a CPU, on average (from the run-queue waits).
    #[serde(default)]
    pub runq_threads: f64,
}

/// `MAJ:MIN rbytes=.. wbytes=..` (v2) or `MAJ:MIN Read N` / `MAJ:MIN Write N` (v1).
pub fn parse_per_dev(text: &str) -> PerDev {
    let mut out = PerDev::new();
    for l in text.lines() {
        let mut it = l.split_whitespace();
        let Some(dev) = it.next().filter(|d| d.contains(':')) else {
            continue;
        };
        let e = out.entry(dev.to_string()).or_default();
        let rest: Vec<&str> = it.collect();
        match rest.as_slice() {
            ["Read", n] => e.0 += n.parse::<u64>().unwrap_or(0),
            ["Write", n] => e.1 += n.parse::<u64>().unwrap_or(0),
            kvs => {
                for kv in kvs {
                    match kv.split_once('=') {
                        Some(("rbytes", v)) => e.0 += v.parse::<u64>().unwrap_or(0),
                        Some(("wbytes", v)) => e.1 += v.parse::<u64>().unwrap_or(0),
                        _ => {}
                    }
                }
            }
        }
    }
    out
}

fn read_per_dev(dir: &Path, v2: bool) -> PerDev {
    let files: &[&str] = if v2 {
        &["io.stat"]
    } else {
        &[
            "blkio.throttle.io_service_bytes_recursive",
            "blkio.throttle.io_service_bytes",
        ]
    };
    files
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .map(|t| parse_per_dev(&t))
        .unwrap_or_default()
}

impl IoProbe {
    /// The devices under each of `paths` (deduplicated, in order) and their journals.
    pub fn new(paths: &[&Path], groups: Vec<Group>) -> IoProbe {
        let mut devices: Vec<Device> = Vec::new();
        for p in paths {
            for d in block::path_devices(p) {
                if !devices.iter().any(|x| x.dev == d.dev) {
                    devices.push(d);
                }
            }
        }
        let journals = devices
            .iter()
            .filter_map(|d| block::journal_of(d).map(|j| (d.name.clone(), j)))
            .collect();
        IoProbe {
            devices,
            journals,
            groups,
        }
    }

    pub fn snap(&self) -> IoSnap {
        IoSnap {
            at: Instant::now(),
            disks: self
                .devices
                .iter()
                .map(|d| block::read_stat(&d.name))
                .collect(),
            journals: self
                .journals
                .iter()
                .map(|(_, p)| block::read_journal(p))
                .collect(),
            groups: self
                .groups
                .iter()
                .map(|g| {
                    (
                        g.io_dir
                            .as_ref()
                            .map(|(d, v2)| read_per_dev(d, *v2))
                            .unwrap_or_default(),
                        g.pressure.as_deref().and_then(pressure_totals),
                    )
                })
                .collect(),
            dirty: block::read_dirty(),
        }
    }

    /// The window from the snapshot `a` to `b`, with the ones between for the means.
    pub fn window(&self, snaps: &[&IoSnap]) -> IoWindow {
        let (Some(a), Some(b)) = (snaps.first(), snaps.last()) else {
            return IoWindow::default();
        };
        let secs = b.at.saturating_duration_since(a.at).as_secs_f64().max(1e-3);
        let n = snaps.len() as f64;
        let mib = |x: u64| x as f64 / 1048576.0;
        let devices = self
            .devices
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                let (x, y) = (a.disks[i]?, b.disks[i]?);
                let mut w = block::window(&x, &y, secs);
                let inflight: Vec<f64> = snaps
                    .iter()
                    .filter_map(|s| s.disks[i].map(|s| s.in_flight as f64))
                    .collect();
                w.in_flight_mean = inflight.iter().sum::<f64>() / inflight.len().max(1) as f64;
                w.in_flight_max = inflight.iter().copied().fold(0.0, f64::max);
                Some(DeviceFigures {
                    device: d.clone(),
                    w,
                })
            })
            .collect();
        let journals = self
            .journals
            .iter()
            .enumerate()
            .filter_map(|(i, (name, _))| {
                let (x, y) = (a.journals[i]?, b.journals[i]?);
                let avgs: Vec<f64> = snaps
                    .iter()
                    .filter_map(|s| s.journals[i].map(|j| j.avg_commit_us as f64 / 1e3))
                    .collect();
                Some((
                    name.clone(),
                    JournalFigures {
                        commits_per_s: y.transactions.saturating_sub(x.transactions) as f64 / secs,
                        commit_ms: avgs.iter().sum::<f64>() / avgs.len().max(1) as f64,
                    },
                ))
            })
            .collect();
        let groups = self
            .groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let (ra, pa) = &a.groups[i];
                let (rb, pb) = &b.groups[i];
                let per_device = self
                    .devices
                    .iter()
                    .map(|d| {
                        let (r0, w0) = ra.get(&d.dev).copied().unwrap_or_default();
                        let (r1, w1) = rb.get(&d.dev).copied().unwrap_or_default();
                        (
                            d.name.clone(),
                            mib(r1.saturating_sub(r0)) / secs,
                            mib(w1.saturating_sub(w0)) / secs,
                        )
                    })
                    .collect();
                let share = |f: fn(&PressureTotals) -> Option<u64>| match (pa, pb) {
                    (Some(x), Some(y)) => match (f(x), f(y)) {
                        (Some(x), Some(y)) => (y.saturating_sub(x) as f64 / 1e6 / secs).min(1.0),
                        _ => 0.0,
                    },
                    _ => 0.0,
                };
                GroupFigures {
                    label: g.label.clone(),
                    per_device,
                    io_some: share(|t| Some(t.some_us)),
                    io_full: share(|t| t.full_us),
                }
            })
            .collect();
        let dirty: Vec<f64> = snaps.iter().map(|s| mib(s.dirty.0)).collect();
        IoWindow {
            devices,
            journals,
            groups,
            dirty_mib: dirty.iter().sum::<f64>() / n,
            dirty_max_mib: dirty.iter().copied().fold(0.0, f64::max),
            writeback_mib: snaps.iter().map(|s| mib(s.dirty.1)).sum::<f64>() / n,
            waits: Waits::default(),
            runq_threads: 0.0,
        }
    }
}

impl IoWindow {
    /// One line: where the database blocked, the devices, journals, pressure and dirty memory.
    pub fn line(&self) -> String {
        let mut o = String::new();
        let w = &self.waits;
        let _ = write!(
            o,
            "db blocked {:.2} of {:.1} threads: {}",
            w.blocked,
            w.threads,
            w.summary(3)
        );
        for d in &self.devices {
            let x = &d.w;
            let _ = write!(
                o,
                " | {} ({}): r {:.1} ms x{:.0}/s, w {:.1} ms x{:.0}/s, flush {:.1} ms x{:.0}/s, {:.1} in flight, {:.0}% busy",
                d.device.name,
                d.device.scheduler,
                x.read_ms,
                x.read_iops,
                x.write_ms,
                x.write_iops,
                x.flush_ms,
                x.flush_per_s,
                x.in_flight_mean,
                x.util * 100.0
            );
        }
        for (name, j) in &self.journals {
            let _ = write!(
                o,
                " | jbd2 {name}: {:.0} commits/s, {:.1} ms",
                j.commits_per_s, j.commit_ms
            );
        }
        for g in &self.groups {
            let moved: Vec<String> = g
                .per_device
                .iter()
                .filter(|(_, r, w)| r + w >= 0.05)
                .map(|(n, r, w)| format!("{n} r{r:.1}/w{w:.1}"))
                .collect();
            let _ = write!(
                o,
                " | {} io some {:.0}% full {:.0}%{}",
                g.label,
                g.io_some * 100.0,
                g.io_full * 100.0,
                if moved.is_empty() {
                    String::new()
                } else {
                    format!(" ({} MiB/s)", moved.join(", "))
                }
            );
        }
        let _ = write!(
            o,
            " | dirty {:.0} MiB (max {:.0}), writeback {:.1} MiB",
            self.dirty_mib, self.dirty_max_mib, self.writeback_mib
        );
        o
    }
}

/// Where the database waited with nothing to compare with (the baseline itself).
pub fn alone(run: &IoWindow) -> String {
    let mut parts = vec![format!(
        "waiting for a CPU {:.2} threads; {}",
        run.runq_threads,
        match run.waits.classes.first() {
            Some(c) => format!(
                "blocked {:.2} threads, {:.0}% of it in {}",
                run.waits.blocked,
                c.share * 100.0,
                c.what
            ),
            None => "never blocked on I/O".into(),
        }
    )];
    if let Some(d) = run.devices.first() {
        parts.push(format!(
            "{} ({}) write {:.1} ms, flush {:.1} ms",
            d.device.name, d.device.scheduler, d.w.write_ms, d.w.flush_ms
        ));
    }
    for (name, j) in &run.journals {
        parts.push(format!("jbd2 {name} commit {:.1} ms", j.commit_ms));
    }
    if let Some(g) = run.groups.first() {
        parts.push(format!("{} io pressure {:.0}%", g.label, g.io_some * 100.0));
    }
    parts.join("; ")
}

/// Where the database waited in `run` against its baseline, in one sentence: the wait
/// point that took most of its blocked time, the device whose latency grew most, the
/// journal's commit time and the server's I/O pressure.
pub fn verdict(run: &IoWindow, base: &IoWindow) -> String {
    let mut parts = Vec::new();
    // Which grew more: waiting for a CPU, or blocked on I/O (threads, on average)?
    let cpu = run.runq_threads - base.runq_threads;
    let io = run.waits.blocked - base.waits.blocked;
    let io_part = match run.waits.classes.first() {
        Some(c) => format!(
            "blocked on I/O {:.2} threads ({:.2} at baseline), {:.0}% of it in {}",
            run.waits.blocked,
            base.waits.blocked,
            c.share * 100.0,
            c.what
        ),
        None if run.waits.samples > 0 => "never blocked on I/O".into(),
        None => String::new(),
    };
    let cpu_part = format!(
        "waiting for a CPU {:.2} threads ({:.2} at baseline)",
        run.runq_threads, base.runq_threads
    );
    if cpu > io && cpu > 0.02 {
        parts.push(format!("mostly CPU: {cpu_part}"));
        parts.push(io_part);
    } else {
        parts.push(io_part);
        parts.push(cpu_part);
    }
    parts.retain(|p| !p.is_empty());
    let grew = run
        .devices
        .iter()
        .filter_map(|d| {
            let b = base
                .devices
                .iter()
                .find(|b| b.device.name == d.device.name)?;
            let worst = |w: &DiskWindow| w.write_ms.max(w.flush_ms).max(w.read_ms);
            Some((d, worst(&d.w), worst(&b.w)))
        })
        .max_by(|a, b| (a.1 - a.2).total_cmp(&(b.1 - b.2)));
    if let Some((d, now, then)) = grew {
        if now > then * 1.5 && now > 0.5 {
            parts.push(format!(
                "{} ({}) latency {:.1} ms vs {:.1} ms",
                d.device.name, d.device.scheduler, now, then
            ));
        }
    }
    for (name, j) in &run.journals {
        if let Some((_, b)) = base.journals.iter().find(|(n, _)| n == name) {
            if j.commit_ms > b.commit_ms * 1.5 && j.commit_ms > 1.0 {
                parts.push(format!(
                    "jbd2 {name} commit {:.1} ms vs {:.1} ms",
                    j.commit_ms, b.commit_ms
                ));
            }
        }
    }
    if let (Some(g), Some(b)) = (run.groups.first(), base.groups.first()) {
        parts.push(format!(
            "{} io pressure {:.0}% vs {:.0}%",
            g.label,
            g.io_some * 100.0,
            b.io_some * 100.0
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_device_bytes_on_v2_and_v1() {
        let v2 = parse_per_dev("7:0 rbytes=1024 wbytes=2048 rios=1 wios=2 dbytes=0 dios=0\n254:0 rbytes=5 wbytes=6 rios=1 wios=1\n");
        assert_eq!(v2["7:0"], (1024, 2048));
        assert_eq!(v2["254:0"], (5, 6));
        let v1 = parse_per_dev("7:0 Read 10\n7:0 Write 20\n7:0 Sync 30\n7:0 Total 30\nTotal 30\n");
        assert_eq!(v1["7:0"], (10, 20));
        assert_eq!(v1.len(), 1);
    }

    #[test]
    fn verdict_names_the_wait_and_the_device() {
        let dev = |ms: f64| DeviceFigures {
            device: Device {
                name: "loop0".into(),
                dev: "7:0".into(),
                scheduler: "bfq".into(),
                wbt_lat_usec: None,
                backing: None,
            },
            w: DiskWindow {
                write_ms: ms,
                ..Default::default()
            },
        };
        let mut run = IoWindow {
            devices: vec![dev(40.0)],
            ..Default::default()
        };
        run.waits.samples = 10;
        run.waits.blocked = 0.5;
        run.waits.classes = vec![stacks::WaitClass {
            what: "fsync / journal commit (jbd2)".into(),
            share: 0.8,
        }];
        let base = IoWindow {
            devices: vec![dev(2.0)],
            ..Default::default()
        };
        let v = verdict(&run, &base);
        assert!(
            v.contains("80% of it in fsync / journal commit (jbd2)"),
            "{v}"
        );
        assert!(v.contains("loop0 (bfq) latency 40.0 ms vs 2.0 ms"), "{v}");
    }
}
