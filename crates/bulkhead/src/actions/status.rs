//! `status`: what each slice uses and how much it stalls, its planned limits beside what the
//! kernel holds, and the state of served sockets.

use super::Context;
pub use crate::activate::state::SocketStatus;
pub use bulkhead_cgroups::fs::Held;
use bulkhead_cgroups::stats;
pub use bulkhead_cgroups::stats::{Avg, Pressure, Psi, SliceStatus, Status};
use bulkhead_cgroups::{Chosen, Placement};
use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::Host;
use std::time::Duration;

/// One reading: the slices (CPU shares over `interval`) and the sockets.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub slices: Status,
    pub sockets: Vec<SocketStatus>,
    /// The guard, when one runs or ran since boot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardReport>,
    /// Each planned slice's directives: the plan's value beside what the kernel holds
    /// (empty when the plan cannot be read or resolved).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<SliceLimits>,
}

/// A slice's planned directives and what the kernel holds for them, and the directives this
/// host does not apply, each with its reason (`not applied` in the text).
#[derive(Debug, serde::Serialize)]
pub struct SliceLimits {
    pub slice: String,
    pub directives: Vec<Held>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_applied: Vec<NotApplied>,
}

/// A planned directive this host does not apply, and what to do.
#[derive(Debug, serde::Serialize)]
pub struct NotApplied {
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The guard's last status, and whether its process is alive.
#[derive(Debug, serde::Serialize)]
pub struct GuardReport {
    pub running: bool,
    #[serde(flatten)]
    pub status: crate::guard::state::Status,
}

/// A status reader for repeated readings (`--watch`).
pub struct Reader {
    chosen: Chosen,
    interval: Duration,
    /// The plan resolved once, for the planned limits (None: it cannot be read).
    plan: Option<ResolvedPlan>,
}

/// Check the interval and choose the backend.
pub fn reader(cx: &Context, seconds: f64) -> Result<Reader> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) {
        return Err(Error::invalid(Diagnostic::error(format!(
            "the interval must be between 0 and 3600 seconds, not {seconds}"
        ))));
    }
    let plan = cx
        .load_plan()
        .and_then(|p| p.resolve(&Host::detect_for(p.device_paths())))
        .ok();
    Ok(Reader {
        chosen: cx.choose()?,
        interval: Duration::from_secs_f64(seconds),
        plan,
    })
}

impl Reader {
    /// Read everything twice, `interval` apart.
    pub fn read(&self) -> Report {
        let names = self.chosen.slices();
        let mut st = stats::status(self.chosen.reader(), &names, self.interval);
        st.backend = self.chosen.name().into();
        st.layout = self.chosen.layout_line();
        st.unverified = self.chosen.unverified();
        Report {
            slices: st,
            sockets: crate::activate::state::read_all(),
            guard: crate::guard::status().map(|(status, running)| GuardReport { running, status }),
            limits: self.limits(),
        }
    }

    /// The planned limits of the plan's slices that exist, beside the kernel's values.
    fn limits(&self) -> Vec<SliceLimits> {
        let Some(plan) = &self.plan else {
            return vec![];
        };
        self.chosen
            .reader()
            .held(plan)
            .into_iter()
            .filter(|h| !h.held.is_empty() || !h.unapplied.is_empty())
            .map(|h| SliceLimits {
                slice: h.slice,
                directives: h.held,
                not_applied: h
                    .unapplied
                    .into_iter()
                    .map(|d| NotApplied {
                        reason: d.message,
                        hint: d.hint,
                    })
                    .collect(),
            })
            .collect()
    }
}

/// One reading of each of these slices that exists (no CPU shares: no interval), for a
/// caller that reports figures (the agent). The backend cannot be chosen: none.
pub fn slices_now(cx: &Context, names: &[SliceName]) -> Vec<SliceStatus> {
    let Ok(chosen) = cx.choose() else {
        return vec![];
    };
    names
        .iter()
        .filter(|n| chosen.slice_exists(n))
        .map(|n| stats::read_slice(chosen.reader(), n))
        .collect()
}

/// The pressure of any cgroup2 directory (a pod's, for the agent): its cpu, memory and io
/// pressure files; None when it has none (or is not there).
pub fn pressure_of(dir: &std::path::Path) -> Option<Psi> {
    stats::psi_of(&bulkhead_sys::cgdir::CgroupDir::open(dir)?)
}
