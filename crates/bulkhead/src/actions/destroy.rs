//! `destroy`: remove slices, children first.

use super::slices::parse_slice;
use super::Context;
use bulkhead_cgroups::{Backend, Changes, Chosen, ChosenOp, Outcome, Placement};
use bulkhead_plan::SliceName;
use bulkhead_sys::error::Result;

/// Which slices to remove.
#[derive(Debug, Clone)]
pub enum Which {
    /// The plan's.
    Plan,
    /// These, by name (and their children).
    Named(Vec<String>),
    /// Every slice bulkhead created under the cgroup root.
    All,
}

/// What destroy would do; `changes` is None when none of the slices exist.
pub struct DestroyPlan {
    pub chosen: Chosen,
    pub changes: Option<Changes<ChosenOp>>,
}

pub fn plan(cx: &Context, which: &Which, kill: bool) -> Result<DestroyPlan> {
    let chosen = cx.choose()?;
    let names: Vec<SliceName> = match which {
        Which::All => chosen.slices(),
        Which::Named(v) => v.iter().map(|s| parse_slice(s)).collect::<Result<_>>()?,
        Which::Plan => cx.load_plan()?.slices.keys().cloned().collect(),
    };
    let present: Vec<SliceName> = names
        .into_iter()
        .filter(|n| chosen.slice_exists(n))
        .collect();
    let changes = if present.is_empty() {
        None
    } else {
        Some(chosen.plan_destroy(&present, kill)?)
    };
    Ok(DestroyPlan { chosen, changes })
}

impl DestroyPlan {
    pub fn execute(&self) -> Result<Option<Outcome>> {
        let Some(c) = &self.changes else {
            return Ok(None);
        };
        let out = self.chosen.execute(c)?;
        crate::tasks::forget(&c.slices);
        Ok(Some(out))
    }
}
