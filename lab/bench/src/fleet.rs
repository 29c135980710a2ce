//! `bench fleet`: the Kubernetes agent at scale, against a real test API server
//! (scripts/k8s-testenv: etcd + kube-apiserver) that the bench starts and stops.
//!
//! 1. Fleet writes, our design: N Nodes, and for each the `BulkheadNode` written the way the
//!    agent writes it (metadata apply, then status apply), C at a time; then one figures round
//!    (every node rewrites its figures, what each agent does every `--report-every` at rest).
//! 2. The previous design beside it: one shared object, each of M nodes applying its own entry
//!    of a list-map in its status.
//! 3. The real `bulkhead-agent` for one node with a real plan under a cgroup root of the
//!    bench's own: CPU, RSS and API requests at rest and per plan change.
//!
//! Everything made (the API server and etcd, the agent, the cgroups, the temp files) is removed
//! at the end, on error and on Ctrl-C.

use crate::env::Env;
use crate::stats;
use bulkhead_agent::conditions::{condition, APPLIED, DEGRADED, DRIFTED};
use bulkhead_agent::crd::{
    BulkheadNode, BulkheadNodeStatus, PlanReport, PsiData, PsiStats, SliceFigures, SlicePsi,
};
use bulkhead_agent::report::{meta_body, status_body, summary, MANAGER};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const K8S_VERSION: &str = "v1.35.4";
pub const ETCD_VERSION: &str = "v3.6.8";
/// The comparison CRD's group and plural (the previous design).
const SHARED_GROUP: &str = "bench.bulkhead.io";
const SHARED_PLURAL: &str = "sharedplans";
/// The agent's default --report-every.
const REPORT_EVERY_S: f64 = 60.0;

pub struct Spec {
    pub nodes: usize,
    pub concurrency: usize,
    pub rest_secs: u64,
    pub changes: usize,
    pub shared_nodes: usize,
    pub testenv: PathBuf,
    pub agent_bin: PathBuf,
    pub progress: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub kernel: String,
    pub k8s: String,
    pub etcd: String,
}

/// CPU seconds and RSS of the control plane's two daemons.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ServerCost {
    pub apiserver_cpu_s: f64,
    pub etcd_cpu_s: f64,
    pub apiserver_rss_mb: f64,
    pub etcd_rss_mb: f64,
}

