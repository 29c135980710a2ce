//! Helpers shared by the agent's test binaries (agent.rs, node.rs).
#![allow(dead_code)]

use bulkhead_agent::crd::{BulkheadNode, PlanReport};
use kube::api::Api;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A directory removed when the test ends.
pub struct TempDir(pub PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file's text, trimmed; a missing file fails the test, naming it.
pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_string()
}

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
