//! `hugepages status|usage|collapse|reset`: the machine's huge page pools, THP and hugetlbfs
//! mounts, what processes and slices got, `MADV_COLLAPSE` on a process, and putting back what
//! bulkhead's applies changed. The CLI and the agent call these; they never build a backend or
//! read the record themselves.

use super::Context;
use crate::hugepages::{collapse as hp_collapse, ops, state, usage, Facts, Paths};
use bulkhead_cgroups::{CgroupFs, Layout};
use bulkhead_sys::error::{Error, Result};
use std::path::PathBuf;

pub use crate::hugepages::collapse::CollapseReport;
pub use crate::hugepages::ops::{HpOp, PoolSet, ResetOutcome};
pub use crate::hugepages::usage::{HugetlbCounter, ProcessUsage, Rollup, Status, Vma};
pub use bulkhead_sys::host::hugepages::{Choice, Meminfo, Pool};
/// The environment variable that points the record of changed settings elsewhere (the agent
/// keeps it in its state directory).
pub use state::STATE_ENV;

/// `hugepages status`: pools, THP, mounts, the slices' hugetlb counters and the `top`
/// processes by huge page memory.
pub fn status(cx: &Context, top: usize) -> Result<Status> {
    let layout = Layout::detect()
        .map_err(|e| Error::failed(format!("cannot read /proc/self/mountinfo: {e}")))?;
    let fs = CgroupFs::new(layout, &cx.cgroup_root)?;
    usage::status(&fs, &Paths::default(), top, &state::default_path())
}

/// `hugepages usage PID`: one process's memory by page kind, with what it asked for and did
/// not get.
pub fn usage(pid: i32) -> Result<ProcessUsage> {
    let paths = Paths::default();
    let facts = Facts::read(&paths);
    let layout = Layout::detect().ok();
    let mut u = usage::process_usage(&paths, pid, layout.as_ref(), &facts.page_sizes)?;
    u.findings = usage::findings(&u, &facts.thp, &facts.pools, facts.default_size);
    Ok(u)
}

/// `hugepages collapse PID`: MADV_COLLAPSE on the process's anonymous memory.
pub fn collapse(pid: i32) -> Result<CollapseReport> {
    let facts = Facts::read(&Paths::default());
    hp_collapse::collapse(pid, facts.thp.pmd_size.unwrap_or(2 << 20))
}

/// What `hugepages reset` would put back, from the record bulkhead's applies kept.
#[derive(Debug)]
pub struct ResetPlan {
    /// The record (`STATE_ENV`, or /run/bulkhead's default).
    pub record: PathBuf,
    /// Whether the record holds anything (bulkhead changed a setting).
    pub recorded: bool,
    /// The changes, in order (none when nothing is recorded).
    pub ops: Vec<HpOp>,
}

impl ResetPlan {
    /// Whether bulkhead changed nothing it has to put back.
    pub fn is_empty(&self) -> bool {
        !self.recorded
    }

    /// Put the settings back; what could not be stays in the record.
    pub fn execute(&self) -> Result<ResetOutcome> {
        ops::reset(&self.ops, &Paths::default(), &self.record)
    }
}

/// Plan `hugepages reset` (reads the record and the system, changes nothing).
pub fn plan_reset() -> Result<ResetPlan> {
    let record = state::default_path();
    let saved = state::Saved::load(&record)?;
    let recorded = !saved.is_empty();
    let ops = if recorded {
        ops::plan_reset(&saved, &Paths::default())
    } else {
        Vec::new()
    };
    Ok(ResetPlan {
        record,
        recorded,
        ops,
    })
}

/// Plan and carry out `hugepages reset` (the agent's uninstall).
pub fn reset() -> Result<ResetOutcome> {
    let plan = plan_reset()?;
    if plan.is_empty() {
        return Ok(ResetOutcome::default());
    }
    plan.execute()
}

/// The machine's memory as /proc/meminfo counts it (total, available, huge pages).
pub fn meminfo() -> Meminfo {
    bulkhead_sys::host::hugepages::meminfo(&Paths::default())
}

/// THP's `enabled` mode (`always`, `madvise`, `never`); None without THP.
pub fn thp_mode() -> Option<String> {
    bulkhead_sys::host::hugepages::thp(&Paths::default())
        .enabled
        .map(|c| c.active)
}

/// The machine's hugetlb pools, one per page size.
pub fn pools() -> Vec<Pool> {
    bulkhead_sys::host::hugepages::pools(&Paths::default())
}

/// The `nr_hugepages` file of the pool of `size` byte pages.
pub fn pool_file(size: u64) -> PathBuf {
    Paths::default().pool_file(size, None)
}

/// The pages in the pool of `size` byte pages; None when the kernel has no such pool.
pub fn pool_pages(size: u64) -> Option<u64> {
    bulkhead_sys::host::hugepages::pool_pages(&Paths::default(), size, None)
}

/// Set the pool of `size` byte pages to `pages` and read back what the kernel gave
/// (compacting memory once when short). The caller records the size before to put it back.
pub fn set_pool(size: u64, pages: u64) -> Result<PoolSet> {
    ops::set_pool(&Paths::default(), size, None, pages)
}

/// How to reserve `pages` of `size` at boot (the kernel command line), for a message.
pub fn boot_hint(size: u64, pages: u64) -> String {
    ops::boot_hint(size, None, pages)
}

/// A process's memory totals by page kind (/proc/PID/smaps_rollup; zeros when unreadable).
pub fn rollup(pid: u32) -> Rollup {
    let t = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    usage::parse_rollup(&t)
}

/// This process's own mappings with their huge page counters (/proc/self/smaps; none when
/// unreadable).
pub fn own_vmas() -> Vec<Vma> {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    usage::parse_smaps(&text)
}
