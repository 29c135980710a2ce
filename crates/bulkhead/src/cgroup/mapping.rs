//! Directive -> control file writes, for each controller on v1 and v2, the way systemd
//! maps them. Pure data: no file is read or written here.

use super::layout::{Caps, Version};
use bulkhead_plan::{CpuWeight, ResolvedSlice};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::host::{page_size_cgroup_name, DevNum};
use bulkhead_sys::units::{IdSet, Limit};

/// How a control file's current content is compared with the wanted value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// Trimmed text.
    Exact,
    /// Numbers, where `max`, `-1` and v1's page-counter maximum all mean "no limit".
    Number,
    /// CPU or node lists (`0-1` equals `0,1`).
    Set,
    /// Whitespace-separated tokens (`cpu.max`).
    Tokens,
}

/// How to clear a device entry that is no longer in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// io.max: `MAJ:MIN rbps=max wbps=max riops=max wiops=max`
    IoMax,
    /// v1 blkio files: `MAJ:MIN 0`
    Zero,
    /// v2 weights: `MAJ:MIN default`
    Default,
}

/// One wanted state of a control file.
#[derive(Debug, Clone)]
pub enum Want {
    Value {
        file: String,
        value: String,
        why: String,
        cmp: Cmp,
        /// A default the plan did not ask for: skipped where the kernel lacks the file.
        optional: bool,
        /// Written first whenever this value must change (v1 memsw ordering).
        before: Option<(String, String)>,
    },
    /// A file of `KEY VALUE...` lines (io.max, io.weight, blkio.throttle.*): the wanted
    /// lines are written when they differ, and device lines not wanted are cleared.
    Lines {
        file: String,
        lines: Vec<(String, String)>,
        why: String,
        reset: Reset,
    },
}

/// The value a fresh cgroup has in a file, so that new slices only get the writes they need.
pub fn fresh_default(file: &str) -> Option<&'static str> {
    Some(match file {
        "cpu.weight" | "blkio.bfq.weight" => "100",
        // v2 weight files list the default first: `default 100`.
        "io.weight" | "io.bfq.weight" => "default 100",
        "cpu.idle" => "0",
        "cpu.max" => "max 100000",
        "cpu.shares" => "1024",
        "cpu.cfs_quota_us" => "-1",
        "cpu.cfs_period_us" => "100000",
        "memory.min" | "memory.low" => "0",
        "memory.high" | "memory.max" | "memory.swap.max" | "pids.max" => "max",
        "memory.limit_in_bytes" | "memory.memsw.limit_in_bytes" => "-1",
        "cpuset.cpus" | "cpuset.mems" => "",
        f if f.starts_with("hugetlb.") => "max",
        f if f.starts_with("io.") || f.starts_with("blkio.") => "",
        _ => return None,
    })
}

/// systemd's CPUWeight -> cpu.shares: weight * 1024 / 100, clamped to 2..262144.
pub fn weight_to_shares(w: u64) -> u64 {
    (w * 1024 / 100).clamp(2, 262_144)
}

/// systemd's IOWeight (1..10000, default 100) -> BFQ weight (1..1000, default 100).
pub fn weight_to_bfq(w: u64) -> u64 {
    if w <= 100 {
        100 - (100 - w) * 99 / 99
    } else {
        100 + (w - 100) * 900 / 9900
    }
}

pub struct Mapper<'a> {
    pub slice: &'a ResolvedSlice,
    pub caps: &'a Caps,
    /// v1 cpuset: the cpus and mems this slice must hold when the plan does not say
    /// (the nearest ancestor's, or the cgroup root's).
    pub inherited_cpuset: (IdSet, IdSet),
    /// vm.swappiness, the v1 default for memory.swappiness.
    pub swappiness: u32,
    /// The host's huge page sizes (limits for sizes the plan leaves out are reset).
    pub page_sizes: Vec<u64>,
    pub wants: Vec<Want>,
    pub warnings: Vec<Diagnostic>,
}

fn v(
    file: &str,
    value: impl Into<String>,
    why: impl Into<String>,
    cmp: Cmp,
    optional: bool,
) -> Want {
    Want::Value {
        file: file.into(),
        value: value.into(),
        why: why.into(),
        cmp,
        optional,
        before: None,
    }
}

