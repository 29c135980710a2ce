//! Facts about the machine that a plan resolves against: RAM, CPUs, NUMA nodes, huge page
//! sizes, task limits and block devices. Everything is read from /proc and /sys, and every
//! field can be overridden so a plan can be previewed for another host.

mod block;
mod devpath;
pub mod hugepages;
mod kernel;

pub use block::{active_scheduler, bfq_available, bfq_devices, disks, DevNum};
pub use devpath::{resolve_device_fd, resolve_device_path, Disk};
pub use kernel::{
    io_scheduler_module, kernel_at_least, kernel_release, release_at_least, sched_ext_at,
    sched_ext_loaded,
};

use crate::units::IdSet;
use std::collections::BTreeMap;
use std::fs;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Host {
    /// MemTotal from /proc/meminfo, in bytes.
    pub memory: u64,
    /// Online CPUs.
    pub cpus: IdSet,
    /// NUMA nodes with memory.
    pub mem_nodes: IdSet,
    /// Huge page sizes the kernel offers, in bytes.
    pub hugepage_sizes: Vec<u64>,
    /// The system-wide task limit: min(kernel.pid_max, kernel.threads-max).
    pub tasks_max: u64,
    pub page_size: u64,
    /// The device arguments of the plan's I/O settings (`/var/lib/postgresql`, `/dev/vda`)
    /// and the whole disk each leads to, or why it leads to none: looked up here, with the
    /// other host facts, so resolving a plan reads nothing ([`Host::look_up_devices`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<String, Result<Disk, String>>,
}

impl Host {
    pub fn detect() -> Host {
        let memory = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| meminfo_field(&m, "MemTotal"))
            .unwrap_or(0);
        let cpus = read_idset("/sys/devices/system/cpu/online").unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
            IdSet((0..n).collect())
        });
        let mem_nodes = read_idset("/sys/devices/system/node/has_memory")
            .or_else(|| read_idset("/sys/devices/system/node/online"))
            .unwrap_or_else(|| IdSet([0].into_iter().collect()));
        let mut hugepage_sizes: Vec<u64> = fs::read_dir("/sys/kernel/mm/hugepages")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.strip_prefix("hugepages-")?
                            .strip_suffix("kB")?
                            .parse::<u64>()
                            .ok()
                            .map(|kb| kb * 1024)
                    })
                    .collect()
            })
            .unwrap_or_default();
        hugepage_sizes.sort_unstable();
        let read_u64 = |p: &str| {
            fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        let tasks_max = match (
            read_u64("/proc/sys/kernel/pid_max"),
            read_u64("/proc/sys/kernel/threads-max"),
        ) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            _ => 4_194_304,
        };
        // SAFETY: sysconf has no preconditions.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        Host {
            memory,
            cpus,
            mem_nodes,
            hugepage_sizes,
            tasks_max,
            page_size,
            devices: BTreeMap::new(),
        }
    }

    /// This machine's facts, with the device arguments a plan names looked up
    /// ([`crate::host::resolve_device_path`] for each).
    pub fn detect_for<'a>(paths: impl IntoIterator<Item = &'a str>) -> Host {
        let mut h = Host::detect();
        h.look_up_devices(paths);
        h
    }

    /// Look up device arguments on this machine (each once).
    pub fn look_up_devices<'a>(&mut self, paths: impl IntoIterator<Item = &'a str>) {
        for p in paths {
            if !self.devices.contains_key(p) {
                self.devices.insert(p.to_string(), resolve_device_path(p));
            }
        }
    }

    pub fn cpu_count(&self) -> usize {
        self.cpus.0.len().max(1)
    }
}

/// Whether PID 1 (in this PID namespace) is systemd.
pub fn pid1_is_systemd() -> bool {
    fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd")
}

/// A `Key:   12345 kB` field of /proc/meminfo, in bytes.
pub fn meminfo_field(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let mut it = rest.split_whitespace();
        let n: u64 = it.next()?.parse().ok()?;
        Some(match it.next() {
            Some("kB") => n.checked_mul(1024)?,
            _ => n,
        })
    })
}

fn read_idset(path: &str) -> Option<IdSet> {
    let s = fs::read_to_string(path).ok()?;
    IdSet::parse(s.trim()).ok().filter(|s| !s.0.is_empty())
}

/// `2M` / `2MB` / `2048kB` / `1G` -> bytes, for huge page size names.
pub fn parse_page_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t.strip_suffix("iB").unwrap_or(t);
    let (num, mult) = if let Some(n) = t.strip_suffix("kB").or_else(|| t.strip_suffix("KB")) {
        (n, 1u64 << 10)
    } else if let Some(n) = t.strip_suffix("MB").or_else(|| t.strip_suffix('M')) {
        (n, 1 << 20)
    } else if let Some(n) = t.strip_suffix("GB").or_else(|| t.strip_suffix('G')) {
        (n, 1 << 30)
    } else if let Some(n) = t.strip_suffix('K') {
        (n, 1 << 10)
    } else {
        return None;
    };
    // Checked: a plan's page size key is input ("99999999999999999G" overflowed).
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// The kernel's name for a huge page size in cgroup file names: `2MB`, `1GB`, `64KB`.
pub fn page_size_cgroup_name(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{}GB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}MB", bytes >> 20)
    } else {
        format!("{}KB", bytes >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_and_page_sizes() {
        let m = "MemTotal:       24576000 kB\nMemFree:  10 kB\n";
        assert_eq!(meminfo_field(m, "MemTotal"), Some(24576000 * 1024));
        assert_eq!(meminfo_field(m, "Mem"), None);
        assert_eq!(parse_page_size("2M"), Some(2 << 20));
        assert_eq!(parse_page_size("2MB"), Some(2 << 20));
        assert_eq!(parse_page_size("1G"), Some(1 << 30));
        assert_eq!(parse_page_size("2048kB"), Some(2 << 20));
        assert_eq!(parse_page_size("huge"), None);
        // Issue 14: too large to count in bytes is not a page size (it overflowed).
        assert_eq!(parse_page_size("99999999999999999G"), None);
        assert_eq!(parse_page_size("18446744073709551615kB"), None);
        assert_eq!(
            meminfo_field("MemTotal: 18446744073709551615 kB", "MemTotal"),
            None
        );
        assert_eq!(page_size_cgroup_name(2 << 20), "2MB");
        assert_eq!(page_size_cgroup_name(1 << 30), "1GB");
    }

    #[test]
    fn detect_reads_this_machine() {
        let h = Host::detect();
        assert!(h.memory > 0);
        assert!(h.cpu_count() >= 1);
        assert!(h.page_size >= 4096);
    }
}

/// The machine's CPU time from the first line of /proc/stat, in clock ticks: all of it, and
/// the part the hypervisor gave to other guests (steal).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub total: u64,
    pub steal: u64,
    pub idle: u64,
}

pub fn parse_cpu_times(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal guest guest_nice; guests are already
    // counted in user and nice.
    let total = v.iter().take(8).sum();
    Some(CpuTimes {
        total,
        steal: v.get(7).copied().unwrap_or(0),
        idle: v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0),
    })
}

pub fn cpu_times() -> Option<CpuTimes> {
    parse_cpu_times(&fs::read_to_string("/proc/stat").ok()?)
}

#[cfg(test)]
mod cpu_times_tests {
    #[test]
    fn steal_and_idle() {
        let t = super::parse_cpu_times("cpu  10 0 5 80 5 0 0 3 0 0\ncpu0 1 2\n").unwrap();
        assert_eq!((t.total, t.steal, t.idle), (103, 3, 85));
    }
}