/// One round of writes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriteRound {
    pub nodes: usize,
    pub writes: u64,
    pub errors: u64,
    pub seconds: f64,
    pub writes_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub server: ServerCost,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct FleetPhase {
    /// Nodes created (the kubelet's part), untimed.
    pub nodes: usize,
    pub concurrency: usize,
    /// Metadata + status apply per node.
    pub rollout: WriteRound,
    /// One status apply per node with new figures.
    pub figures: WriteRound,
    /// JSON bytes of one BulkheadNode as the API returns it (with managedFields).
    pub object_bytes: usize,
    /// At rest: writes per node per hour (3600 / --report-every).
    pub writes_per_node_hour: f64,
    /// apiserver + etcd CPU seconds per hour for the N nodes at rest (one round per minute).
    pub server_cpu_s_per_hour: f64,
    /// The same per node, milliseconds.
    pub server_cpu_ms_per_node_hour: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SharedPhase {
    pub nodes: usize,
    pub concurrency: usize,
    pub object_bytes: usize,
    pub round: WriteRound,
    /// Latency of the last 100 writes (the object at its largest).
    pub last100_p50_ms: f64,
    pub last100_p99_ms: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentPhase {
    pub rest_secs: f64,
    pub cpu_s_per_hour: f64,
    pub rss_mb: f64,
    /// All apiserver requests in the window (the apiserver's own included), per hour.
    pub requests_per_hour_all: f64,
    /// Requests on nodes, bulkheadplans and bulkheadnodes only (nobody but the agent touches
    /// them in the window), per hour.
    pub requests_per_hour_agent: f64,
    /// The same in an equal window before the agent started (the apiserver's own), per hour.
    pub requests_per_hour_idle: f64,
    pub changes: usize,
    pub cpu_ms_per_change: f64,
    /// Requests on nodes/bulkheadplans/bulkheadnodes per change, the bench's own subtracted.
    pub requests_per_change: f64,
    pub change_to_report_p50_ms: f64,
    pub change_to_report_max_ms: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub fleet: FleetPhase,
    pub shared: Option<SharedPhase>,
    pub agent: Option<AgentPhase>,
}

// ---- pure parts ----

/// VmRSS in kB from the text of /proc/PID/status.
pub fn parse_vmrss_kb(status: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The sum of `apiserver_request_total` in a Prometheus exposition, over every series whose
/// labels `keep` accepts.
pub fn sum_requests(text: &str, keep: impl Fn(&str) -> bool) -> f64 {
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{") || l.starts_with("apiserver_request_total ")
        })
        .filter(|l| keep(l))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Series on the resources only the agent (and the bench) touch.
pub fn bulkhead_series(line: &str) -> bool {
    ["nodes", "bulkheadplans", "bulkheadnodes"]
        .iter()
        .any(|r| line.contains(&format!("resource=\"{r}\"")))
}

/// A node's report as the agent makes it on a v2 node: one Applied plan, 3 conditions, 3
/// slices' figures with their pressure, the protected slice's stall.
pub fn node_status(round: u64, i: usize) -> BulkheadNodeStatus {
    let now = "2026-01-01T00:00:00Z";
    let g = Some(1);
    let conditions = vec![
        condition(&[], APPLIED, true, "Applied", "3 slices applied", g, now),
        condition(&[], DRIFTED, false, "NoDrift", "as planned", g, now),
        condition(&[], DEGRADED, false, "Healthy", "", g, now),
    ];
    let x = (round * 7919 + i as u64) % 100_000;
    let slices = ["db", "db-server", "db-helper"]
        .iter()
        .enumerate()
        .map(|(k, n)| SliceFigures {
            name: n.to_string(),
            cpu_usage_seconds: Some(1000.0 * round as f64 + x as f64 / 7.0 + k as f64),
            memory_current_bytes: Some(100_000_000 + x * 4096 + k as u64),
            processes: Some(3 + k as u64),
            psi: Some(psi(x, k)),
        })
        .collect::<Vec<_>>();
    let stall = slices[1].psi.as_ref().and_then(|p| p.worst("db-server"));
    let r = PlanReport {
        plan: "fleet".into(),
        applied_revision: Some(1),
        conditions,
        warnings: vec![],
        stall,
        slices,
    };
    summary(BTreeMap::from([(r.plan.clone(), r)]), Some(("fleet", 1)))
}

/// A slice's pressure as a v2 node reports it: all three resources, "full" but for cpu.
fn psi(x: u64, k: usize) -> SlicePsi {
    let d = |base: f64| PsiData {
        avg10: base + (x % 97) as f64 / 10.0,
        avg60: base,
        avg300: base / 2.0,
        total: x * 1000 + k as u64,
    };
    let stats = |base: f64, full: bool| PsiStats {
        some: d(base),
        full: full.then(|| d(base / 2.0)),
    };
    SlicePsi {
        cpu: Some(stats(1.5, false)),
        memory: Some(stats(0.25, true)),
        io: Some(stats(3.0, true)),
    }
}

// ---- the machine ----

/// CPU seconds used by a process so far.
fn cpu_s(pid: u32) -> f64 {
    bulkhead_sys::process::cpu_time(pid).map_or(0.0, |d| d.as_secs_f64())
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| parse_vmrss_kb(&s))
        .map_or(0.0, |k| k as f64 / 1024.0)
}

fn machine() -> Machine {
    Machine {
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        k8s: K8S_VERSION.into(),
        etcd: ETCD_VERSION.into(),
    }
}

/// scripts/k8s-testenv: from the current directory up, else the repository this was built in.
pub fn find_testenv() -> Option<PathBuf> {
    let rel = Path::new("scripts/k8s-testenv");
    if let Ok(cwd) = std::env::current_dir() {
        for d in cwd.ancestors() {
            if d.join(rel).is_file() {
                return Some(d.join(rel));
            }
        }
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    built.is_file().then_some(built)
}

// ---- guards ----

/// etcd + kube-apiserver, stopped (and their directory removed) on drop.
struct TestEnv {
    script: PathBuf,
    dir: PathBuf,
    kubeconfig: PathBuf,
    api_pid: u32,
    etcd_pid: u32,
}

impl TestEnv {
    fn start(script: &Path, dir: PathBuf) -> Result<TestEnv, String> {
        let mut cmd = Command::new(script);
        cmd.arg("start").arg(&dir).stdout(Stdio::null());
        // Not the cargo build lock: the binaries are cached, and a build holding that lock
        // must not stall the bench.
        if std::env::var_os("BULKHEAD_BUILD_LOCK").is_none() {
            cmd.env(
                "BULKHEAD_BUILD_LOCK",
                "/tmp/bulkhead-k8s-testenv-build.lock",
            );
        }
        let st = cmd
            .status()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        let mut env = TestEnv {
            script: script.to_path_buf(),
            kubeconfig: dir.join("kubeconfig"),
            dir,
            api_pid: 0,
            etcd_pid: 0,
        };
        if !st.success() {
            return Err(format!("{} start failed", script.display()));
        }
        let text = std::fs::read_to_string(env.dir.join("env"))
            .map_err(|e| format!("{}/env: {e}", env.dir.display()))?;
        let var = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {k}=")))
                .and_then(|v| v.trim_matches('\'').parse::<u32>().ok())
        };
        env.api_pid = var("KUBE_APISERVER_PID").ok_or("no KUBE_APISERVER_PID in the env file")?;
        env.etcd_pid = var("ETCD_PID").ok_or("no ETCD_PID in the env file")?;
        Ok(env)
    }

    fn cpu(&self) -> (f64, f64) {
        (cpu_s(self.api_pid), cpu_s(self.etcd_pid))
    }

    fn cost_since(&self, before: (f64, f64)) -> ServerCost {
        let now = self.cpu();
        ServerCost {
            apiserver_cpu_s: now.0 - before.0,
            etcd_cpu_s: now.1 - before.1,
            apiserver_rss_mb: rss_mb(self.api_pid),
            etcd_rss_mb: rss_mb(self.etcd_pid),
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status();
    }
}

/// The agent process, killed on drop.
struct AgentProc(Child);
impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The agent's record of controllers it enabled, cleaned of our root's entries on drop
/// (through the record's owner).
struct ControllersRecord(String);
impl Drop for ControllersRecord {
    fn drop(&mut self) {
        let root = self.0.as_str();
        bulkhead_testkit::groups::forget_enabled_controllers(root);
    }
}

fn stopped() -> Result<(), String> {
    if crate::stop::requested() {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

fn bar(on: bool, len: usize, what: &str) -> ProgressBar {
    if !on {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len as u64);
    b.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_message(what.to_string());
    b
}

// ---- the run ----

pub fn run(spec: &Spec) -> Result<Report, String> {
    if spec.nodes == 0 || spec.concurrency == 0 {
        return Err("--nodes and --concurrency must be at least 1".into());
    }
    if !spec.agent_bin.is_file() {
        return Err(format!(
            "no bulkhead-agent binary at {} (build it: cargo build -p bulkhead-agent)",
            spec.agent_bin.display()
        ));
    }
    crate::stop::install_handler();
    crate::env::clean_stale();
    // Dropped last: the cgroups and the state directory (the test env's directory is in it).
    let env = Env::create()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run_async(spec, &env))
}

async fn client(kubeconfig: &Path) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    kube::Client::try_from(cfg).map_err(|e| e.to_string())
}

fn shared_crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{SHARED_PLURAL}.{SHARED_GROUP}")},
        "spec": {
            "group": SHARED_GROUP,
            "scope": "Cluster",
            "names": {"plural": SHARED_PLURAL, "singular": "sharedplan", "kind": "SharedPlan", "listKind": "SharedPlanList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {
                            "type": "object",
                            "properties": {"nodes": {
                                "type": "array",
                                "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["node"],
                                "items": {
                                    "type": "object",
                                    "required": ["node"],
                                    "properties": {"node": {"type": "string"}},
                                    "x-kubernetes-preserve-unknown-fields": true,
                                },
                            }},
                        },
                    },
                }},
            }],
        },
    })
}