impl Mapper<'_> {
    fn warn(&mut self, directive: &str, why: &str, hint: &str) {
        self.warnings.push(
            Diagnostic::warning(format!("{directive} is not applied: {why}"))
                .context(format!("[slice.{}]", self.slice.name()))
                .hint(hint),
        );
    }

    /// Fill `wants` for one controller (by its v2 name) on a hierarchy of `version`.
    pub fn map(&mut self, controller: &str, version: Version) {
        match (controller, version) {
            ("cpu", _) => self.cpu(version),
            ("cpuset", _) => self.cpuset(version),
            ("memory", Version::V2) => self.memory_v2(),
            ("memory", Version::V1) => self.memory_v1(),
            ("io", Version::V2) => self.io_v2(),
            ("io", Version::V1) => self.io_v1(),
            ("pids", _) => {
                let l = self.slice.tasks_max;
                let value = l.unwrap_or(Limit::Infinity).v2();
                let why = l.map_or("TasksMax (default)".into(), |l| {
                    format!("TasksMax={}", l.v2())
                });
                self.wants
                    .push(v("pids.max", value, why, Cmp::Number, l.is_none()));
            }
            ("hugetlb", _) => self.hugetlb(version),
            _ => {}
        }
    }

    fn cpu(&mut self, version: Version) {
        let s = self.slice;
        let weight_file = if version == Version::V2 {
            "cpu.weight"
        } else {
            "cpu.shares"
        };
        let to_file = |w: u64| {
            if version == Version::V2 {
                w
            } else {
                weight_to_shares(w)
            }
        };
        match s.cpu_weight {
            Some(CpuWeight::Idle) if self.caps.cpu_idle => {
                self.wants
                    .push(v("cpu.idle", "1", "CPUWeight=idle", Cmp::Exact, false));
            }
            Some(CpuWeight::Idle) => {
                self.warn(
                    "CPUWeight=idle",
                    "this kernel has no cpu.idle (it needs Linux 5.15); the lowest weight is used instead",
                    "upgrade the kernel, or write CPUWeight = 1",
                );
                self.wants.push(v(
                    weight_file,
                    to_file(1).to_string(),
                    "CPUWeight=idle (as 1)",
                    Cmp::Number,
                    false,
                ));
            }
            w => {
                if self.caps.cpu_idle {
                    // Weights cannot be written while a group is idle: leave idle first.
                    self.wants
                        .push(v("cpu.idle", "0", "CPUWeight (not idle)", Cmp::Exact, true));
                }
                let (n, why) = match w {
                    Some(CpuWeight::Weight(n)) => (n, format!("CPUWeight={n}")),
                    _ => (100, "CPUWeight (default)".into()),
                };
                self.wants.push(v(
                    weight_file,
                    to_file(n).to_string(),
                    why,
                    Cmp::Number,
                    w.is_none(),
                ));
            }
        }
        let why = s.cpu_max.map_or("CPUQuota (default)".to_string(), |m| {
            format!(
                "CPUQuota={}% per {}us",
                m.quota_us * 100 / m.period_us,
                m.period_us
            )
        });
        match version {
            Version::V2 => {
                let value = s.cpu_max.map_or("max 100000".into(), |m| {
                    format!("{} {}", m.quota_us, m.period_us)
                });
                self.wants
                    .push(v("cpu.max", value, why, Cmp::Tokens, s.cpu_max.is_none()));
            }
            Version::V1 => {
                let (q, p) = s.cpu_max.map_or(("-1".to_string(), 100_000), |m| {
                    (m.quota_us.to_string(), m.period_us)
                });
                self.wants.push(v(
                    "cpu.cfs_period_us",
                    p.to_string(),
                    why.clone(),
                    Cmp::Number,
                    s.cpu_max.is_none(),
                ));
                self.wants.push(v(
                    "cpu.cfs_quota_us",
                    q,
                    why,
                    Cmp::Number,
                    s.cpu_max.is_none(),
                ));
            }
        }
    }

    fn cpuset(&mut self, version: Version) {
        let s = self.slice;
        for (file, mine, inherited, key) in [
            (
                "cpuset.cpus",
                &s.allowed_cpus,
                &self.inherited_cpuset.0,
                "AllowedCPUs",
            ),
            (
                "cpuset.mems",
                &s.allowed_mems,
                &self.inherited_cpuset.1,
                "AllowedMemoryNodes",
            ),
        ] {
            let want = match (mine, version) {
                (Some(set), _) => v(
                    file,
                    set.to_string(),
                    format!("{key}={set}"),
                    Cmp::Set,
                    false,
                ),
                // v2: empty means "the parent's".
                (None, Version::V2) => v(file, "", format!("{key} (inherit)"), Cmp::Set, true),
                // v1: a cpuset cgroup holds no task until both lists are set.
                (None, Version::V1) => v(
                    file,
                    inherited.to_string(),
                    format!("{key} (inherited {inherited})"),
                    Cmp::Set,
                    false,
                ),
            };
            self.wants.push(want);
        }
    }

    fn memory_v2(&mut self) {
        let s = self.slice;
        if s.memory_swap_max.is_some() && !self.caps.swap_v2 {
            self.warn(
                "MemorySwapMax",
                "this kernel has no memory.swap.max (no swap accounting)",
                "boot without cgroup.memory=noswap, or drop MemorySwapMax",
            );
        }
        for (file, val, key, default) in [
            ("memory.min", s.memory_min, "MemoryMin", Limit::Bytes(0)),
            ("memory.low", s.memory_low, "MemoryLow", Limit::Bytes(0)),
            ("memory.high", s.memory_high, "MemoryHigh", Limit::Infinity),
            ("memory.max", s.memory_max, "MemoryMax", Limit::Infinity),
            (
                "memory.swap.max",
                s.memory_swap_max,
                "MemorySwapMax",
                Limit::Infinity,
            ),
        ] {
            if file == "memory.swap.max" && !self.caps.swap_v2 {
                continue;
            }
            let why = val.map_or(format!("{key} (default)"), |l| format!("{key}={}", l.v2()));
            self.wants.push(v(
                file,
                val.unwrap_or(default).v2(),
                why,
                Cmp::Number,
                val.is_none(),
            ));
        }
    }

    fn memory_v1(&mut self) {
        let s = self.slice;
        for (val, key) in [
            (s.memory_min, "MemoryMin"),
            (s.memory_low, "MemoryLow"),
            (s.memory_high, "MemoryHigh"),
        ] {
            if val.is_some() {
                let file = key.replace("Memory", "memory.").to_lowercase();
                self.warn(
                    key,
                    &format!("the cgroup v1 memory controller has no {file}"),
                    "MemoryMax is enforced on v1; the full set needs cgroup v2 (systemd.unified_cgroup_hierarchy=1)",
                );
            }
        }
        let max = s.memory_max.unwrap_or(Limit::Infinity);
        let max_why = s.memory_max.map_or("MemoryMax (default)".into(), |l| {
            format!("MemoryMax={}", l.v2())
        });
        let swap = s.memory_swap_max;
        if self.caps.memsw {
            let memsw = match (max, swap) {
                (Limit::Bytes(m), Some(Limit::Bytes(sw))) => Limit::Bytes(m.saturating_add(sw)),
                _ => Limit::Infinity,
            };
            // memsw must stay >= the memory limit at every moment: open it up first.
            self.wants.push(Want::Value {
                file: "memory.limit_in_bytes".into(),
                value: max.v1(),
                why: max_why,
                cmp: Cmp::Number,
                optional: s.memory_max.is_none(),
                before: Some(("memory.memsw.limit_in_bytes".into(), "-1".into())),
            });
            let why = match swap {
                Some(sw) if max != Limit::Infinity => {
                    format!("MemorySwapMax={} (memory + swap)", sw.v2())
                }
                _ => "MemorySwapMax (default)".into(),
            };
            self.wants.push(v(
                "memory.memsw.limit_in_bytes",
                memsw.v1(),
                why,
                Cmp::Number,
                memsw == Limit::Infinity,
            ));
        } else {
            self.wants.push(v(
                "memory.limit_in_bytes",
                max.v1(),
                max_why,
                Cmp::Number,
                s.memory_max.is_none(),
            ));
        }
        match (swap, max, self.caps.memsw) {
            (None, _, _) => {
                self.wants.push(v(
                    "memory.swappiness",
                    self.swappiness.to_string(),
                    "MemorySwapMax (default)",
                    Cmp::Number,
                    true,
                ));
            }
            (Some(Limit::Bytes(0)), Limit::Infinity, _) | (Some(Limit::Bytes(0)), _, false) => {
                self.wants.push(v(
                    "memory.swappiness",
                    "0",
                    "MemorySwapMax=0 (as swappiness 0)",
                    Cmp::Number,
                    false,
                ));
                self.warnings.push(
                    Diagnostic::note(
                        "MemorySwapMax=0 is approximated on cgroup v1 by memory.swappiness=0 (no memory+swap limit without MemoryMax)",
                    )
                    .context(format!("[slice.{}]", s.name())),
                );
            }
            (Some(_), Limit::Bytes(_), true) => {
                self.wants.push(v(
                    "memory.swappiness",
                    self.swappiness.to_string(),
                    "MemorySwapMax (default)",
                    Cmp::Number,
                    true,
                ));
            }
            (Some(_), _, memsw) => {
                self.wants.push(v(
                    "memory.swappiness",
                    self.swappiness.to_string(),
                    "MemorySwapMax (default)",
                    Cmp::Number,
                    true,
                ));
                self.warn(
                    "MemorySwapMax",
                    if memsw {
                        "cgroup v1 limits memory+swap together, which needs MemoryMax too"
                    } else {
                        "swap accounting is off (no memory.memsw.* files)"
                    },
                    "set MemoryMax as well, or boot with swapaccount=1",
                );
            }
        }
    }

    fn weight_effective(&mut self, directive: &str) {
        if self.caps.bfq_devices.is_empty() && !self.caps.io_cost {
            let hint = "set a disk's scheduler to BFQ (echo bfq > /sys/block/DISK/queue/scheduler) or enable io.cost";
            self.warnings.push(
                Diagnostic::warning(format!(
                    "{directive} has no effect here: no disk uses the BFQ scheduler and io.cost is not enabled"
                ))
                .context(format!("[slice.{}]", self.slice.name()))
                .hint(hint),
            );
        }
    }

    fn device_is_bfq(&self, d: DevNum) -> bool {
        d.kernel_name()
            .is_some_and(|n| self.caps.bfq_devices.contains(&n))
    }

    fn device_weights(&mut self, file: &str, cost: bool) -> Vec<(String, String)> {
        let mut lines = Vec::new();
        let entries: Vec<(DevNum, u64)> = self
            .slice
            .io_device_weight
            .iter()
            .map(|(d, w)| (*d, *w))
            .collect();
        for (d, w) in entries {
            if cost {
                lines.push((d.to_string(), w.to_string()));
            } else if self.device_is_bfq(d) {
                lines.push((d.to_string(), weight_to_bfq(w).to_string()));
            } else {
                self.warn(
                    &format!("IODeviceWeight={d} {w}"),
                    &format!(
                        "device {d} ({}) does not use the BFQ scheduler, so {file} refuses per-device weights",
                        d.kernel_name().unwrap_or_else(|| "unknown".into())
                    ),
                    &format!(
                        "echo bfq > /sys/block/{}/queue/scheduler",
                        d.kernel_name().unwrap_or_else(|| "DISK".into())
                    ),
                );
            }
        }
        lines
    }

    fn io_v2(&mut self) {
        let s = self.slice;
        let w = s.io_weight;
        if w.is_some() {
            self.weight_effective("IOWeight");
        }
        if !s.io_device_weight.is_empty() {
            self.weight_effective("IODeviceWeight");
        }
        let why = w.map_or("IOWeight (default)".into(), |w| format!("IOWeight={w}"));
        if self.caps.io_cost {
            let mut lines = vec![("default".to_string(), w.unwrap_or(100).to_string())];
            lines.extend(self.device_weights("io.weight", true));
            self.wants.push(Want::Lines {
                file: "io.weight".into(),
                lines,
                why: why.clone(),
                reset: Reset::Default,
            });
        }
        if self.caps.bfq {
            let mut lines = vec![(
                "default".to_string(),
                weight_to_bfq(w.unwrap_or(100)).to_string(),
            )];
            lines.extend(self.device_weights("io.bfq.weight", false));
            self.wants.push(Want::Lines {
                file: "io.bfq.weight".into(),
                lines,
                why,
                reset: Reset::Default,
            });
        } else if w.is_some() && !self.caps.io_cost {
            self.warn(
                "IOWeight",
                "the kernel has neither BFQ nor io.cost",
                "load the bfq module (modprobe bfq)",
            );
        }
        let lim = |l: Option<Limit>| l.unwrap_or(Limit::Infinity).v2();
        let lines = s
            .io_max
            .iter()
            .map(|(d, m)| {
                (
                    d.to_string(),
                    format!(
                        "rbps={} wbps={} riops={} wiops={}",
                        lim(m.rbps),
                        lim(m.wbps),
                        lim(m.riops),
                        lim(m.wiops)
                    ),
                )
            })
            .collect();
        self.wants.push(Want::Lines {
            file: "io.max".into(),
            lines,
            why: "IO*BandwidthMax / IO*IOPSMax".into(),
            reset: Reset::IoMax,
        });
    }

    fn io_v1(&mut self) {
        let s = self.slice;
        if self.caps.bfq {
            if s.io_weight.is_some() {
                self.weight_effective("IOWeight");
                self.warnings.push(
                    Diagnostic::note(
                        "IOWeight on cgroup v1 covers reads and direct I/O only: buffered writes and their fsync writeback are charged to the root cgroup (cgroup writeback needs cgroup v2)",
                    )
                    .context(format!("[slice.{}]", s.name())),
                );
            }
            let w = s.io_weight.unwrap_or(100);
            let why = s
                .io_weight
                .map_or("IOWeight (default)".into(), |w| format!("IOWeight={w}"));
            self.wants.push(v(
                "blkio.bfq.weight",
                weight_to_bfq(w).to_string(),
                why,
                Cmp::Number,
                s.io_weight.is_none(),
            ));
            let lines = self.device_weights("blkio.bfq.weight_device", false);
            self.wants.push(Want::Lines {
                file: "blkio.bfq.weight_device".into(),
                lines,
                why: "IODeviceWeight".into(),
                // bfq_io_set_device_weight refuses 0; "default" clears a device line.
                reset: Reset::Default,
            });
        } else if s.io_weight.is_some() || !s.io_device_weight.is_empty() {
            self.warn(
                "IOWeight",
                "the kernel has no BFQ scheduler (blkio.bfq.weight)",
                "load the bfq module (modprobe bfq)",
            );
        }
        for (file, key, pick) in [
            ("blkio.throttle.read_bps_device", "IOReadBandwidthMax", 0),
            ("blkio.throttle.write_bps_device", "IOWriteBandwidthMax", 1),
            ("blkio.throttle.read_iops_device", "IOReadIOPSMax", 2),
            ("blkio.throttle.write_iops_device", "IOWriteIOPSMax", 3),
        ] {
            let lines = s
                .io_max
                .iter()
                .filter_map(|(d, m)| {
                    let l = [m.rbps, m.wbps, m.riops, m.wiops][pick]?;
                    // 0 clears a v1 throttle entry.
                    Some((d.to_string(), l.bytes().unwrap_or(0).to_string()))
                })
                .collect();
            self.wants.push(Want::Lines {
                file: file.into(),
                lines,
                why: key.into(),
                reset: Reset::Zero,
            });
        }
    }

    fn hugetlb(&mut self, version: Version) {
        // Every page size the host has: those the plan leaves out go back to no limit.
        let mut sizes: Vec<(u64, Limit, bool)> = self
            .page_sizes
            .iter()
            .filter(|p| !self.slice.hugetlb_max.contains_key(p))
            .map(|p| (*p, Limit::Infinity, true))
            .collect();
        sizes.extend(self.slice.hugetlb_max.iter().map(|(p, l)| (*p, *l, false)));
        for (size, limit, default) in &sizes {
            let (size, limit) = (size, limit);
            let name = page_size_cgroup_name(*size);
            let why = if *default {
                format!("HugetlbMax[{name}] (default)")
            } else {
                format!("HugetlbMax[{name}]={}", limit.v2())
            };
            match version {
                Version::V2 => {
                    self.wants.push(v(
                        &format!("hugetlb.{name}.max"),
                        limit.v2(),
                        why.clone(),
                        Cmp::Number,
                        *default,
                    ));
                    if self.caps.hugetlb_rsvd {
                        self.wants.push(v(
                            &format!("hugetlb.{name}.rsvd.max"),
                            limit.v2(),
                            why,
                            Cmp::Number,
                            true,
                        ));
                    }
                }
                Version::V1 => {
                    self.wants.push(v(
                        &format!("hugetlb.{name}.limit_in_bytes"),
                        limit.v1(),
                        why.clone(),
                        Cmp::Number,
                        *default,
                    ));
                    if self.caps.hugetlb_rsvd {
                        self.wants.push(v(
                            &format!("hugetlb.{name}.rsvd.limit_in_bytes"),
                            limit.v1(),
                            why,
                            Cmp::Number,
                            true,
                        ));
                    }
                }
            }
        }
    }
}

