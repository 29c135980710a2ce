//! How often a socket's limits were hit, for `bulkhead status` (and `--json`): each counter
//! names the plan key to look at.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The live counters of one socket.
#[derive(Default)]
pub struct Hits {
    pub max_connections: AtomicU64,
    pub per_source: AtomicU64,
    pub idle_closed: AtomicU64,
    pub proxy_header_timeouts: AtomicU64,
    pub proxy_header_invalid: AtomicU64,
    pub udp_flows_evicted: AtomicU64,
    pub udp_dropped: AtomicU64,
    pub accept_errors: AtomicU64,
    pub notify_refused: AtomicU64,
}

impl Hits {
    /// Count one hit. Returns the count when this hit should be logged: the 1st, 2nd, 4th,
    /// 8th... so a flood of them costs a few log lines, not one each.
    pub fn add(c: &AtomicU64) -> Option<u64> {
        let n = c.fetch_add(1, Relaxed) + 1;
        n.is_power_of_two().then_some(n)
    }
    pub fn snapshot(&self) -> LimitsStatus {
        LimitsStatus {
            max_connections: self.max_connections.load(Relaxed),
            per_source: self.per_source.load(Relaxed),
            idle_closed: self.idle_closed.load(Relaxed),
            proxy_header_timeouts: self.proxy_header_timeouts.load(Relaxed),
            proxy_header_invalid: self.proxy_header_invalid.load(Relaxed),
            udp_flows_evicted: self.udp_flows_evicted.load(Relaxed),
            udp_dropped: self.udp_dropped.load(Relaxed),
            accept_errors: self.accept_errors.load(Relaxed),
            notify_refused: self.notify_refused.load(Relaxed),
        }
    }
}

/// The counters as the status file holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LimitsStatus {
    /// Times every slot was taken, so new clients waited in the listen backlog.
    pub max_connections: u64,
    /// Connections closed at once: their client already had max_connections_per_source.
    pub per_source: u64,
    /// Stream connections closed after connection_idle_timeout without traffic (a UDP flow
    /// that idles out is its normal end, not counted).
    pub idle_closed: u64,
    /// Connections closed without a complete PROXY header within proxy_header_timeout.
    pub proxy_header_timeouts: u64,
    /// Connections closed for a PROXY header that breaks the protocol.
    pub proxy_header_invalid: u64,
    /// UDP flows dropped for a new one (the table was full, or their client had
    /// max_connections_per_source flows).
    pub udp_flows_evicted: u64,
    /// Datagrams dropped because their flow's queue (256) or all queues (16 MiB) were full
    /// while the target started or the backend was slow.
    pub udp_dropped: u64,
    /// accept(2) failures (EMFILE, ENFILE, ENOBUFS: out of descriptors or memory).
    pub accept_errors: u64,
    /// Datagrams with READY=1 on the notify socket from a process outside the target's tree.
    pub notify_refused: u64,
}

impl LimitsStatus {
    /// Every counter: (metric label, the plan key or rule in words, count).
    pub fn all(&self) -> [(&'static str, &'static str, u64); 9] {
        [
            ("max_connections", "max_connections", self.max_connections),
            (
                "max_connections_per_source",
                "max_connections_per_source",
                self.per_source,
            ),
            (
                "connection_idle_timeout",
                "connection_idle_timeout",
                self.idle_closed,
            ),
            (
                "proxy_header_timeout",
                "proxy_header_timeout",
                self.proxy_header_timeouts,
            ),
            (
                "proxy_header_invalid",
                "invalid PROXY header",
                self.proxy_header_invalid,
            ),
            (
                "udp_flows_evicted",
                "UDP flows evicted",
                self.udp_flows_evicted,
            ),
            (
                "udp_datagrams_dropped",
                "UDP datagrams dropped (queues full)",
                self.udp_dropped,
            ),
            ("accept_errors", "accept failed", self.accept_errors),
            (
                "notify_outside_target",
                "READY=1 from outside the target",
                self.notify_refused,
            ),
        ]
    }

    /// The counters that are not zero, each with the plan key or rule it belongs to.
    pub fn hit(&self) -> Vec<(&'static str, u64)> {
        self.all()
            .into_iter()
            .filter(|(_, _, n)| *n > 0)
            .map(|(_, what, n)| (what, n))
            .collect()
    }
}
