//! Helpers shared by the agent's test binaries (agent.rs, node.rs).

use bulkhead_agent::crd::{BulkheadNode, PlanReport};
use kube::api::Api;
use std::future::Future;
use std::time::{Duration, Instant};

/// Poll `f` every 200 ms until it gives Some, for at most `secs`.
pub async fn wait<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let t0 = Instant::now();
    loop {
        if let Some(v) = f().await {
            eprintln!("  {what}: after {} ms", t0.elapsed().as_millis());
            return v;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out after {secs} s waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The node's report for one plan, from its BulkheadNode.
pub async fn entry(reports: &Api<BulkheadNode>, plan: &str, node: &str) -> Option<PlanReport> {
    let n = reports.get(node).await.ok()?;
    n.status?.plans.into_iter().find(|r| r.plan == plan)
}

/// Run one named step of a scenario: its name before, its time after, and its name again if
/// it fails (a panic unwinding through it).
pub async fn step<T>(name: &str, f: impl Future<Output = T>) -> T {
    eprintln!("step {name}");
    let t0 = Instant::now();
    let named = Named(name);
    let out = f.await;
    std::mem::forget(named);
    eprintln!("step {name}: {} ms", t0.elapsed().as_millis());
    out
}

struct Named<'a>(&'a str);
impl Drop for Named<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("step '{}' failed", self.0);
        }
    }
}
