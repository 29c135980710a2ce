//! `CPUSchedulingSliceSec`: the EEVDF slice a slice's tasks ask the kernel for (Linux 6.12+).
//!
//! It is no cgroup setting: the kernel takes it per thread (`sched_setattr`, SCHED_OTHER with
//! `sched_runtime`), a shorter slice lets a waking task preempt the running one sooner, and
//! the smallest slice below a cgroup becomes the slice of the cgroup's own scheduling entity.
//! `apply` records it per slice in /run/bulkhead/sched-slice and sets it on every thread
//! already in the slice; `run` sets it on itself before it execs (threads and children
//! inherit it), `move` on the processes it moves, and the guard re-checks its slice.

use bulkhead_cgroups::CgroupFs;
use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::{paths, sched};
use std::fs;
use std::path::PathBuf;

/// A slice whose recorded scheduler slice changes (`ns: None`: no longer set by the plan).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    pub slice: SliceName,
    pub ns: Option<u64>,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ns {
            Some(ns) => write!(
                f,
                "sched_setattr every task of {} to a {} slice  # CPUSchedulingSliceSec",
                self.slice.unit(),
                millis(ns)
            ),
            None => write!(
                f,
                "forget the scheduler slice of {} (tasks keep theirs until they restart)",
                self.slice.unit()
            ),
        }
    }
}

/// `0.5ms`.
pub fn millis(ns: u64) -> String {
    format!("{}ms", ns as f64 / 1e6)
}

fn record_path(slice: &SliceName) -> PathBuf {
    paths::sched_slices_dir().join(slice.as_str())
}

/// The slice recorded for a slice by the last `apply`.
pub fn recorded(slice: &SliceName) -> Option<u64> {
    fs::read_to_string(record_path(slice))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What `apply` changes: slices whose setting differs from the record.
pub fn plan(resolved: &ResolvedPlan) -> Vec<Change> {
    resolved
        .slices
        .iter()
        .filter(|s| s.sched_slice_ns != recorded(s.name()))
        .map(|s| Change {
            slice: s.name().clone(),
            ns: s.sched_slice_ns,
        })
        .collect()
}

/// A warning when the plan asks for slices this kernel cannot give.
pub fn unsupported(resolved: &ResolvedPlan) -> Option<Diagnostic> {
    let asked: Vec<String> = resolved
        .slices
        .iter()
        .filter(|s| s.sched_slice_ns.is_some())
        .map(|s| s.name().to_string())
        .collect();
    if asked.is_empty() || sched::custom_slices_supported() {
        return None;
    }
    Some(
        Diagnostic::warning(format!(
            "this kernel takes no custom scheduler slices (Linux 6.12+), so CPUSchedulingSliceSec of {} does nothing",
            asked.join(", ")
        ))
        .hint("everything else in the plan applies; the tasks keep the kernel's default slice"),
    )
}

/// Record a change (the record is what `run` and `move` read).
pub fn record(c: &Change) -> std::io::Result<()> {
    let p = record_path(&c.slice);
    match c.ns {
        Some(ns) => {
            fs::create_dir_all(paths::sched_slices_dir())?;
            fs::write(p, format!("{ns}\n"))
        }
        None => match fs::remove_file(p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// Forget the records of destroyed slices (by name, as the backends list them).
pub fn forget(slices: &[String]) {
    for s in slices.iter().filter_map(|s| SliceName::parse(s).ok()) {
        let _ = fs::remove_file(record_path(&s));
    }
}

/// How setting went: threads set, threads that refused (and the first reason).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Applied {
    pub threads: usize,
    pub failed: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Applied {
    fn add(&mut self, r: std::io::Result<bool>) {
        match r {
            Ok(true) => self.threads += 1,
            Ok(false) => {}
            // A thread that ended meanwhile is no failure.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => {
                self.failed += 1;
                self.error.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Set the slice on every thread of these processes.
pub fn set_on_pids(pids: &[i32], ns: u64) -> Applied {
    let mut a = Applied::default();
    for &pid in pids {
        for tid in sched::threads(pid) {
            a.add(sched::set_slice(tid, ns));
        }
    }
    a
}

/// Set the slice on every thread in a slice (and the cgroups below it).
pub fn set_on_slice(reader: &CgroupFs, slice: &SliceName, ns: u64) -> Applied {
    set_on_pids(&reader.pids(slice), ns)
}

/// Before `run` execs into a slice: take the slice's recorded scheduler slice, so the
/// command and everything it starts inherit it. A kernel that refuses is reported, not fatal.
pub fn set_on_self(slice: &SliceName) -> Option<String> {
    let ns = recorded(slice)?;
    match sched::set_slice(0, ns) {
        Ok(_) => None,
        Err(e) => Some(format!(
            "the scheduler slice of {slice} ({}) was not set: {e}",
            millis(ns)
        )),
    }
}
