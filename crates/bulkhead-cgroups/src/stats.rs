//! What each slice uses and how much it suffers: CPU, throttling, memory and its events,
//! I/O bytes, tasks, and pressure stall information (PSI) where the hierarchy has it.

use crate::backend::Placement;
use crate::fs::CgroupFs;
use crate::layout::Hierarchy;
use crate::layout::Version;
use bulkhead_plan::SliceName;
use bulkhead_sys::cgdir::CgroupDir;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Avg {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Total stall time, microseconds.
    pub total_us: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Pressure {
    pub some: Avg,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full: Option<Avg>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Psi {
    pub cpu: Option<Pressure>,
    pub memory: Option<Pressure>,
    pub io: Option<Pressure>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MemoryEvents {
    pub low: u64,
    pub high: u64,
    pub max: u64,
    pub oom: u64,
    pub oom_kill: u64,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SliceStatus {
    pub name: String,
    pub unit: String,
    pub cgroup: String,
    /// Processes in the slice and its children.
    pub processes: usize,
    /// CPU time used since the slice was created, microseconds.
    pub cpu_usage_us: Option<u64>,
    /// CPU use over the interval, percent of one CPU (as top shows it).
    pub cpu_percent: Option<f64>,
    pub cpu_nr_throttled: Option<u64>,
    pub cpu_throttled_us: Option<u64>,
    /// `v1` or `v2`: which memory controller the numbers come from (v1 has no memory.high).
    pub memory_controller: Option<String>,
    pub memory_current: Option<u64>,
    /// None: no limit.
    pub memory_high: Option<u64>,
    pub memory_max: Option<u64>,
    pub memory_events: Option<MemoryEvents>,
    pub io_read_bytes: Option<u64>,
    pub io_write_bytes: Option<u64>,
    pub io_read_ops: Option<u64>,
    pub io_write_ops: Option<u64>,
    pub tasks_current: Option<u64>,
    pub tasks_max: Option<u64>,
    pub psi: Option<Psi>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    pub backend: String,
    pub layout: String,
    pub interval_seconds: f64,
    pub slices: Vec<SliceStatus>,
    /// Why the slices' ownership could not be verified (not root), when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unverified: Option<String>,
}

fn parse_u64(text: Option<String>) -> Option<u64> {
    text?.trim().parse().ok()
}

/// A limit's text: `max`, or v1's page-counter maximum, is "no limit" (None).
fn parse_limit(text: Option<String>) -> Option<Option<u64>> {
    let s = text?;
    let t = s.trim();
    Some(match t {
        "max" | "-1" => None,
        _ => t.parse::<u64>().ok().filter(|n| *n < 1 << 62),
    })
}

/// A slice's directories, each opened once (hierarchies that share a mount share one) and
/// read relative to it: one path walk per hierarchy, not one per file.
pub struct Dirs<'a> {
    fs: &'a CgroupFs,
    name: &'a SliceName,
    open: Vec<(&'a Path, Option<CgroupDir>)>,
}

impl<'a> Dirs<'a> {
    pub fn new(fs: &'a CgroupFs, name: &'a SliceName) -> Dirs<'a> {
        Dirs {
            fs,
            name,
            open: Vec::with_capacity(6),
        }
    }

    /// The slice's directory in `h`, if it exists.
    fn at(&mut self, h: &'a Hierarchy) -> Option<&CgroupDir> {
        let i = match self.open.iter().position(|(m, _)| *m == h.mount.as_path()) {
            Some(i) => i,
            None => {
                let d = CgroupDir::open(&self.fs.dir(h, self.name));
                self.open.push((h.mount.as_path(), d));
                self.open.len() - 1
            }
        };
        self.open[i].1.as_ref()
    }

    /// The slice's directory in the hierarchy that holds `controller`, with its version.
    fn of(&mut self, controller: &str) -> Option<(Version, &CgroupDir)> {
        let h = self.fs.layout.hierarchy(controller)?;
        Some((h.version, self.at(h)?))
    }

    fn unified(&mut self) -> Option<&CgroupDir> {
        let u = self.fs.layout.unified.as_ref()?;
        self.at(u)
    }
}

/// `key value` lines (cpu.stat, memory.events, memory.oom_control).
pub fn flat_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

/// Parse a PSI file (`some avg10=0.00 avg60=0.00 avg300=0.00 total=0` and a `full` line).
pub fn parse_pressure(text: &str) -> Option<Pressure> {
    let line = |kind: &str| -> Option<Avg> {
        let l = text.lines().find(|l| l.starts_with(kind))?;
        let mut a = Avg::default();
        for kv in l.split_whitespace().skip(1) {
            let (k, v) = kv.split_once('=')?;
            match k {
                "avg10" => a.avg10 = v.parse().ok()?,
                "avg60" => a.avg60 = v.parse().ok()?,
                "avg300" => a.avg300 = v.parse().ok()?,
                "total" => a.total_us = v.parse().ok()?,
                _ => {}
            }
        }
        Some(a)
    };
    Some(Pressure {
        some: line("some")?,
        full: line("full"),
    })
}

/// Bytes and operations read and written, over all devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoTotals {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_ops: u64,
    pub write_ops: u64,
}

/// Sum rbytes, wbytes, rios and wios over all devices of a v2 io.stat.
pub fn io_stat_v2(text: &str) -> IoTotals {
    let mut t = IoTotals::default();
    for l in text.lines() {
        for kv in l.split_whitespace().skip(1) {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let field = match k {
                "rbytes" => &mut t.read_bytes,
                "wbytes" => &mut t.write_bytes,
                "rios" => &mut t.read_ops,
                "wios" => &mut t.write_ops,
                _ => continue,
            };
            *field = field.saturating_add(v.parse::<u64>().unwrap_or(0));
        }
    }
    t
}

/// Read/Write bytes per device of a v1 blkio.*io_service_bytes* file.
fn io_per_device_v1(text: &str) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut m = std::collections::BTreeMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() == 3 {
            let e = m.entry(f[0].to_string()).or_insert((0u64, 0u64));
            match f[1] {
                "Read" => e.0 += f[2].parse::<u64>().unwrap_or(0),
                "Write" => e.1 += f[2].parse::<u64>().unwrap_or(0),
                _ => {}
            }
        }
    }
    m
}

