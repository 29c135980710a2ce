//! `status`: what each slice uses and how much it stalls, and the state of served sockets.

use super::Context;
pub use crate::activate::state::SocketStatus;
use bulkhead_cgroups::stats;
pub use bulkhead_cgroups::stats::{Pressure, SliceStatus, Status};
use bulkhead_cgroups::{Chosen, Placement};
use bulkhead_plan::SliceName;
use bulkhead_sys::error::{Diagnostic, Error, Result};
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
}

/// Check the interval and choose the backend.
pub fn reader(cx: &Context, seconds: f64) -> Result<Reader> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) {
        return Err(Error::invalid(Diagnostic::error(format!(
            "the interval must be between 0 and 3600 seconds, not {seconds}"
        ))));
    }
    Ok(Reader {
        chosen: cx.choose()?,
        interval: Duration::from_secs_f64(seconds),
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
        }
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
