//! `destroy`: remove slices, children first; for the whole plan (or `--all`), also put back
//! what the plan's `[iocost]` section changed on the cgroup2 root (from bulkhead's record).

use super::slices::parse_slice;
use super::Context;
use bulkhead_cgroups::iocost::{self, IocostOp};
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
    /// io.cost lines to put back (the whole plan or --all only; empty: nothing recorded).
    pub iocost: Vec<IocostOp>,
    /// Whether there is an io.cost record to settle (even with nothing left to write).
    iocost_recorded: bool,
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
        Some(
            chosen
                .plan_destroy(&present, kill)
                .map_err(|e| place_moves_back(cx, e))?,
        )
    };
    let rec = match which {
        Which::Named(_) => iocost::record::Record::default(),
        Which::Plan | Which::All => iocost::record::Record::load(&iocost::record::default_path())?,
    };
    Ok(DestroyPlan {
        chosen,
        changes,
        iocost: iocost::plan_reset(&rec),
        iocost_recorded: !rec.is_empty(),
    })
}

/// A refusal because slices hold processes, while `place` runs for this cgroup root: moving
/// them out by hand is undone within its interval (issue 41 #6), so the hint says to stop it.
fn place_moves_back(cx: &Context, e: bulkhead_sys::error::Error) -> bulkhead_sys::error::Error {
    use crate::place::state;
    let busy = e
        .diagnostics()
        .first()
        .is_some_and(|d| d.message.starts_with("slices still have processes"));
    let running = state::read(&state::file(&cx.cgroup_root)).filter(state::alive);
    match running {
        Some(s) if busy => {
            let before = e.diagnostics().first().and_then(|d| d.hint.clone());
            let hint = format!(
                "bulkhead place (PID {}) runs for this plan and puts processes back into its slices: stop it first (kill {}, or /etc/init.d/bulkhead-place stop, or systemctl stop bulkhead-place); then {}",
                s.pid,
                s.pid,
                before.unwrap_or_default()
            );
            e.with_hint(hint)
        }
        _ => e,
    }
}

impl DestroyPlan {
    /// Whether there is nothing to remove or put back.
    pub fn is_empty(&self) -> bool {
        self.changes.is_none() && self.iocost.is_empty()
    }

    /// Remove the slices, then put io.cost back (the slices' io.weight no longer counts).
    pub fn execute(&self) -> Result<Option<Outcome>> {
        let out = match &self.changes {
            Some(c) => {
                let out = self.chosen.execute(c)?;
                crate::tasks::forget(&c.slices);
                Some(out)
            }
            None => None,
        };
        if self.iocost_recorded {
            iocost::reset(&self.iocost, &iocost::record::default_path())?;
        }
        Ok(out)
    }
}