/// Sum Read/Write over all devices of v1 blkio stat files. v1 counts a disk's I/O in the
/// throttle files only while the disk has a limit, and in the BFQ files only when the disk
/// uses BFQ; per device the larger figure is taken, so nothing is counted twice.
pub fn io_stat_v1(texts: &[String]) -> (u64, u64) {
    let mut merged: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for t in texts {
        for (dev, (r, w)) in io_per_device_v1(t) {
            let e = merged.entry(dev).or_default();
            e.0 = e.0.max(r);
            e.1 = e.1.max(w);
        }
    }
    merged
        .values()
        .fold((0, 0), |(r, w), (a, b)| (r + a, w + b))
}

/// CPU time a slice used since it was created, microseconds: the unified hierarchy's
/// cpu.stat always has usage_usec; else v1 cpuacct.
pub fn cpu_usage_us(fs: &CgroupFs, name: &SliceName) -> Option<u64> {
    cpu_usage(&mut Dirs::new(fs, name))
}

fn cpu_usage(d: &mut Dirs) -> Option<u64> {
    let unified = d.unified().and_then(|u| u.read("cpu.stat"));
    cpu_usage_from(d, unified.as_deref())
}

/// usage_usec from the unified cpu.stat (when read), else v1 cpuacct.usage.
fn cpu_usage_from(d: &mut Dirs, unified_stat: Option<&str>) -> Option<u64> {
    if let Some(us) = unified_stat.and_then(|t| flat_keyed(t, "usage_usec")) {
        return Some(us);
    }
    let h = d.fs.layout.cpuacct()?;
    parse_u64(d.at(h)?.read("cpuacct.usage")).map(|ns| ns / 1000)
}

