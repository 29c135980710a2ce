//! `apply`: the plan's slices (through the chosen backend), its `[hugepages]` and `[iocost]`
//! sections, as one transaction. Everything is planned first (reading the system, changing
//! nothing); huge pages and io.cost are set before the slices, so a slice failure takes them
//! back too (and an io.cost failure the huge pages).

use super::Context;
use crate::hugepages::{self, ops::Applied, Paths};
use bulkhead_cgroups::iocost::{self, IocostOp};
use bulkhead_cgroups::{ApplyOptions, Backend, Changes, Chosen, ChosenOp, Outcome, Placement};
use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::{Diagnostic, Error, Result, Severity};
use bulkhead_sys::host::Host;

/// What the user asked `apply` for.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyRequest {
    /// Directives this host cannot honour are errors.
    pub strict: bool,
    /// Apply huge page pools that leave less than the safe share of RAM outside them.
    pub force: bool,
    /// systemd: unit files instead of transient units.
    pub persist: bool,
}

/// Everything `apply` would do, planned against the system as it is now.
pub struct ApplyPlan {
    pub chosen: Chosen,
    pub resolved: ResolvedPlan,
    pub changes: Changes<ChosenOp>,
    pub hugepages: Option<hugepages::Changes>,
    /// The `[iocost]` section's writes to the cgroup2 root (None: the plan has none).
    pub iocost: Option<Vec<IocostOp>>,
    /// io.cost lines bulkhead set on disks the plan no longer names, put back first.
    pub iocost_stale: Vec<IocostOp>,
    /// Scheduler slices (CPUSchedulingSliceSec) to record and set on the slices' tasks.
    pub sched: Vec<crate::tasks::Change>,
    /// The plan's notes, what the host cannot honour, and the huge page section's notes.
    pub notes: Vec<Diagnostic>,
}

impl ApplyPlan {
    /// The plan's slices that do not exist yet, parents first.
    pub fn missing_slices(&self) -> Vec<SliceName> {
        self.resolved
            .slices
            .iter()
            .map(|s| s.name().clone())
            .filter(|n| !self.chosen.slice_exists(n))
            .collect()
    }
}

/// What carrying it out did.
#[derive(Debug, Default, serde::Serialize)]
pub struct ApplyReport {
    /// The slice changes' outcome.
    pub slices: Option<Outcome>,
    /// Huge page changes made.
    pub hugepages_done: usize,
    /// io.cost lines written.
    pub iocost_done: usize,
    /// Pools that needed memory compaction: (directive, asked, got).
    pub compacted: Vec<(String, u64, u64)>,
    /// Threads given their slice's scheduler slice.
    pub sched: crate::tasks::Applied,
}

/// Plan an apply: resolve the plan for this host, ask the backend and the huge page model
/// what they would change. With `strict`, anything the host cannot honour is an error.
pub fn plan(cx: &Context, req: ApplyRequest) -> Result<ApplyPlan> {
    let plan = cx.load_plan()?;
    let resolved = plan.resolve(&Host::detect_for(plan.device_paths()))?;
    let chosen = cx.choose()?;
    // io.cost first: where the kernel has none, the plan is refused before anything else.
    let iocost = match &resolved.iocost {
        None => None,
        Some(r) => {
            let root = iocost::root_or_refuse(&chosen.reader().layout)?;
            Some(iocost::plan_apply(r, &root)?)
        }
    };
    let keep: Vec<_> = resolved
        .iocost
        .iter()
        .flat_map(|r| r.devices.iter().map(|d| d.dev))
        .collect();
    let record = iocost::record::Record::load(&iocost::record::default_path())?;
    let iocost_stale = iocost::plan_reset_except(&record, &keep);
    let changes = chosen.plan_apply(
        &resolved,
        ApplyOptions {
            persist: req.persist,
        },
    )?;
    let hp = hugepages::plan_apply(&resolved.plan, &Paths::default(), req.force)?;
    let mut notes = resolved.notes.clone();
    notes.extend(changes.warnings.iter().cloned());
    notes.extend(crate::tasks::unsupported(&resolved));
    let sched = crate::tasks::plan(&resolved);
    if req.strict {
        strict(&notes)?;
    }
    // What --force let through is said, but is no reason for --strict to refuse.
    if let Some(h) = &hp {
        notes.extend(h.resolved.notes.iter().cloned());
    }
    Ok(ApplyPlan {
        chosen,
        resolved,
        changes,
        hugepages: hp,
        iocost,
        iocost_stale,
        sched,
        notes,
    })
}

