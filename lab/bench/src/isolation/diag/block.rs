//! The block layer and the file systems on the database's I/O path, read from /sys and /proc:
//! which devices the path crosses (a loop device, then the disk its backing file lives on),
//! each device's counters (/sys/block/DEV/stat: operations and the milliseconds they took,
//! requests in flight), its scheduler and writeback throttling setting, the ext4 journals on
//! those devices (/proc/fs/jbd2/*/info) and the machine's dirty and writeback memory.

use bulkhead_testkit::host::DevNum;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A device on the path, and what it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// Kernel name: `loop0`, `vda`, `nvme0n1`.
    pub name: String,
    pub dev: String,
    /// The active scheduler (`bfq`, `mq-deadline`, `none`).
    pub scheduler: String,
    /// Writeback throttling's latency target, microseconds (0: off; None: no such file).
    pub wbt_lat_usec: Option<u64>,
    /// For a loop device: the file behind it.
    pub backing: Option<PathBuf>,
}

/// The counters of /sys/block/DEV/stat that the diagnosis uses.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DiskStat {
    pub reads: u64,
    pub read_sectors: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub write_sectors: u64,
    pub write_ms: u64,
    pub in_flight: u64,
    pub busy_ms: u64,
    pub flushes: u64,
    pub flush_ms: u64,
}

/// `/sys/block/DEV/stat`: 11 fields on old kernels, 15 with discards, 17 with flushes.
pub fn parse_stat(text: &str) -> Option<DiskStat> {
    let f: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if f.len() < 11 {
        return None;
    }
    Some(DiskStat {
        reads: f[0],
        read_sectors: f[2],
        read_ms: f[3],
        writes: f[4],
        write_sectors: f[6],
        write_ms: f[7],
        in_flight: f[8],
        busy_ms: f[9],
        flushes: f.get(15).copied().unwrap_or(0),
        flush_ms: f.get(16).copied().unwrap_or(0),
    })
}

pub fn read_stat(name: &str) -> Option<DiskStat> {
    parse_stat(&std::fs::read_to_string(format!("/sys/block/{name}/stat")).ok()?)
}

/// What a device did between two readings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskWindow {
    pub read_iops: f64,
    pub write_iops: f64,
    pub flush_per_s: f64,
    pub read_mib_s: f64,
    pub write_mib_s: f64,
    /// Mean time per operation, from queueing (the scheduler included) to completion, ms.
    pub read_ms: f64,
    pub write_ms: f64,
    pub flush_ms: f64,
    /// Share of the time with at least one request in flight.
    pub util: f64,
    /// Requests in flight, mean and most of the samples.
    pub in_flight_mean: f64,
    pub in_flight_max: f64,
}

/// The window between `a` and `b`, `secs` apart.
pub fn window(a: &DiskStat, b: &DiskStat, secs: f64) -> DiskWindow {
    let d = |x: u64, y: u64| y.saturating_sub(x) as f64;
    let per_op = |ms: f64, ops: f64| if ops > 0.0 { ms / ops } else { 0.0 };
    let secs = secs.max(1e-3);
    let (r, w, f) = (
        d(a.reads, b.reads),
        d(a.writes, b.writes),
        d(a.flushes, b.flushes),
    );
    DiskWindow {
        read_iops: r / secs,
        write_iops: w / secs,
        flush_per_s: f / secs,
        read_mib_s: d(a.read_sectors, b.read_sectors) * 512.0 / 1048576.0 / secs,
        write_mib_s: d(a.write_sectors, b.write_sectors) * 512.0 / 1048576.0 / secs,
        read_ms: per_op(d(a.read_ms, b.read_ms), r),
        write_ms: per_op(d(a.write_ms, b.write_ms), w),
        flush_ms: per_op(d(a.flush_ms, b.flush_ms), f),
        util: (d(a.busy_ms, b.busy_ms) / 1000.0 / secs).min(1.0),
        in_flight_mean: 0.0,
        in_flight_max: 0.0,
    }
}

fn dev_of(raw: u64) -> DevNum {
    DevNum {
        major: libc::major(raw),
        minor: libc::minor(raw),
    }
    .whole_disk()
}

fn describe(dev: DevNum) -> Option<Device> {
    let name = dev.kernel_name()?;
    let q = PathBuf::from(format!("/sys/block/{name}/queue"));
    let backing = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file"))
        .ok()
        .map(|s| PathBuf::from(s.trim()));
    Some(Device {
        scheduler: dev.scheduler().unwrap_or_else(|| "?".into()),
        wbt_lat_usec: std::fs::read_to_string(q.join("wbt_lat_usec"))
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        dev: dev.to_string(),
        name,
        backing,
    })
}