/// v1's per-device byte counts (throttle, BFQ, CFQ), and operation counts.
const V1_BYTES: [&str; 3] = [
    "blkio.throttle.io_service_bytes_recursive",
    "blkio.bfq.io_service_bytes_recursive",
    "blkio.io_service_bytes_recursive",
];
const V1_OPS: [&str; 3] = [
    "blkio.throttle.io_serviced_recursive",
    "blkio.bfq.io_serviced_recursive",
    "blkio.io_serviced_recursive",
];

fn io_v1(d: &CgroupDir, files: &[&str]) -> Option<(u64, u64)> {
    let texts: Vec<String> = files.iter().filter_map(|f| d.read(f)).collect();
    (!texts.is_empty()).then(|| io_stat_v1(&texts))
}

/// Bytes a slice read and wrote, over all devices.
pub fn io_bytes(fs: &CgroupFs, name: &SliceName) -> Option<(u64, u64)> {
    io_totals(fs, name, false).map(|t| (t.read_bytes, t.write_bytes))
}

/// Bytes (and, with `ops`, operations) a slice read and wrote, over all devices. On v1 the
/// operations are other files: read only when asked for.
pub fn io_totals(fs: &CgroupFs, name: &SliceName, ops: bool) -> Option<IoTotals> {
    io(&mut Dirs::new(fs, name), ops)
}

fn io(d: &mut Dirs, ops: bool) -> Option<IoTotals> {
    let (version, d) = d.of("io")?;
    match version {
        Version::V2 => d.read("io.stat").map(|t| io_stat_v2(&t)),
        Version::V1 => {
            let (read_bytes, write_bytes) = io_v1(d, &V1_BYTES)?;
            let (read_ops, write_ops) = match ops {
                true => io_v1(d, &V1_OPS).unwrap_or_default(),
                false => (0, 0),
            };
            Some(IoTotals {
                read_bytes,
                write_bytes,
                read_ops,
                write_ops,
            })
        }
    }
}

/// One reading of a slice, without the interval-based CPU share.
pub fn read_slice(fs: &CgroupFs, name: &SliceName) -> SliceStatus {
    let mut s = SliceStatus {
        name: name.to_string(),
        unit: name.unit(),
        cgroup: Path::new("/")
            .join(&fs.root)
            .join(name.cgroup_path())
            .display()
            .to_string(),
        ..Default::default()
    };
    let mut d = Dirs::new(fs, name);
    if let Some(p) = fs.layout.primary() {
        s.processes = d.at(p).map_or(0, |p| p.count_procs());
    }
    read_cpu(&mut d, &mut s);
    read_memory(&mut d, &mut s);
    if let Some(io) = io(&mut d, true) {
        s.io_read_bytes = Some(io.read_bytes);
        s.io_write_bytes = Some(io.write_bytes);
        s.io_read_ops = Some(io.read_ops);
        s.io_write_ops = Some(io.write_ops);
    }
    if let Some((_, p)) = d.of("pids") {
        s.tasks_current = parse_u64(p.read("pids.current"));
        s.tasks_max = parse_limit(p.read("pids.max")).flatten();
    }
    s.psi = d.unified().and_then(psi_of);
    s
}

/// A cgroup2 directory's pressure (its `cpu.pressure`, `memory.pressure` and `io.pressure`);
/// None when it has none of them.
pub fn psi_of(dir: &CgroupDir) -> Option<Psi> {
    let p = |f: &str| dir.read(f).and_then(|t| parse_pressure(&t));
    let psi = Psi {
        cpu: p("cpu.pressure"),
        memory: p("memory.pressure"),
        io: p("io.pressure"),
    };
    (psi.cpu.is_some() || psi.memory.is_some() || psi.io.is_some()).then_some(psi)
}

/// CPU time, and throttling by the CPU quota. Where the cpu controller is the unified
/// one, its cpu.stat has both and is read once.
fn read_cpu(d: &mut Dirs, s: &mut SliceStatus) {
    let throttling = d
        .of("cpu")
        .and_then(|(v, c)| Some((v, c.read("cpu.stat")?)));
    let unified = match &throttling {
        Some((Version::V2, t)) => Some(t.clone()),
        _ => d.unified().and_then(|u| u.read("cpu.stat")),
    };
    s.cpu_usage_us = cpu_usage_from(d, unified.as_deref());
    let Some((version, t)) = throttling else {
        return;
    };
    s.cpu_nr_throttled = flat_keyed(&t, "nr_throttled");
    s.cpu_throttled_us = match version {
        Version::V2 => flat_keyed(&t, "throttled_usec"),
        Version::V1 => flat_keyed(&t, "throttled_time").map(|ns| ns / 1000),
    };
}