/// --strict: every warning becomes an error, and nothing is changed.
fn strict(notes: &[Diagnostic]) -> Result<()> {
    let mut bad: Vec<Diagnostic> = notes
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .cloned()
        .map(|mut d| {
            d.severity = Severity::Error;
            d
        })
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    bad.push(Diagnostic::error(
        "--strict: nothing was changed because the host cannot honour the plan as written",
    ));
    Err(Error::Invalid(bad))
}

impl ApplyPlan {
    /// Whether there is nothing to change.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
            && self.sched.is_empty()
            && self.iocost.as_ref().is_none_or(Vec::is_empty)
            && self.iocost_stale.is_empty()
            && self.hugepages.as_ref().is_none_or(|h| h.ops.is_empty())
    }

    /// Carry it out: huge pages first, then the slices; if the slices fail, the huge page
    /// changes are taken back as well.
    pub fn execute(&self) -> Result<ApplyReport> {
        let mut report = ApplyReport::default();
        let applied = self.execute_hugepages(&mut report)?;
        let cost = match self.execute_iocost(&mut report) {
            Ok(c) => c,
            Err(e) => return Err(undo_hugepages(e, applied)),
        };
        if self.changes.is_empty() {
            report.slices = Some(Outcome::default());
        } else {
            match self.chosen.execute(&self.changes) {
                Ok(o) => report.slices = Some(o),
                Err(e) => return Err(undo_hugepages(undo_iocost(e, cost), applied)),
            }
        }
        report.sched = self.execute_sched()?;
        Ok(report)
    }

    /// Record the scheduler slices, then set them on the tasks already in the slices (also
    /// where the record did not change: tasks that arrived since may lack it).
    fn execute_sched(&self) -> Result<crate::tasks::Applied> {
        for c in &self.sched {
            crate::tasks::record(c).map_err(|e| {
                Error::failed(format!(
                    "cannot record the scheduler slice of {}: {e}",
                    c.slice
                ))
                .with_hint("check that /run/bulkhead is writable")
            })?;
        }
        let mut total = crate::tasks::Applied::default();
        for s in &self.resolved.slices {
            if let Some(ns) = s.sched_slice_ns {
                let a = crate::tasks::set_on_slice(self.chosen.reader(), s.name(), ns);
                total.threads += a.threads;
                total.failed += a.failed;
                total.error = total.error.or(a.error);
            }
        }
        Ok(total)
    }

    fn execute_hugepages(&self, report: &mut ApplyReport) -> Result<Option<Applied>> {
        let Some(c) = self.hugepages.as_ref().filter(|c| !c.ops.is_empty()) else {
            return Ok(None);
        };
        let applied =
            hugepages::ops::execute(&c.ops, &Paths::default(), &hugepages::state::default_path())?;
        report.hugepages_done = applied.done;
        report.compacted = applied
            .pools
            .iter()
            .filter(|(_, r)| r.compacted)
            .map(|(why, r)| (why.clone(), r.asked, r.got))
            .collect();
        Ok(Some(applied))
    }

    fn execute_iocost(&self, report: &mut ApplyReport) -> Result<Option<iocost::Applied>> {
        if !self.iocost_stale.is_empty() {
            iocost::reset(&self.iocost_stale, &iocost::record::default_path())?;
        }
        let Some(ops) = self.iocost.as_ref().filter(|o| !o.is_empty()) else {
            return Ok(None);
        };
        let applied = iocost::execute(ops, &iocost::record::default_path())?;
        report.iocost_done = applied.done;
        Ok(Some(applied))
    }

    /// One line for people: the backend, the layout it drives, and the plan's source.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.chosen.describe(), self.resolved.source)
    }

    pub fn backend_name(&self) -> &'static str {
        self.chosen.name()
    }
}

/// The slice changes failed after io.cost was set: take it back and say so in the error.
fn undo_iocost(e: Error, applied: Option<iocost::Applied>) -> Error {
    let Some(a) = applied else { return e };
    let said = match a.undo() {
        Ok(()) => "the io.cost settings made before them were put back".to_string(),
        Err(u) => u.to_string(),
    };
    let hint = match e.diagnostics().last().and_then(|d| d.hint.clone()) {
        Some(h) => format!("{h}\n  hint: {said}"),
        None => said,
    };
    e.with_hint(hint)
}

/// The slice changes failed after the huge page changes were made: take those back and say
/// so in the error.
fn undo_hugepages(e: Error, applied: Option<Applied>) -> Error {
    let Some(a) = applied else { return e };
    let said = match a.undo() {
        Ok(()) => "the huge page changes made before them were undone".to_string(),
        Err(u) => u.to_string(),
    };
    let hint = match e.diagnostics().last().and_then(|d| d.hint.clone()) {
        Some(h) => format!("{h}\n  hint: {said}"),
        None => said,
    };
    e.with_hint(hint)
}