fn shared_resource() -> ApiResource {
    ApiResource {
        group: SHARED_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{SHARED_GROUP}/v1"),
        kind: "SharedPlan".into(),
        plural: SHARED_PLURAL.into(),
    }
}

async fn wait_for<F, Fut>(what: &str, secs: u64, mut f: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = Instant::now();
    loop {
        stopped()?;
        if f().await {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            return Err(format!("timed out after {secs} s waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run `write(i)` for i in 0..n, `c` at a time; the latencies of the successful ones.
async fn rounds<F, Fut>(
    n: usize,
    c: usize,
    progress: bool,
    what: &str,
    write: F,
) -> Result<(Vec<f64>, u64, f64), String>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Vec<Result<Duration, String>>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let out = Arc::new(Mutex::new((
        Vec::with_capacity(n * 2),
        0u64,
        None::<String>,
    )));
    let write = Arc::new(write);
    let pb = bar(progress, n, what);
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..c.min(n) {
        let (next, out, write, pb) = (next.clone(), out.clone(), write.clone(), pb.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || crate::stop::requested() {
                    break;
                }
                for r in write(i).await {
                    let mut o = out.lock().unwrap();
                    match r {
                        Ok(d) => o.0.push(d.as_secs_f64() * 1e3),
                        Err(e) => {
                            o.1 += 1;
                            o.2.get_or_insert(e);
                        }
                    }
                }
                pb.inc(1);
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    stopped()?;
    let (lat, errors, first) = std::mem::take(&mut *out.lock().unwrap());
    if let Some(e) = first {
        eprintln!("bench fleet: {what}: {errors} writes failed; the first: {e}");
    }
    Ok((lat, errors, secs))
}

fn round_figures(
    nodes: usize,
    lat: &[f64],
    errors: u64,
    secs: f64,
    server: ServerCost,
) -> WriteRound {
    let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds");
    for ms in lat {
        let _ = h.record(((ms * 1000.0) as u64).max(1));
    }
    let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
    WriteRound {
        nodes,
        writes: lat.len() as u64,
        errors,
        seconds: secs,
        writes_per_s: lat.len() as f64 / secs.max(1e-9),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        max_ms: h.max() as f64 / 1000.0,
        server,
    }
}

async fn timed<T, E: std::fmt::Display>(
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<Duration, String> {
    let t = Instant::now();
    f.await.map(|_| t.elapsed()).map_err(|e| e.to_string())
}

fn node_name(i: usize) -> String {
    format!("fleet-node-{i:05}")
}

async fn object_bytes(api: &Api<DynamicObject>, name: &str) -> Result<usize, String> {
    let o = api.get(name).await.map_err(|e| e.to_string())?;
    Ok(serde_json::to_vec(&o).map_err(|e| e.to_string())?.len())
}

fn say(spec: &Spec, s: &str) {
    if spec.progress {
        eprintln!("bench fleet: {s}");
    }
}

async fn run_async(spec: &Spec, env: &Env) -> Result<Report, String> {
    let mut report = Report {
        machine: machine(),
        ..Default::default()
    };
    say(spec, "starting etcd + kube-apiserver (scripts/k8s-testenv)");
    let te = TestEnv::start(&spec.testenv, env.dir.join("k8s"))?;
    let client = client(&te.kubeconfig).await?;
    install_crds(&client).await?;
    report.fleet = fleet_phase(spec, &te, &client).await?;
    if spec.shared_nodes > 0 {
        report.shared = Some(shared_phase(spec, &te, &client).await?);
    }
    report.agent = Some(agent_phase(spec, env, &te, &client).await?);
    drop(te);
    Ok(report)
}

/// The agent's two CRDs and the previous design's, created and served.
async fn install_crds(client: &kube::Client) -> Result<(), String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for c in [
        serde_json::to_value(<bulkhead_agent::crd::BulkheadPlan as kube::CustomResourceExt>::crd()),
        serde_json::to_value(<BulkheadNode as kube::CustomResourceExt>::crd()),
        Ok(shared_crd()),
    ] {
        let c: CustomResourceDefinition =
            serde_json::from_value(c.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        crds.create(&PostParams::default(), &c)
            .await
            .map_err(|e| format!("CRD: {e}"))?;
    }
    let reports: Api<BulkheadNode> = Api::all(client.clone());
    let plans: Api<bulkhead_agent::crd::BulkheadPlan> = Api::all(client.clone());
    let shared: Api<DynamicObject> = Api::all_with(client.clone(), &shared_resource());
    let (r, p, s) = (&reports, &plans, &shared);
    wait_for("the CRDs to be served", 60, move || async move {
        r.list(&Default::default()).await.is_ok()
            && p.list(&Default::default()).await.is_ok()
            && s.list(&Default::default()).await.is_ok()
    })
    .await
}

/// What [`rounds`] returns: the latencies (ms), the errors, and the seconds it took.
type Writes = (Vec<f64>, u64, f64);

/// Phase 1, the fleet, our design: the Nodes, the rollout of their BulkheadNodes, one
/// figures round, and what the fleet costs the server at rest.
async fn fleet_phase(
    spec: &Spec,
    te: &TestEnv,
    client: &kube::Client,
) -> Result<FleetPhase, String> {
    let reports: Api<BulkheadNode> = Api::all(client.clone());
    let (n, c) = (spec.nodes, spec.concurrency);
    say(
        spec,
        &format!("1. {n} Nodes, then their BulkheadNodes ({c} writes in flight)"),
    );
    let uids = create_nodes(spec, client).await?;
    let before = te.cpu();
    let (lat, errors, secs) = rollout(spec, &reports, uids).await?;
    let rollout = round_figures(n, &lat, errors, secs, te.cost_since(before));
    let before = te.cpu();
    let (lat, errors, secs) = figures_round(spec, &reports).await?;
    let figures = round_figures(n, &lat, errors, secs, te.cost_since(before));
    let dyn_nodes: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<BulkheadNode>(&()));
    let writes_per_node_hour = 3600.0 / REPORT_EVERY_S;
    let round_cpu = figures.server.apiserver_cpu_s + figures.server.etcd_cpu_s;
    let server_cpu_s_per_hour = round_cpu * writes_per_node_hour;
    Ok(FleetPhase {
        nodes: n,
        concurrency: c,
        rollout,
        figures,
        object_bytes: object_bytes(&dyn_nodes, &node_name(0)).await?,
        writes_per_node_hour,
        server_cpu_s_per_hour,
        server_cpu_ms_per_node_hour: server_cpu_s_per_hour * 1e3 / n as f64,
    })
}

/// The Nodes (the kubelet's part), untimed in the figures; their UIDs by index.
async fn create_nodes(
    spec: &Spec,
    client: &kube::Client,
) -> Result<Arc<Mutex<Vec<String>>>, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let uids = Arc::new(Mutex::new(vec![String::new(); spec.nodes]));
    let (n, c) = (spec.nodes, spec.concurrency);
    let (nodes, out) = (nodes.clone(), uids.clone());
    rounds(n, c, spec.progress, "creating Nodes", move |i| {
        let (nodes, uids) = (nodes.clone(), out.clone());
        async move {
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(i)},
            }))
            .expect("a Node");
            let t = Instant::now();
            let r = nodes.create(&PostParams::default(), &node).await;
            vec![r
                .map(|o| {
                    uids.lock().unwrap()[i] = o.metadata.uid.unwrap_or_default();
                    t.elapsed()
                })
                .map_err(|e| e.to_string())]
        }
    })
    .await?;
    Ok(uids)
}

/// Every BulkheadNode written as the agent first writes it: metadata, then status.
async fn rollout(
    spec: &Spec,
    reports: &Api<BulkheadNode>,
    uids: Arc<Mutex<Vec<String>>>,
) -> Result<Writes, String> {
    let reports = reports.clone();
    let (n, c) = (spec.nodes, spec.concurrency);
    rounds(n, c, spec.progress, "rollout (meta + status)", move |i| {
        let (reports, uids) = (reports.clone(), uids.clone());
        async move {
            let name = node_name(i);
            let uid = uids.lock().unwrap()[i].clone();
            let ap = PatchParams::apply(MANAGER).force();
            let meta = meta_body(
                &name,
                Some(&uid).filter(|u| !u.is_empty()).map(|u| u.as_str()),
                Some("fleet"),
            );
            let m = timed(reports.patch(&name, &ap, &Patch::Apply(&meta))).await;
            if m.is_err() {
                return vec![m];
            }
            let body = status_body(&name, &node_status(0, i));
            let s = timed(reports.patch_status(&name, &ap, &Patch::Apply(&body))).await;
            vec![m, s]
        }
    })
    .await
}

/// Every node rewrites its figures once (what each agent does every `--report-every`).
async fn figures_round(spec: &Spec, reports: &Api<BulkheadNode>) -> Result<Writes, String> {
    let reports = reports.clone();
    let (n, c) = (spec.nodes, spec.concurrency);
    rounds(n, c, spec.progress, "figures round (status)", move |i| {
        let reports = reports.clone();
        async move {
            let name = node_name(i);
            let ap = PatchParams::apply(MANAGER).force();
            let body = status_body(&name, &node_status(1, i));
            vec![timed(reports.patch_status(&name, &ap, &Patch::Apply(&body))).await]
        }
    })
    .await
}

/// Phase 2, the previous design: every node applies its own entry of one shared status.
async fn shared_phase(
    spec: &Spec,
    te: &TestEnv,
    client: &kube::Client,
) -> Result<SharedPhase, String> {
    let shared: Api<DynamicObject> = Api::all_with(client.clone(), &shared_resource());
    let (m, c) = (spec.shared_nodes, spec.concurrency);
    say(
        spec,
        &format!("2. the previous design: {m} entries in one shared status (slow: minutes)"),
    );
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{SHARED_GROUP}/v1"), "kind": "SharedPlan",
        "metadata": {"name": "fleet"}, "spec": {"slices": {"db": {"CPUWeight": 100}}},
    }))
    .map_err(|e| e.to_string())?;
    shared
        .create(&PostParams::default(), &obj)
        .await
        .map_err(|e| format!("SharedPlan: {e}"))?;
    let order = Arc::new(Mutex::new(Vec::with_capacity(m)));
    let before = te.cpu();
    let (lat, errors, secs) = shared_entries(spec, &shared, order.clone()).await?;
    let mut last: Vec<f64> = {
        let o = order.lock().unwrap();
        o[o.len().saturating_sub(100)..].to_vec()
    };
    last.sort_by(f64::total_cmp);
    Ok(SharedPhase {
        nodes: m,
        concurrency: c,
        object_bytes: object_bytes(&shared, "fleet").await?,
        round: round_figures(m, &lat, errors, secs, te.cost_since(before)),
        last100_p50_ms: stats::at_rank(&last, 0.5).unwrap_or(0.0),
        last100_p99_ms: stats::at_rank(&last, 0.99).unwrap_or(0.0),
    })
}

