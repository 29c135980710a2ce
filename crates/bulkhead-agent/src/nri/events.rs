//! Events on pods from the NRI plugin: what bulkhead applied to a pod's container, and what
//! it did not (refused, or not applicable on this node's kernel), where the pod's owner and
//! the operator look (`kubectl describe pod`, `kubectl get events`). Sent from a thread of
//! their own through a bounded queue: a slow or absent API server never holds up a
//! container's creation, and a full queue drops events (counted and logged), never blocks.

use crate::logging::log;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// Events waiting for the API server, at most.
const QUEUE: usize = 256;
/// The longest note (the API's limit is 1 kB).
const MAX_NOTE: usize = 1000;

/// One event about one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub warning: bool,
    /// `BulkheadApplied`, `BulkheadNotApplied`, `BulkheadRefused`.
    pub reason: &'static str,
    pub note: String,
}

/// The sending side; without an API server (no in-cluster configuration) events are only
/// logged.
pub struct Events {
    tx: Option<SyncSender<PodEvent>>,
    dropped: Arc<AtomicU64>,
}

impl Events {
    /// Events only logged (tests, a plugin outside a cluster).
    pub fn off() -> Events {
        Events {
            tx: None,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Start the sender thread: the in-cluster client (the pod's service account), events
    /// reported by `plugin` on `node`.
    pub fn start(plugin: &str, node: Option<String>) -> Events {
        let (tx, rx) = sync_channel(QUEUE);
        let reporter = Reporter {
            controller: format!("bulkhead.io/{plugin}"),
            instance: node,
        };
        let spawned = std::thread::Builder::new()
            .name("nri-events".into())
            .spawn(move || send_all(rx, reporter));
        match spawned {
            Ok(_) => Events {
                tx: Some(tx),
                dropped: Arc::new(AtomicU64::new(0)),
            },
            Err(e) => {
                log(format!("nri: events off: cannot start their thread: {e}"));
                Events::off()
            }
        }
    }

    /// Queue one event; never waits.
    pub fn send(&self, e: PodEvent) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(e) {
            Ok(()) => {}
            Err(TrySendError::Full(e)) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                log(format!(
                    "nri: {} events waiting for the API server: dropped the one for pod {}/{} ({n} dropped so far)",
                    QUEUE, e.namespace, e.pod
                ));
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// The sender thread: one client, events posted one at a time until the plugin ends.
fn send_all(rx: Receiver<PodEvent>, reporter: Reporter) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return log(format!("nri: events off: {e}")),
    };
    rt.block_on(async move {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                log(format!(
                    "nri: events off (pods get no events; the log has everything): no API server: {e}"
                ));
                return;
            }
        };
        let recorder = Recorder::new(client, reporter);
        while let Ok(e) = rx.recv() {
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(e.namespace.clone()),
                name: Some(e.pod.clone()),
                uid: (!e.uid.is_empty()).then(|| e.uid.clone()),
                ..Default::default()
            };
            let ev = Event {
                type_: if e.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason.into(),
                note: Some(clip(&e.note)),
                action: "CreateContainer".into(),
                secondary: None,
            };
            if let Err(err) = recorder.publish(&ev, &reference).await {
                log(format!(
                    "nri: event {} on pod {}/{} not sent: {err}",
                    e.reason, e.namespace, e.pod
                ));
            }
        }
    });
}

/// A note cut to the API's limit, on a character boundary.
pub fn clip(note: &str) -> String {
    if note.len() <= MAX_NOTE {
        return note.to_string();
    }
    let mut end = MAX_NOTE - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_fit_the_api() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(800);
        let c = clip(&long);
        assert!(c.len() <= MAX_NOTE && c.ends_with("..."), "{}", c.len());
    }

    #[test]
    fn a_full_queue_drops_and_never_blocks() {
        let (tx, _rx) = sync_channel(QUEUE);
        let ev = Events {
            tx: Some(tx),
            dropped: Arc::new(AtomicU64::new(0)),
        };
        let e = PodEvent {
            namespace: "ns".into(),
            pod: "p".into(),
            uid: String::new(),
            warning: true,
            reason: "BulkheadNotApplied",
            note: "x".into(),
        };
        for _ in 0..QUEUE + 10 {
            ev.send(e.clone());
        }
        assert_eq!(ev.dropped.load(Ordering::Relaxed), 10);
    }
}
