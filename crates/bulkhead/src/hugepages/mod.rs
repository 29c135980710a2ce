//! Huge pages: the plan's `[hugepages]` section (hugetlb pools per size and NUMA node, the THP
//! switches, hugetlbfs mounts), applied with read-back and put back by `reset`; what processes
//! and slices really got; `run --hugepages`; `collapse`.
//!
//! Data flows one way, as for slices: the plan crate parses and type-checks the section and
//! resolves it against the kernel's [`Facts`], [`ops::plan_apply`] turns it into [`HpOp`]s (plain
//! data, printed by `--dry-run`), [`ops::execute`] carries them out, recording in [`state`] what
//! it found before so [`ops::reset`] can put it back.
//!
//! - [`usage`]: a process's memory by page kind (smaps, smaps_rollup, numa_maps) and the
//!   hugetlb cgroup counters of slices; `status`.
//! - [`collapse`]: `process_madvise(MADV_COLLAPSE)` on a pidfd.
//! - [`allocator`]: which allocator a program uses and how its huge page switch is spelled.
//! - [`launch`]: the allocator switches of `run --hugepages` and the check that they worked.

pub mod allocator;
pub mod collapse;
pub mod launch;
pub mod ops;
pub mod state;
pub mod usage;

pub use bulkhead_plan::hugepages::{HugepagesSpec, Resolved};
pub use bulkhead_sys::host::hugepages::{Facts, Paths};
pub use ops::HpOp;

use bulkhead_plan::hugepages as model;
use bulkhead_plan::Plan;
use bulkhead_sys::error::Result;

/// What `apply` would do for the plan's `[hugepages]` section.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Changes {
    pub resolved: Resolved,
    pub ops: Vec<HpOp>,
}

/// Resolve the plan's section against this kernel and work out the changes (reads the system,
/// changes nothing). `None` when the plan has no `[hugepages]` section.
pub fn plan_apply(plan: &Plan, paths: &Paths, force: bool) -> Result<Option<Changes>> {
    let Some(spec) = &plan.hugepages else {
        return Ok(None);
    };
    let facts = Facts::read(paths);
    let resolved = model::resolve(spec, &plan.source, &facts, force)?;
    let ops = ops::plan_apply(&resolved, &facts, paths)?;
    Ok(Some(Changes { resolved, ops }))
}
