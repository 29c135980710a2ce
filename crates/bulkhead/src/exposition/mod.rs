//! Prometheus text exposition (format 0.0.4) of what `status` knows, and a small HTTP
//! server for it. Pure up to [`http`]: [`text`] writes families with their HELP and TYPE
//! lines and escapes label values; [`slices`], [`sockets`], [`hugepages`], [`guard`] and
//! [`protection`] (`bulkhead check`'s verdict) turn readings into families (a metric a slice's hierarchy cannot give is left out, never
//! reported as 0); [`http`] answers `GET /metrics` with whatever a render function returns,
//! within fixed limits.

mod cache;
mod dashboard;
pub mod guard;
pub mod http;
pub mod hugepages;
pub mod protection;
pub mod served;
pub mod slices;
pub mod sockets;
pub mod text;

use crate::activate::state::SocketStatus;
use bulkhead_cgroups::stats::SliceStatus;
use bulkhead_sys::host::hugepages::Pool;

/// The Content-Type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One reading of everything the exporter shows.
#[derive(Debug, Default)]
pub struct Reading {
    pub slices: Vec<SliceStatus>,
    pub sockets: Vec<SocketStatus>,
    pub hugepages: Vec<Pool>,
    /// The guard's last status and whether it runs; None when no guard ran since boot.
    pub guard: Option<(crate::guard::state::Status, bool)>,
    /// `bulkhead check`'s last verdict and when it was judged (Unix time); None: not checked.
    pub protection: Option<(std::sync::Arc<crate::check::Report>, f64)>,
}

/// The exposition of a reading.
pub fn render(r: &Reading) -> String {
    let mut w = text::Writer::new();
    slices::write(&mut w, &r.slices);
    sockets::write(&mut w, &r.sockets);
    hugepages::write(&mut w, &r.hugepages);
    if let Some((status, running)) = &r.guard {
        guard::write(&mut w, status, *running);
    }
    if let Some((report, at)) = &r.protection {
        protection::write(&mut w, report, *at);
    }
    w.finish()
}