/// Each node's entry applied to the shared status; `order` gets the latencies as they end.
async fn shared_entries(
    spec: &Spec,
    shared: &Api<DynamicObject>,
    order: Arc<Mutex<Vec<f64>>>,
) -> Result<Writes, String> {
    let shared = shared.clone();
    let (m, c) = (spec.shared_nodes, spec.concurrency);
    rounds(m, c, spec.progress, "shared status entries", move |i| {
        let (shared, order) = (shared.clone(), order.clone());
        async move {
            let name = node_name(i);
            let s = node_status(0, i);
            let mut entry = serde_json::to_value(&s.plans[0]).expect("json");
            entry["node"] = json!(name);
            entry["state"] = json!(s.state);
            let body = json!({
                "apiVersion": format!("{SHARED_GROUP}/v1"), "kind": "SharedPlan",
                "metadata": {"name": "fleet"},
                "status": {"nodes": [entry]},
            });
            let ap = PatchParams::apply(&format!("{MANAGER}/{name}")).force();
            let r = timed(shared.patch_status("fleet", &ap, &Patch::Apply(&body))).await;
            if let Ok(d) = &r {
                order.lock().unwrap().push(d.as_secs_f64() * 1e3);
            }
            vec![r]
        }
    })
    .await
}

async fn metrics_text(client: &kube::Client) -> Result<String, String> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    client
        .request_text(req)
        .await
        .map_err(|e| format!("/metrics: {e}"))
}