/// Memory use, limits and events.
fn read_memory(d: &mut Dirs, s: &mut SliceStatus) {
    let Some((version, m)) = d.of("memory") else {
        return;
    };
    s.memory_controller = Some(format!("{version:?}").to_lowercase());
    match version {
        Version::V2 => {
            s.memory_current = parse_u64(m.read("memory.current"));
            s.memory_high = parse_limit(m.read("memory.high")).flatten();
            s.memory_max = parse_limit(m.read("memory.max")).flatten();
            s.memory_events = m.read("memory.events").map(|t| MemoryEvents {
                low: flat_keyed(&t, "low").unwrap_or(0),
                high: flat_keyed(&t, "high").unwrap_or(0),
                max: flat_keyed(&t, "max").unwrap_or(0),
                oom: flat_keyed(&t, "oom").unwrap_or(0),
                oom_kill: flat_keyed(&t, "oom_kill").unwrap_or(0),
            });
        }
        Version::V1 => {
            s.memory_current = parse_u64(m.read("memory.usage_in_bytes"));
            s.memory_max = parse_limit(m.read("memory.limit_in_bytes")).flatten();
            let oom = m.read("memory.oom_control").unwrap_or_default();
            s.memory_events = Some(MemoryEvents {
                // v1 counts how often usage hit the limit.
                max: parse_u64(m.read("memory.failcnt")).unwrap_or(0),
                oom: flat_keyed(&oom, "under_oom").unwrap_or(0),
                oom_kill: flat_keyed(&oom, "oom_kill").unwrap_or(0),
                ..Default::default()
            });
        }
    }
}

/// Read the slices twice, `interval` apart, to give CPU shares over the interval.
pub fn status(fs: &CgroupFs, names: &[SliceName], interval: Duration) -> Status {
    let first: Vec<(Instant, Option<u64>)> = names
        .iter()
        .map(|n| (Instant::now(), read_slice(fs, n).cpu_usage_us))
        .collect();
    std::thread::sleep(interval);
    let slices = names
        .iter()
        .zip(first)
        .map(|(n, (t0, u0))| {
            let mut s = read_slice(fs, n);
            let dt = t0.elapsed().as_secs_f64();
            if let (Some(a), Some(b)) = (u0, s.cpu_usage_us) {
                if dt > 0.0 {
                    s.cpu_percent = Some(b.saturating_sub(a) as f64 / 1e6 / dt * 100.0);
                }
            }
            s
        })
        .collect();
    Status {
        backend: fs.name().into(),
        layout: fs.layout.describe(),
        interval_seconds: interval.as_secs_f64(),
        slices,
        unverified: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        let p = parse_pressure("some avg10=1.50 avg60=0.20 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert_eq!(p.some.avg10, 1.5);
        assert_eq!(p.some.total_us, 1234);
        assert!(p.full.is_some());
        assert_eq!(
            io_stat_v2("254:0 rbytes=10 wbytes=20 rios=1 wios=2\n7:0 rbytes=5 wbytes=0 rios=3\n"),
            IoTotals {
                read_bytes: 15,
                write_bytes: 20,
                read_ops: 4,
                write_ops: 2
            }
        );
        let throttle = "254:0 Read 100\n254:0 Write 50\n254:0 Total 150\nTotal 150\n".to_string();
        let bfq = "254:0 Read 100\n254:0 Write 50\n7:0 Read 0\n7:0 Write 4096\n".to_string();
        assert_eq!(io_stat_v1(std::slice::from_ref(&throttle)), (100, 50));
        assert_eq!(
            io_stat_v1(&[throttle, bfq]),
            (100, 4146),
            "per device max, no double count"
        );
        assert_eq!(
            flat_keyed("usage_usec 42\nuser_usec 1", "usage_usec"),
            Some(42)
        );
    }
}
