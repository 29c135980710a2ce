//! Directive -> control file writes, for each controller on v1 and v2, the way systemd
//! maps them. Pure data: no file is read or written here. One file per controller.

mod compare;
mod cpu;
mod cpuset;
mod hugetlb;
mod io;
mod memory;

pub use compare::{keyed_lines, reset_line, same, same_line};

use crate::layout::{Caps, Version};
use bulkhead_plan::ResolvedSlice;
use bulkhead_sys::error::Diagnostic;
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
    /// io.latency: `MAJ:MIN target=max` (the kernel lists only devices with a target)
    Latency,
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

impl Want {
    /// Whether the plan asked for this value, rather than a default it leaves as the kernel
    /// has it (what `status` shows as planned and what a container is given).
    pub fn planned(&self) -> bool {
        match self {
            Want::Value { optional: true, .. } => false,
            Want::Value { why, .. } => !why.contains("(default)"),
            Want::Lines { lines, why, .. } => {
                !lines.is_empty()
                    && (!why.contains("(default)") || lines.iter().any(|(k, _)| k != "default"))
            }
        }
    }
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

pub(super) fn v(
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
    pub(super) fn warn(&mut self, directive: &str, why: &str, hint: &str) {
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
}