/// The node the real agent runs for.
const AGENT_NODE: &str = "fleet-agent-node";

/// Phase 3, the real agent for one node: API requests without it, then its CPU, RSS and
/// requests at rest and per plan change.
async fn agent_phase(
    spec: &Spec,
    env: &Env,
    te: &TestEnv,
    client: &kube::Client,
) -> Result<AgentPhase, String> {
    let generation = create_node_and_plan(client).await?;
    let idle = idle_requests(spec, client).await?;
    say(spec, "starting bulkhead-agent for one node");
    let _record = ControllersRecord(env.cgroup_root.trim_start_matches('/').to_string());
    let mut agent = start_agent(spec, env, te)?;
    let pid = agent.0.id();
    let reports: Api<BulkheadNode> = Api::all(client.clone());
    let t0 = Instant::now();
    wait_first_apply(env, &reports, &mut agent, generation).await?;
    say(
        spec,
        &format!(
            "plan applied after {} ms; {} s at rest",
            t0.elapsed().as_millis(),
            spec.rest_secs
        ),
    );
    // Let the first burst (initial lists, first report) settle.
    sleep_checked(Duration::from_secs(2)).await?;
    let rest = at_rest(spec, client, pid, idle.scrape_all).await?;
    let ch = plan_changes(spec, client, &reports, pid, generation).await?;
    drop(agent);
    let per_hour = 3600.0 / rest.secs;
    let k = spec.changes.max(1) as f64;
    Ok(AgentPhase {
        rest_secs: rest.secs,
        cpu_s_per_hour: rest.cpu_s * per_hour,
        rss_mb: rest.rss_mb,
        requests_per_hour_all: rest.all * per_hour,
        requests_per_hour_agent: rest.ours * per_hour,
        requests_per_hour_idle: idle.requests * 3600.0 / idle.secs as f64,
        changes: spec.changes,
        cpu_ms_per_change: ch.cpu_s * 1e3 / k,
        requests_per_change: ch.requests.max(0.0) / k,
        change_to_report_p50_ms: stats::at_rank(&ch.lat, 0.5).unwrap_or(0.0),
        change_to_report_max_ms: stats::at_rank(&ch.lat, 1.0).unwrap_or(0.0),
    })
}

