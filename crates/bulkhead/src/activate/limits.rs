//! How often a socket's limits were hit, for `bulkhead status` (and `--json`): each counter
//! says which plan key to look at.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The live counters of one socket.
#[derive(Default)]
pub struct Hits {
    pub notify_refused: AtomicU64,
}

impl Hits {
    pub fn snapshot(&self) -> LimitsStatus {
        LimitsStatus {
            notify_refused: self.notify_refused.load(Relaxed),
        }
    }
}

/// The counters as the status file holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LimitsStatus {
    /// Datagrams with READY=1 on the notify socket from a process outside the target's tree.
    pub notify_refused: u64,
}

impl LimitsStatus {
    /// The counters that are not zero, each with the plan key or rule it belongs to.
    pub fn hit(&self) -> Vec<(&'static str, u64)> {
        [("notify from outside the target", self.notify_refused)]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}
