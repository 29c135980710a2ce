//! `bulkhead-agent uninstall`, the chart's pre-delete hook. Helm deletes a release's objects
//! all at once, so the agents' pods would get SIGTERM after their RBAC is gone and could
//! neither tell an uninstall from a restart nor clear their node's labels and report. The hook
//! runs first: it deletes the DaemonSet with foreground propagation (the DaemonSet stays,
//! marked as being deleted, until its pods are gone), so each agent sees at SIGTERM that its
//! DaemonSet is going and undoes what it made while it still may; the hook waits for the
//! pods, then deletes the BulkheadNode reports. Then helm removes the rest.

use crate::crd::BulkheadNode;
use crate::logging::log;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PropagationPolicy};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub async fn run(
    kubeconfig: Option<PathBuf>,
    ns: String,
    name: String,
    timeout: Duration,
) -> Result<(), String> {
    let client = crate::run::client(kubeconfig.as_deref()).await?;
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &ns);
    let Some(ds) = dss
        .get_opt(&name)
        .await
        .map_err(|e| format!("DaemonSet {ns}/{name}: {e}"))?
    else {
        log(format!("DaemonSet {ns}/{name} is gone already"));
        return delete_reports(&client).await;
    };
    let selector = ds
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    if selector.is_empty() {
        return Err(format!("DaemonSet {ns}/{name} has no matchLabels"));
    }
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..Default::default()
    };
    dss.delete(&name, &dp)
        .await
        .map_err(|e| format!("delete DaemonSet {ns}/{name}: {e}"))?;
    log(format!(
        "deleting DaemonSet {ns}/{name}: its agents undo what they made on their nodes"
    ));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let t0 = Instant::now();
    loop {
        let left = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items.len())
            .map_err(|e| format!("list the agents' pods: {e}"))?;
        if left == 0 {
            break;
        }
        if t0.elapsed() > timeout {
            return Err(format!(
                "{left} agent pod(s) still there after {timeout:?}; their nodes may keep slices"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    log(format!(
        "the agents' pods are gone after {} s",
        t0.elapsed().as_secs()
    ));
    delete_reports(&client).await
}

async fn delete_reports(client: &kube::Client) -> Result<(), String> {
    let reports: Api<BulkheadNode> = Api::all(client.clone());
    reports
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .map_err(|e| format!("delete the BulkheadNode reports: {e}"))?;
    log("BulkheadNode reports deleted");
    Ok(())
}