/// The devices under `path`, top first: its file system's device and, for a loop device,
/// the devices under its backing file (loops of loops are followed a few levels).
pub fn path_devices(path: &Path) -> Vec<Device> {
    let mut out: Vec<Device> = Vec::new();
    let mut at = path.to_path_buf();
    for _ in 0..4 {
        let Ok(meta) = std::fs::metadata(&at) else {
            break;
        };
        let dev = dev_of(meta.dev());
        if dev.major == 0 {
            break; // tmpfs, overlay without a block device
        }
        let Some(d) = describe(dev) else { break };
        if out.iter().any(|o| o.dev == d.dev) {
            break;
        }
        let next = d.backing.clone();
        out.push(d);
        match next {
            Some(b) => at = b,
            None => break,
        }
    }
    out
}

/// A journal's figures: `/proc/fs/jbd2/NAME/info`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JournalStat {
    pub transactions: u64,
    /// The kernel's moving average of the commit time (3/4 old, 1/4 new), microseconds.
    pub avg_commit_us: u64,
}

pub fn parse_journal(text: &str) -> Option<JournalStat> {
    let first = text.lines().next()?;
    let transactions = first.split_whitespace().next()?.parse().ok()?;
    let avg_commit_us = text
        .lines()
        .find(|l| l.contains("average transaction commit time"))
        .and_then(|l| l.trim().split("us").next()?.trim().parse().ok())
        .unwrap_or(0);
    Some(JournalStat {
        transactions,
        avg_commit_us,
    })
}

/// The jbd2 journal of a device (`vda-8`, `loop0-8`), if it has one.
pub fn journal_of(dev: &Device) -> Option<PathBuf> {
    let rd = std::fs::read_dir("/proc/fs/jbd2").ok()?;
    rd.flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit_once('-'))
                .is_some_and(|(d, _)| d == dev.name)
        })
        .map(|p| p.join("info"))
}

pub fn read_journal(p: &Path) -> Option<JournalStat> {
    parse_journal(&std::fs::read_to_string(p).ok()?)
}

/// Dirty and writeback memory, bytes, from /proc/meminfo.
pub fn parse_dirty(meminfo: &str) -> (u64, u64) {
    let kib = |key: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kib("Dirty:"), kib("Writeback:"))
}

pub fn read_dirty() -> (u64, u64) {
    parse_dirty(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_and_windows() {
        let a = parse_stat("  100 0 800 50 200 0 1600 400 1 300 450 0 0 0 0 10 20\n").unwrap();
        let b = parse_stat("  300 0 2848 250 600 0 3648 2400 3 800 2450 0 0 0 0 20 120\n").unwrap();
        assert_eq!(b.in_flight, 3);
        let w = window(&a, &b, 2.0);
        assert_eq!(w.read_iops, 100.0);
        assert_eq!(w.read_ms, 1.0);
        assert_eq!(w.write_ms, 5.0);
        assert_eq!(w.flush_per_s, 5.0);
        assert_eq!(w.flush_ms, 10.0);
        assert_eq!(w.util, 0.25);
        assert!((w.read_mib_s - 0.5).abs() < 1e-9);
        // Old kernels: no flush columns.
        let old = parse_stat("1 0 8 1 2 0 16 2 0 3 3").unwrap();
        assert_eq!((old.flushes, old.flush_ms), (0, 0));
        assert!(parse_stat("1 2 3").is_none());
    }

    #[test]
    fn journal_info() {
        let t = "4312 transactions (4300 requested), each up to 8192 blocks\naverage: \n  0ms waiting for transaction\n  0ms request delay\n  4ms running transaction\n  0ms transaction was being locked\n  0ms flushing data (in ordered mode)\n  1ms logging transaction\n  1874us average transaction commit time\n  2 handles per transaction\n  3 blocks per transaction\n  4 logged blocks per transaction\n";
        let j = parse_journal(t).unwrap();
        assert_eq!(j.transactions, 4312);
        assert_eq!(j.avg_commit_us, 1874);
    }

    #[test]
    fn meminfo_dirty() {
        let m = "MemTotal: 100 kB\nDirty:            2048 kB\nWriteback:          4 kB\n";
        assert_eq!(parse_dirty(m), (2 << 20, 4096));
    }
}
