//! `bulkhead-agent run`: watch BulkheadPlans and this node, and run a reconcile pass on
//! every change and every `interval` (the drift check). The watchers keep their last view
//! while the API server is away (they retry with backoff), so passes go on, the slices stay,
//! and the agent catches up when the server is back.

use crate::crd::BulkheadPlan;
use crate::logging::log;
use crate::machine::Machine;
use crate::reconcile::Agent;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct Options {
    pub node: String,
    pub kubeconfig: Option<std::path::PathBuf>,
    pub machine: Machine,
    pub interval: Duration,
    /// How often the slices' figures are written when nothing else changed.
    pub report_every: Duration,
    /// The kubelet's configuration file to check plans against (None: not checked).
    pub kubelet_config: Option<std::path::PathBuf>,
    pub health: Option<SocketAddr>,
    /// The DaemonSet that runs this agent (namespace, name): when it is being deleted at
    /// SIGTERM, the chart is being uninstalled and the agent undoes what it made.
    pub daemonset: Option<(String, String)>,
}

/// Whether the agent's DaemonSet is being deleted (or gone): the chart's uninstall. Any
/// other answer (the API away, no permission) is no.
async fn uninstalling(client: &kube::Client, ns: &str, name: &str) -> bool {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    match tokio::time::timeout(Duration::from_secs(10), api.get_opt(name)).await {
        Ok(Ok(Some(ds))) => ds.metadata.deletion_timestamp.is_some(),
        Ok(Ok(None)) => true,
        Ok(Err(e)) => {
            log(format!(
                "cannot read DaemonSet {ns}/{name}: {e}; the slices stay"
            ));
            false
        }
        Err(_) => false,
    }
}

pub(crate) async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, String> {
    let mut cfg = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .map_err(|e| format!("{}: {e}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| e.to_string())?,
    };
    cfg.connect_timeout = Some(Duration::from_secs(5));
    kube::Client::try_from(cfg).map_err(|e| e.to_string())
}

pub async fn run(o: Options) -> Result<(), String> {
    std::fs::create_dir_all(&o.machine.state_dir)
        .map_err(|e| format!("{}: {e}", o.machine.state_dir.display()))?;
    let client = client(o.kubeconfig.as_deref()).await?;
    let api_client = client.clone();
    let ready = Arc::new(AtomicBool::new(false));
    if let Some(addr) = o.health {
        serve_health(addr, ready.clone()).await?;
    }
    let (kick_tx, mut kick) = tokio::sync::mpsc::channel::<()>(1);
    let (plans, nodes) = watch(&client, &o.node, &kick_tx);
    let mut agent = Agent::new(
        o.node.clone(),
        o.machine,
        client,
        o.report_every,
        o.kubelet_config,
    );
    log(format!(
        "node {}: waiting for the first list of plans and of the node",
        o.node
    ));
    let _ = plans.wait_until_ready().await;
    let _ = nodes.wait_until_ready().await;
    let mut tick = tokio::time::interval(o.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let mut missing_said = false;
    loop {
        match nodes.get(&ObjectRef::new(&o.node)) {
            Some(node) => {
                missing_said = false;
                agent.pass(&plans.state(), &node).await;
                ready.store(true, Ordering::Relaxed);
            }
            None if !missing_said => {
                log(format!("node {} does not exist (yet); waiting", o.node));
                missing_said = true;
            }
            None => {}
        }
        tokio::select! {
            _ = kick.recv() => {
                // Let a burst of events settle into one pass.
                tokio::time::sleep(Duration::from_millis(100)).await;
                while kick.try_recv().is_ok() {}
            }
            _ = tick.tick() => {}
            _ = term.recv() => {
                return on_sigterm(&api_client, o.daemonset.as_ref(), &o.node, &nodes, &mut agent).await;
            }
            _ = tokio::signal::ctrl_c() => { log("SIGINT: stopping; the slices stay"); return Ok(()); }
        }
    }
}

/// Answer /healthz and /readyz on `addr` (ready once the first pass is done).
async fn serve_health(addr: SocketAddr, ready: Arc<AtomicBool>) -> Result<(), String> {
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--health-listen {addr}: {e}"))?;
    log(format!("health on http://{addr}/healthz and /readyz"));
    tokio::spawn(crate::health::serve(l, ready));
    Ok(())
}

/// Watch the plans and this node into caches; every change kicks a pass through `kick`.
fn watch(
    client: &kube::Client,
    node: &str,
    kick: &tokio::sync::mpsc::Sender<()>,
) -> (Store<BulkheadPlan>, Store<Node>) {
    let (plans, plans_w) = reflector::store::<BulkheadPlan>();
    let (nodes, nodes_w) = reflector::store::<Node>();
    let plan_stream = reflector::reflector(
        plans_w,
        watcher(
            Api::<BulkheadPlan>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
    );
    let node_cfg = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let node_stream = reflector::reflector(
        nodes_w,
        watcher(Api::<Node>::all(client.clone()), node_cfg).default_backoff(),
    );
    for (what, stream) in [
        ("plans", plan_stream.map(|e| e.map(|_| ())).boxed()),
        ("node", node_stream.map(|e| e.map(|_| ())).boxed()),
    ] {
        tokio::spawn(forward(what, stream, kick.clone()));
    }
    (plans, nodes)
}

/// Kick a pass on every event of a watch; say once when it fails and once when it is back.
async fn forward<E: std::fmt::Display>(
    what: &'static str,
    mut s: futures::stream::BoxStream<'static, Result<(), E>>,
    tx: tokio::sync::mpsc::Sender<()>,
) {
    let mut failing = false;
    while let Some(ev) = s.next().await {
        match ev {
            Ok(()) => {
                if failing {
                    log(format!("watch of {what} is back"));
                    failing = false;
                }
                let _ = tx.try_send(());
            }
            Err(e) => {
                if !failing {
                    log(format!("watch of {what} failed (retrying): {e}"));
                    failing = true;
                }
            }
        }
    }
}

/// SIGTERM: stop, leaving the slices; when the agent's DaemonSet is being deleted (the
/// chart's uninstall), first undo what the agent made.
async fn on_sigterm(
    api_client: &kube::Client,
    daemonset: Option<&(String, String)>,
    node_name: &str,
    nodes: &Store<Node>,
    agent: &mut Agent,
) -> Result<(), String> {
    if let Some((ns, name)) = daemonset {
        if uninstalling(api_client, ns, name).await {
            log(format!(
                "SIGTERM and DaemonSet {ns}/{name} is being deleted: undoing what the agent made"
            ));
            return match nodes.get(&ObjectRef::new(node_name)) {
                Some(node) => agent.uninstall(&node).await,
                None => Err(format!("node {node_name} unknown: nothing undone")),
            };
        }
    }
    log("SIGTERM: stopping; the slices stay");
    Ok(())
}