/// The agent's node and a plan that selects it; the plan's generation.
async fn create_node_and_plan(client: &kube::Client) -> Result<i64, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let plans: Api<bulkhead_agent::crd::BulkheadPlan> = Api::all(client.clone());
    let n: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": AGENT_NODE, "labels": {"pool": "bench"}},
    }))
    .map_err(|e| e.to_string())?;
    nodes
        .create(&PostParams::default(), &n)
        .await
        .map_err(|e| e.to_string())?;
    let plan: bulkhead_agent::crd::BulkheadPlan = serde_json::from_value(json!({
        "apiVersion": "bulkhead.io/v1alpha1", "kind": "BulkheadPlan",
        "metadata": {"name": "bench"},
        "spec": {
            "nodeSelector": {"pool": "bench"},
            "slices": {
                "db": {"CPUWeight": 100, "MemoryMax": "2G"},
                "db-server": {"CPUWeight": 1000, "MemoryMax": "1G"},
                "db-helper": {"CPUWeight": 50, "MemoryMax": "100M"},
            },
        },
    }))
    .map_err(|e| e.to_string())?;
    let created = plans
        .create(&PostParams::default(), &plan)
        .await
        .map_err(|e| e.to_string())?;
    Ok(created.metadata.generation.unwrap_or(1))
}

/// The apiserver's own requests in a quiet window without the agent.
struct Idle {
    secs: u64,
    requests: f64,
    /// What one scrape of /metrics adds to the count.
    scrape_all: f64,
}

async fn idle_requests(spec: &Spec, client: &kube::Client) -> Result<Idle, String> {
    let secs = spec.rest_secs.clamp(1, 30);
    let m0 = metrics_text(client).await?;
    let m1 = metrics_text(client).await?;
    let scrape_all = sum_requests(&m1, |_| true) - sum_requests(&m0, |_| true);
    say(
        spec,
        &format!("{secs} s without the agent (the apiserver's own requests)"),
    );
    sleep_checked(Duration::from_secs(secs)).await?;
    let m2 = metrics_text(client).await?;
    let requests =
        (sum_requests(&m2, |_| true) - sum_requests(&m1, |_| true) - scrape_all).max(0.0);
    Ok(Idle {
        secs,
        requests,
        scrape_all,
    })
}