/// Compare a control file's content with a wanted value.
pub fn same(cmp: Cmp, current: &str, wanted: &str) -> bool {
    let (c, w) = (current.trim(), wanted.trim());
    match cmp {
        Cmp::Exact => c == w,
        Cmp::Tokens => c.split_whitespace().eq(w.split_whitespace()),
        Cmp::Set => match (IdSet::parse(c), IdSet::parse(w)) {
            (Ok(a), Ok(b)) => a == b,
            _ => c == w,
        },
        Cmp::Number => number(c) == number(w),
    }
}

/// `max`, `-1` and anything at or above 2^62 (v1's page-counter maximum) mean "no limit".
fn number(s: &str) -> Option<u64> {
    match s {
        "max" | "-1" => Some(u64::MAX),
        _ => s
            .parse::<u64>()
            .ok()
            .map(|n| if n >= 1 << 62 { u64::MAX } else { n }),
    }
}

/// The lines of a keyed file, `KEY -> rest`.
pub fn keyed_lines(content: &str) -> Vec<(String, String)> {
    content
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let (k, rest) = l.split_once(char::is_whitespace)?;
            Some((k.to_string(), rest.trim().to_string()))
        })
        .collect()
}

/// Whether a keyed line's current value equals the wanted one; a missing line equals the
/// reset value.
pub fn same_line(reset: Reset, current: Option<&str>, wanted: &str) -> bool {
    let empty = match reset {
        Reset::IoMax => "rbps=max wbps=max riops=max wiops=max",
        Reset::Zero => "0",
        Reset::Default => "",
    };
    let cur = current.unwrap_or(empty);
    cur.split_whitespace().eq(wanted.split_whitespace())
}

