//! Huge pages: the plan's `[hugepages]` section (hugetlb pools per size and NUMA node, the THP
//! switches, hugetlbfs mounts), applied with read-back and put back by `reset`; what processes
//! and slices really got; `run --hugepages`; `collapse`.
//!
//! Data flows one way, as for slices: [`model`] parses and type-checks the section, resolves
//! it against the kernel's [`sysfs::Facts`], [`ops::plan_apply`] turns it into [`HpOp`]s (plain
//! data, printed by `--dry-run`), [`ops::execute`] carries them out, recording in [`state`] what
//! it found before so [`ops::reset`] can put it back.
//!
//! - [`sysfs`]: pools, THP, hugetlbfs mounts, meminfo.
//! - [`usage`]: a process's memory by page kind (smaps, smaps_rollup, numa_maps) and the
//!   hugetlb cgroup counters of slices; `status`.
//! - [`collapse`]: `process_madvise(MADV_COLLAPSE)` on a pidfd.
//! - [`launch`]: the allocator switches of `run --hugepages` and the check that they worked.

pub mod collapse;
pub mod launch;
pub mod model;
pub mod ops;
pub mod state;
pub mod sysfs;
pub mod usage;

pub use model::{HugepagesSpec, Resolved};
pub use ops::HpOp;
pub use sysfs::{Facts, Paths};

use crate::error::Result;
use crate::plan::Plan;
use crate::units::human_bytes;
use std::fmt::Write as _;

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

/// The section as `plan show` prints it: page counts, as valid plan TOML.
pub fn show_toml(r: &Resolved) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\n[hugepages]");
    if !r.pools.is_empty() {
        let mut parts: Vec<String> = Vec::new();
        let mut sizes: Vec<u64> = r.pools.iter().map(|p| p.size).collect();
        sizes.dedup();
        for size in sizes {
            let of: Vec<_> = r.pools.iter().filter(|p| p.size == size).collect();
            let name = human_bytes(size);
            if of.iter().all(|p| p.node.is_none()) {
                parts.push(format!("\"{name}\" = {}", of[0].pages));
            } else {
                let nodes: Vec<String> = of
                    .iter()
                    .map(|p| format!("node{} = {}", p.node.unwrap_or(0), p.pages))
                    .collect();
                parts.push(format!("\"{name}\" = {{ {} }}", nodes.join(", ")));
            }
        }
        let _ = writeln!(
            o,
            "pools = {{ {} }}    # pages; all pools: {} of {} RAM",
            parts.join(", "),
            human_bytes(r.pooled_after),
            human_bytes(r.memory)
        );
    }
    if !r.thp.is_empty() {
        let parts: Vec<String> = r
            .thp
            .iter()
            .map(|t| format!("{} = \"{}\"", t.file, t.value))
            .collect();
        let _ = writeln!(o, "thp = {{ {} }}", parts.join(", "));
    }
    for m in &r.mounts {
        let _ = writeln!(
            o,
            "[[hugepages.mount]]\npath = \"{}\"\npagesize = \"{}\"",
            m.path.display(),
            human_bytes(m.pagesize)
        );
        for opt in m.options.split(',') {
            match opt.split_once('=') {
                Some(("size", v)) if v.ends_with('%') => {
                    let _ = writeln!(o, "size = \"{v}\"");
                }
                Some(("size", v)) => {
                    let b = v.parse::<u64>().unwrap_or(0);
                    let _ = writeln!(o, "size = \"{}\"", human_bytes(b));
                }
                Some(("mode", v)) => {
                    let _ = writeln!(o, "mode = \"{v}\"");
                }
                _ => {}
            }
        }
    }
    o
}