/// bulkhead-agent for [`AGENT_NODE`] under the bench's cgroup root, logging to agent.log.
fn start_agent(spec: &Spec, env: &Env, te: &TestEnv) -> Result<AgentProc, String> {
    let state_dir = env.dir.join("agent-state");
    let log = std::fs::File::create(env.dir.join("agent.log")).map_err(|e| e.to_string())?;
    Ok(AgentProc(
        Command::new(&spec.agent_bin)
            .args([
                "--backend",
                "cgroupfs",
                "--cgroup-root",
                &env.cgroup_root,
                "run",
                "--node",
                AGENT_NODE,
            ])
            .arg("--kubeconfig")
            .arg(&te.kubeconfig)
            .arg("--state-dir")
            .arg(&state_dir)
            .arg("--no-kubelet-config")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", spec.agent_bin.display()))?,
    ))
}

/// Whether the agent's report says this plan revision is applied.
async fn applied(reports: &Api<BulkheadNode>, want: i64) -> bool {
    reports
        .get(AGENT_NODE)
        .await
        .ok()
        .and_then(|o| o.status)
        .is_some_and(|s| s.state == "Applied" && s.applied_revision == Some(want))
}

/// Wait (60 s at the most) for the agent's first report of the plan as applied.
async fn wait_first_apply(
    env: &Env,
    reports: &Api<BulkheadNode>,
    agent: &mut AgentProc,
    generation: i64,
) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        stopped()?;
        if applied(reports, generation).await {
            return Ok(());
        }
        if let Ok(Some(st)) = agent.0.try_wait() {
            let l = std::fs::read_to_string(env.dir.join("agent.log")).unwrap_or_default();
            return Err(format!("bulkhead-agent exited ({st}):\n{l}"));
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let l = std::fs::read_to_string(env.dir.join("agent.log")).unwrap_or_default();
            return Err(format!(
                "the agent's report is not Applied after 60 s; its log:\n{l}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The agent at rest: seconds watched, its CPU seconds and RSS, all requests and its own.
struct Rest {
    secs: f64,
    cpu_s: f64,
    rss_mb: f64,
    all: f64,
    ours: f64,
}

async fn at_rest(
    spec: &Spec,
    client: &kube::Client,
    pid: u32,
    scrape_all: f64,
) -> Result<Rest, String> {
    let a0 = metrics_text(client).await?;
    let c0 = cpu_s(pid);
    let t_rest = Instant::now();
    let pb = bar(spec.progress, spec.rest_secs as usize, "agent at rest (s)");
    for _ in 0..spec.rest_secs {
        sleep_checked(Duration::from_secs(1)).await?;
        pb.inc(1);
    }
    pb.finish_and_clear();
    let secs = t_rest.elapsed().as_secs_f64();
    let c1 = cpu_s(pid);
    let rss_mb = rss_mb(pid);
    let a1 = metrics_text(client).await?;
    Ok(Rest {
        secs,
        cpu_s: c1 - c0,
        rss_mb,
        all: sum_requests(&a1, |_| true) - sum_requests(&a0, |_| true) - scrape_all,
        ours: sum_requests(&a1, bulkhead_series) - sum_requests(&a0, bulkhead_series),
    })
}

/// Plan changes: latencies to the agent's report (ms, sorted), its CPU seconds, and its
/// requests (the bench's own subtracted).
struct Changes {
    lat: Vec<f64>,
    cpu_s: f64,
    requests: f64,
}

/// Per change: alternate CPUWeight of db-server; wait for the report to catch up.
async fn plan_changes(
    spec: &Spec,
    client: &kube::Client,
    reports: &Api<BulkheadNode>,
    pid: u32,
    mut generation: i64,
) -> Result<Changes, String> {
    let plans: Api<bulkhead_agent::crd::BulkheadPlan> = Api::all(client.clone());
    say(spec, &format!("{} plan changes", spec.changes));
    let mut lat = Vec::with_capacity(spec.changes);
    let mut own = 0.0;
    let b0 = metrics_text(client).await?;
    let cc0 = cpu_s(pid);
    for k in 0..spec.changes {
        let w = if k % 2 == 0 { 900 } else { 1000 };
        let patch = json!({"spec": {"slices": {"db-server": {"CPUWeight": w}}}});
        let t = Instant::now();
        let p = plans
            .patch("bench", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| e.to_string())?;
        own += 1.0;
        generation = p.metadata.generation.unwrap_or(generation + 1);
        loop {
            stopped()?;
            own += 1.0;
            if applied(reports, generation).await {
                break;
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!("revision {generation} not reported after 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        // Apart, so that each change is a pass of its own.
        sleep_checked(Duration::from_millis(500)).await?;
    }
    let cc1 = cpu_s(pid);
    let b1 = metrics_text(client).await?;
    lat.sort_by(f64::total_cmp);
    Ok(Changes {
        lat,
        cpu_s: cc1 - cc0,
        requests: sum_requests(&b1, bulkhead_series) - sum_requests(&b0, bulkhead_series) - own,
    })
}

async fn sleep_checked(d: Duration) -> Result<(), String> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        stopped()?;
        tokio::time::sleep((end - Instant::now()).min(Duration::from_millis(200))).await;
    }
    Ok(())
}

/// The report as tables.
pub fn text(r: &Report) -> String {
    use std::fmt::Write;
    let m = &r.machine;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "machine: {} CPUs, kernel {}; kube-apiserver {} + etcd {} (scripts/k8s-testenv, one host)",
        m.nproc, m.kernel, m.k8s, m.etcd
    );
    let row = |s: &mut String, name: &str, w: &WriteRound| {
        let _ =
            writeln!(
            s,
            "  {name:<22} {:>6} {:>7.1} {:>8.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.0} {:>8.0}",
            w.writes, w.seconds, w.writes_per_s, w.p50_ms, w.p99_ms, w.server.apiserver_cpu_s,
            w.server.etcd_cpu_s, w.server.apiserver_rss_mb, w.server.etcd_rss_mb
        );
    };
    let head = "  phase                  writes    time  writes/s  p50 ms   p99 ms  api cpu etcd cpu  api MB  etcd MB\n";
    let f = &r.fleet;
    let _ = writeln!(
        s,
        "\n1. fleet writes, one BulkheadNode per node ({} nodes, {} at a time)",
        f.nodes, f.concurrency
    );
    s.push_str(head);
    row(&mut s, "rollout (meta+status)", &f.rollout);
    row(&mut s, "figures round (status)", &f.figures);
    if f.rollout.errors + f.figures.errors > 0 {
        let _ = writeln!(
            s,
            "  errors: rollout {}, figures {}",
            f.rollout.errors, f.figures.errors
        );
    }
    let _ = writeln!(s, "  one BulkheadNode: {} bytes of JSON", f.object_bytes);
    let _ = writeln!(
        s,
        "  at rest: {:.0} writes per node per hour; apiserver+etcd {:.1} CPU s per hour for {} nodes ({:.1} ms per node per hour)",
        f.writes_per_node_hour, f.server_cpu_s_per_hour, f.nodes, f.server_cpu_ms_per_node_hour
    );
    if let Some(sh) = &r.shared {
        let _ = writeln!(
            s,
            "\n2. previous design: one shared object, an entry per node ({} nodes)",
            sh.nodes
        );
        s.push_str(head);
        row(&mut s, "shared status entries", &sh.round);
        if sh.round.errors > 0 {
            let _ = writeln!(s, "  errors: {}", sh.round.errors);
        }
        let _ = writeln!(
            s,
            "  the shared object: {} bytes of JSON; last 100 writes p50 {:.1} ms, p99 {:.1} ms",
            sh.object_bytes, sh.last100_p50_ms, sh.last100_p99_ms
        );
    }
    if let Some(a) = &r.agent {
        let _ = writeln!(s, "\n3. bulkhead-agent, one node, one plan of 3 slices");
        let _ = writeln!(
            s,
            "  at rest ({:.0} s): {:.2} CPU s per hour, RSS {:.1} MB; API requests per hour: {:.0} on nodes/plans/reports, {:.0} all (apiserver's own without agent: {:.0})",
            a.rest_secs, a.cpu_s_per_hour, a.rss_mb, a.requests_per_hour_agent, a.requests_per_hour_all, a.requests_per_hour_idle
        );
        let _ = writeln!(
            s,
            "  per change ({}): {:.1} CPU ms, {:.1} requests, change to report p50 {:.0} ms, max {:.0} ms",
            a.changes, a.cpu_ms_per_change, a.requests_per_change, a.change_to_report_p50_ms, a.change_to_report_max_ms
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_are_counted_after_the_command_name() {
        let s = "1234 (kube (api) server) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0 100 1000 200";
        assert_eq!(bulkhead_sys::process::parse_stat_cpu(s), Some(325));
        assert_eq!(bulkhead_sys::process::parse_stat_cpu("garbage"), None);
        assert_eq!(
            parse_vmrss_kb("Name:\tx\nVmRSS:\t   51200 kB\n"),
            Some(51200)
        );
    }

    #[test]
    fn requests_are_summed_over_labels() {
        let t = "# HELP apiserver_request_total x\n# TYPE apiserver_request_total counter\n\
apiserver_request_total{code=\"200\",resource=\"nodes\",verb=\"GET\"} 12\n\
apiserver_request_total{code=\"201\",resource=\"bulkheadnodes\",verb=\"PATCH\"} 3\n\
apiserver_request_total{code=\"200\",resource=\"leases\",verb=\"PUT\"} 40\n\
apiserver_request_duration_seconds_count{resource=\"nodes\"} 99\n";
        assert_eq!(sum_requests(t, |_| true), 55.0);
        assert_eq!(sum_requests(t, bulkhead_series), 15.0);
    }

    #[test]
    fn a_fake_node_reports_like_an_agent() {
        let s = node_status(0, 7);
        assert_eq!((s.state.as_str(), s.applied_revision), ("Applied", Some(1)));
        assert_eq!(s.plans[0].conditions.len(), 3);
        assert_eq!(s.plans[0].slices.len(), 3);
        assert_ne!(node_status(1, 7), s);
    }
}