pub fn reset_line(reset: Reset, key: &str) -> String {
    match reset {
        Reset::IoMax => format!("{key} rbps=max wbps=max riops=max wiops=max"),
        Reset::Zero => format!("{key} 0"),
        Reset::Default => format!("{key} default"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_conversions() {
        assert_eq!(weight_to_shares(100), 1024);
        assert_eq!(weight_to_shares(10), 102);
        assert_eq!(weight_to_shares(1000), 10240);
        assert_eq!(weight_to_shares(1), 10);
        assert_eq!(weight_to_bfq(100), 100);
        assert_eq!(weight_to_bfq(10), 10);
        assert_eq!(weight_to_bfq(1000), 181);
        assert_eq!(weight_to_bfq(10000), 1000);
        assert_eq!(weight_to_bfq(1), 1);
    }

    #[test]
    fn comparisons() {
        assert!(same(Cmp::Number, "9223372036854771712", "-1"));
        assert!(same(Cmp::Number, "max", "-1"));
        assert!(!same(Cmp::Number, "1024", "1025"));
        assert!(same(Cmp::Set, "0,1", "0-1"));
        assert!(same(Cmp::Tokens, "max 100000\n", "max  100000"));
        assert!(same_line(
            Reset::IoMax,
            None,
            "rbps=max wbps=max riops=max wiops=max"
        ));
        assert!(same_line(Reset::Zero, Some("1000"), "1000"));
    }
}
