//! The exporter's own counters, served after the page: requests answered, pages rendered,
//! connections open now, and connections closed by each limit (the family a scraper's
//! operator looks at when a client is turned away).

use crate::exposition::text::{Kind, Value, Writer};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub renders: AtomicU64,
    pub open: AtomicU64,
    pub per_source: AtomicU64,
    pub head_timeouts: AtomicU64,
    pub timeouts: AtomicU64,
    pub too_large: AtomicU64,
}

/// Counts one open connection while it lives.
pub struct Open<'a>(&'a Counters);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Relaxed);
    }
}

impl Counters {
    pub fn open(&self) -> Open<'_> {
        self.open.fetch_add(1, Relaxed);
        Open(self)
    }

    /// The exporter's families.
    pub fn render(&self) -> String {
        let mut w = Writer::new();
        let v = |c: &AtomicU64| Value::Int(c.load(Relaxed));
        w.family(
            "bulkhead_exporter_requests_total",
            Kind::Counter,
            "Requests the exporter answered.",
            &[(vec![], v(&self.requests))],
        );
        w.family(
            "bulkhead_exporter_renders_total",
            Kind::Counter,
            "Pages rendered; scrapes within a second of a render share its page.",
            &[(vec![], v(&self.renders))],
        );
        w.family(
            "bulkhead_exporter_connections",
            Kind::Gauge,
            "Connections the exporter serves now.",
            &[(vec![], v(&self.open))],
        );
        let closed: Vec<_> = [
            ("per_source", &self.per_source),
            ("head_timeout", &self.head_timeouts),
            ("timeout", &self.timeouts),
            ("too_large", &self.too_large),
        ]
        .into_iter()
        .map(|(reason, c)| (vec![("reason", reason.to_string())], v(c)))
        .collect();
        w.family(
            "bulkhead_exporter_connections_closed_total",
            Kind::Counter,
            "Connections the exporter closed at a limit: per_source (the client held its share), head_timeout (no complete request head in time), timeout (the exchange took too long), too_large (request head too large).",
            &closed,
        );
        w.finish()
    }
}
