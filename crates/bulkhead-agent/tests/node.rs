//! The chart on a real node, no mocks: scripts/k8s-testenv starts etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, containerd 2.x + runc + the CNI bridge and a kubelet
//! (v1.35.4 / v2.4.2, built from source), the agent's image is built from this test's
//! `bulkhead-agent` binary as an OCI archive and imported, and the real `helm install` puts
//! the chart's DaemonSet there with the NRI plugin on. Then, through the pod: a plan applied
//! to the node's real cgroups, drift repaired, the report, pods isolated by annotation
//! (bulkhead.io/slice, a refused annotation, a slice not allowed, an unannotated pod), the
//! plan deleted, and
//! `helm uninstall` undoing everything. Every process, mount, cgroup and link is removed at
//! the end, also when the test fails (Drop guards; the node's own by k8s-testenv stop).

mod common;
use bulkhead_agent::crd::{BulkheadNode, BulkheadPlan, PlanReport};
use bulkhead_testkit::{prereq, read, TempDir, TestRoot};
use common::{entry, step, wait};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const NS: &str = "bulkhead-system";

fn testenv() -> PathBuf {
    Path::new(REPO).join("scripts/k8s-testenv")
}

/// True when the test can run: outside CI a missing prerequisite skips with a SKIPPED line,
/// in CI (CI=true) it fails the test.
fn prerequisites() -> bool {
    let problem = if !prereq::is_root() {
        Some("the node test needs root".to_string())
    } else if !Path::new("/usr/sbin/runc").exists() {
        Some("runc is needed (apt-get install runc; scripts/setup does)".into())
    } else if !Path::new("/usr/lib/cni/bridge").exists() {
        Some("the CNI plugins are needed (apt-get install containernetworking-plugins)".into())
    } else {
        ["go", "openssl", "curl", "flock", "ip", "python3"]
            .into_iter()
            .find(|c| !prereq::on_path(c))
            .map(|c| format!("{c} is needed for scripts/k8s-testenv (scripts/setup installs it)"))
    };
    prereq::require(problem)
}

/// The control plane and the node, stopped and removed on drop.
struct TestEnv {
    dir: PathBuf,
    bin: PathBuf,
    env: BTreeMap<String, String>,
}

impl TestEnv {
    fn start(dir: PathBuf, node: &str) -> TestEnv {
        let out = Command::new(testenv())
            .args([
                "build",
                "etcd",
                "kube-apiserver",
                "helm",
                "kubelet",
                "containerd",
            ])
            .args([
                "containerd-shim-runc-v2",
                "ctr",
                "pause",
                "bulkhead-nri-stub",
            ])
            .args(["kube-scheduler", "kube-controller-manager"])
            .env(
                "BULKHEAD_BUILD_LOCK",
                "/tmp/bulkhead-k8s-testenv-build.lock",
            )
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/k8s-testenv build");
        assert!(out.status.success(), "scripts/k8s-testenv build failed");
        let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let t0 = Instant::now();
        let st = Command::new(testenv())
            .arg("start")
            .arg(&dir)
            .args(["--node", node])
            .status()
            .expect("run scripts/k8s-testenv start");
        let mut env = TestEnv {
            dir,
            bin,
            env: BTreeMap::new(),
        };
        assert!(st.success(), "scripts/k8s-testenv start --node failed");
        eprintln!(
            "control plane + node Ready in {} ms",
            t0.elapsed().as_millis()
        );
        // DIR/env: `export K=V` lines, values shell-quoted (%q) but plain here.
        for l in read(&env.dir.join("env")).lines() {
            if let Some((k, v)) = l.trim_start_matches("export ").split_once('=') {
                env.env.insert(k.into(), v.trim_matches('\'').into());
            }
        }
        env
    }

    fn var(&self, k: &str) -> &str {
        self.env
            .get(k)
            .unwrap_or_else(|| panic!("{k} not in {}/env", self.dir.display()))
    }

    fn helm(&self, args: &[&str]) -> std::process::Output {
        Command::new(self.bin.join("helm"))
            .args(args)
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .output()
            .expect("run helm")
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let _ = Command::new(testenv()).arg("stop").arg(&self.dir).status();
    }
}

fn is(e: &PlanReport, t: &str, status: &str) -> Option<String> {
    e.conditions
        .iter()
        .find(|c| c.type_ == t && c.status == status)
        .map(|c| c.reason.clone())
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The agent's pod's log (both containers), for a failing test.
fn pod_logs(env: &TestEnv) -> String {
    let logs = env.dir.join("node/kubelet/pod-logs");
    let mut out = String::new();
    for e in walk(&logs) {
        if e.extension().is_some_and(|x| x == "log") && e.to_string_lossy().contains(NS) {
            out += &format!("==== {}\n{}\n", e.display(), read(&e));
        }
    }
    out
}

/// What says why a pod does not run, for a failing test: the pods and their conditions, the
/// events, and the warnings and errors of the kubelet, containerd and the scheduler.
fn node_state(env: &TestEnv) -> String {
    let kubectl = |args: &[&str]| {
        Command::new(env.bin.join("kubectl"))
            .args(args)
            .env("KUBECONFIG", env.dir.join("kubeconfig"))
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            })
            .unwrap_or_else(|e| format!("kubectl: {e}\n"))
    };
    let mut out = kubectl(&["get", "pods", "-A", "-o", "wide"]);
    out += &kubectl(&["describe", "pods", "-n", "default"]);
    out += &kubectl(&["describe", "node"]);
    out += &kubectl(&["get", "events", "-A", "--sort-by=.lastTimestamp"]);
    out += &warnings(env, "node/kubelet.log", klog);
    out += &warnings(env, "node/containerd.log", |l| {
        l.contains("level=error") || l.contains("level=warning")
    });
    out += &warnings(env, "node/kube-scheduler.log", klog);
    out
}

/// A klog line that is a warning or an error: W or E, then the date (W1126 ...).
fn klog(l: &str) -> bool {
    let b = l.as_bytes();
    b.len() > 1 && matches!(b[0], b'E' | b'W') && b[1].is_ascii_digit()
}

/// The last 40 lines of the node's `log` that `keep` says are warnings or errors.
fn warnings(env: &TestEnv, log: &str, keep: fn(&str) -> bool) -> String {
    let text = std::fs::read_to_string(env.dir.join(log)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| keep(l)).collect();
    let mut out = format!("==== {log}: the last warnings and errors\n");
    for l in &lines[lines.len().saturating_sub(40)..] {
        out += &format!("{l}\n");
    }
    out
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut v = vec![];
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                v.extend(walk(&p));
            } else {
                v.push(p);
            }
        }
    }
    v
}

/// A pod of the pause image, with these annotations, on the node. It tolerates the taints a
/// busy CI machine can put on the node (disk, memory or PID pressure), as the agent's
/// DaemonSet pod does, so that the host's state does not decide whether it is scheduled.
/// (The kubelet still rejects it at admission under DiskPressure, tolerations or not: the
/// node's disk thresholds are absolute, 256Mi free, in scripts/k8s/node.sh.)
fn pause_pod(name: &str, annotations: serde_json::Value) -> Pod {
    let pressure = ["disk-pressure", "memory-pressure", "pid-pressure"].map(|t| {
        json!({"key": format!("node.kubernetes.io/{t}"), "operator": "Exists",
                        "effect": "NoSchedule"})
    });
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {
            "containers": [{"name": "c", "image": "bulkhead.local/pause:test",
                            "imagePullPolicy": "Never"}],
            "terminationGracePeriodSeconds": 1,
            "tolerations": pressure,
        },
    }))
    .unwrap()
}

/// The cgroup path (under a hierarchy's mount) of a running pod's first container: the
/// kubelet's cgroupfs layout, `<root>/kubepods/<qos>/pod<uid>/<container id>`.
fn container_cgroup(node_root: &str, p: &Pod) -> String {
    let uid = p.metadata.uid.as_deref().unwrap();
    let st = p.status.as_ref().unwrap();
    let qos = st.qos_class.as_deref().unwrap().to_ascii_lowercase();
    let id = st.container_statuses.as_ref().unwrap()[0]
        .container_id
        .as_deref()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let qos = if qos == "guaranteed" {
        String::new()
    } else {
        format!("{qos}/")
    };
    format!("{node_root}/kubepods/{qos}pod{uid}/{id}")
}

#[test]
fn chart_and_nri_on_a_real_node() {
    if !prerequisites() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(scenario());
}

async fn scenario() {
    let t_all = Instant::now();
    let id = format!("bulkhead-node-test-{}", std::process::id());
    let tmp = TempDir::new("node-test");
    let node = format!("{id}-node");
    let env = TestEnv::start(tmp.0.join("k8s"), &node);
    let root = TestRoot::named(&id);
    let node_root = env.var("K8S_NODE_CGROUP_ROOT").to_string();

    // The agent's image from this test's binary, into the node's containerd.
    let t0 = Instant::now();
    let image = tmp.0.join("agent.tar");
    let st = Command::new(testenv())
        .arg("image-agent")
        .arg(&image)
        .arg(env!("CARGO_BIN_EXE_bulkhead-agent"))
        .status()
        .unwrap();
    assert!(st.success(), "k8s-testenv image-agent");
    let st = Command::new(testenv())
        .arg("import")
        .arg(&env.dir)
        .arg(&image)
        .status()
        .unwrap();
    assert!(st.success(), "k8s-testenv import");
    eprintln!(
        "agent image built and imported in {} ms",
        t0.elapsed().as_millis()
    );

    let kc = kube::config::Kubeconfig::read_from(env.dir.join("kubeconfig")).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let plans: Api<BulkheadPlan> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let reports: Api<BulkheadNode> = Api::all(client.clone());
    let agents: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let (plans, nodes, reports, agents, pods) = (&plans, &nodes, &reports, &agents, &pods);
    let node = node.as_str();

    // helm install, as an operator would, with the values a cluster without kube-proxy and
    // a node with its own paths need.
    let api_url = env.var("K8S_API_URL").to_string();
    let api = api_url.trim_start_matches("https://");
    let (api_host, api_port) = api.rsplit_once(':').unwrap();
    let state_host = tmp.0.join("state");
    let chart = Chart {
        env: &env,
        sets: vec![
            "image.repository=bulkhead.local/bulkhead-agent".to_string(),
            "image.tag=test".into(),
            "image.pullPolicy=Never".into(),
            "backend=cgroupfs".into(),
            "interval=1".into(),
            format!("cgroupRoot={}", root.cgroup),
            format!("stateHostPath={}", state_host.display()),
            format!("apiServer.host={api_host}"),
            format!("apiServer.port={api_port}"),
            format!("kubeletConfig.path={}", env.var("K8S_NODE_KUBELET_CONFIG")),
            "nri.enabled=true".into(),
            format!("nri.socketPath={}", env.var("K8S_NODE_NRI_SOCKET")),
            "nri.allow={CPUWeight,IOWeight}".into(),
            // Default-deny (issue 40): the slices pods may take and the namespaces whose
            // pods may ask, listed.
            "nri.slices={db-helper}".into(),
            "nri.namespaces={default}".into(),
        ],
    };
    let t0 = Instant::now();
    let agent_pod = chart.install(agents, &[]).await;
    eprintln!(
        "helm install to the DaemonSet's pod Ready: {} ms",
        t0.elapsed().as_millis()
    );
    let agent_name = agent_pod.metadata.name.clone().unwrap();
    // Kubernetes 1.35+ on this node: on a hybrid or v1 host the kubelet runs only because its
    // configuration sets failCgroupV1: false (scripts/k8s/node.sh); the agent says so when
    // it first reads that configuration (step 1).
    let info = nodes
        .get(node)
        .await
        .unwrap()
        .status
        .unwrap()
        .node_info
        .unwrap();
    let minor: u32 = info
        .kubelet_version
        .split('.')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(minor >= 35, "kubelet {}", info.kubelet_version);

    let spec = agent_pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some(node));
    assert_eq!(spec.host_pid, Some(true));

    let guard = Logs(&env);
    let k = Cluster {
        plans,
        nodes,
        reports,
        agents,
        node,
        root: &root,
    };
    let (plan, server_cpu, shares) = step("1. apply through the pod", apply(&k, &state_host)).await;
    if bulkhead::actions::host::cgroup_version() != Some("v2") {
        wait("the agent's notice of failCgroupV1: false", 30, || async {
            pod_logs(&env)
                .contains("sets failCgroupV1: false, so it starts here")
                .then_some(())
        })
        .await;
    }
    step(
        "2. drift repaired by the pod; the report",
        drift_and_report(&k, &server_cpu, shares),
    )
    .await;
    step(
        "3. per-pod isolation through NRI",
        nri(&chart, agents, &root, &node_root, pods, &client),
    )
    .await;
    step("4. the plan deleted", deleted(&k)).await;
    step(
        "5. applied again, then helm uninstall",
        uninstall(&k, &chart, &plan, &agent_name, &state_host),
    )
    .await;
    step(
        "5b. a pod requiring the plugin, without it",
        required_without_plugin(pods),
    )
    .await;
    // 6. Each privilege the chart grants, taken away: what breaks. The plan stays (helm
    //    keeps CRDs and their objects) and each install applies it again.
    step(
        "6. each privilege taken away",
        privileges(&chart, &root, agents, reports, node),
    )
    .await;
    plans
        .delete("redis", &DeleteParams::default())
        .await
        .unwrap();
    std::mem::forget(guard);
    eprintln!("node test done in {} s", t_all.elapsed().as_secs());
}

/// The APIs and the node every step works on.
struct Cluster<'a> {
    plans: &'a Api<BulkheadPlan>,
    nodes: &'a Api<Node>,
    reports: &'a Api<BulkheadNode>,
    agents: &'a Api<Pod>,
    node: &'a str,
    root: &'a TestRoot,
}

/// The plan "redis" applied through the agent's pod: the slices' values, a task of another
/// user given the scheduler slice, the agent's state on the host. Returns the plan, db-server's
/// CPU file and its value.
async fn apply(k: &Cluster<'_>, state_host: &Path) -> (BulkheadPlan, PathBuf, &'static str) {
    let (plans, nodes, reports, node, root) = (k.plans, k.nodes, k.reports, k.node, k.root);
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pool": "redis"}}})),
        )
        .await
        .unwrap();
    let plan: BulkheadPlan = serde_json::from_value(json!({
        "apiVersion": "bulkhead.io/v1alpha1", "kind": "BulkheadPlan",
        "metadata": {"name": "redis"},
        "spec": {
            "nodeSelector": {"pool": "redis"},
            "slices": {
                "db": {"Description": "databases"},
                "db-server": {"CPUWeight": 1000},
                "db-helper": {"CPUWeight": "idle", "IOWeight": 20, "MemoryMax": "100M",
                              "CPUSchedulingSliceSec": "5ms"},
            },
        },
    }))
    .unwrap();
    plans.create(&PostParams::default(), &plan).await.unwrap();
    let e = wait("Applied=True, revision 1", 60, || async {
        entry(reports, "redis", node)
            .await
            .filter(|e| is(e, "Applied", "True").is_some() && e.applied_revision == Some(1))
    })
    .await;
    assert!(is(&e, "Degraded", "False").is_some(), "{e:?}");
    let (cpu_file, shares) = if root.v1("cpu") {
        ("cpu.shares", "10240")
    } else {
        ("cpu.weight", "1000")
    };
    let server_cpu = root
        .controller_dir("cpu", "db.slice/db-server.slice")
        .join(cpu_file);
    assert_eq!(read(&server_cpu), shares);
    let helper_idle = root.controller_dir("cpu", "db.slice/db-helper.slice/cpu.idle");
    assert_eq!(read(&helper_idle), "1");
    let mem = if root.v1("memory") {
        "memory.limit_in_bytes"
    } else {
        "memory.max"
    };
    assert_eq!(
        read(
            &root
                .controller_dir("memory", "db.slice/db-helper.slice")
                .join(mem)
        ),
        (100u64 << 20).to_string()
    );
    // A task of another user in db-helper gets the scheduler slice (SYS_NICE, hostPID).
    let other = Foreign::spawn(root, "db.slice/db-helper.slice");
    let pid = other.pid();
    wait(
        "a task of another user gets CPUSchedulingSliceSec",
        30,
        || async move { (se_slice(pid) == Some(SLICE_NS)).then_some(()) },
    )
    .await;
    drop(other);
    // What the agent keeps is on the host, where the chart put it.
    assert!(read(&state_host.join("agent/state.json")).contains("\"redis\""));
    (plan, server_cpu, shares)
}

/// A hand-made change to db-server's CPU put back by the pod, Drifted=False reason Repaired;
/// then the node's BulkheadNode and labels.
async fn drift_and_report(k: &Cluster<'_>, server_cpu: &Path, shares: &str) {
    let (nodes, reports, node) = (k.nodes, k.reports, k.node);
    std::fs::write(server_cpu, "512").unwrap();
    let sc = server_cpu;
    wait("the drifted value put back", 30, || async {
        (read(sc) == shares).then_some(())
    })
    .await;
    wait("Drifted=False reason Repaired", 30, || async {
        entry(reports, "redis", node).await.filter(|e| {
            is(e, "Drifted", "False").as_deref() == Some("Repaired")
                && is(e, "Applied", "True").is_some()
        })
    })
    .await;

    // 3. The report: the node's BulkheadNode, owned by the Node; the node's labels.
    let r = reports.get(node).await.unwrap();
    let st = r.status.unwrap();
    assert_eq!(
        (st.plan.as_deref(), st.applied_revision, st.state.as_str()),
        (Some("redis"), Some(1), "Applied")
    );
    let n = nodes.get(node).await.unwrap();
    assert_eq!(n.metadata.labels.unwrap()["bulkhead.io/plan"], "redis");
}

/// The plan deleted: its slices and the node's labels go.
async fn deleted(k: &Cluster<'_>) {
    let (plans, nodes, node, root) = (k.plans, k.nodes, k.node, k.root);
    plans
        .delete("redis", &DeleteParams::default())
        .await
        .unwrap();
    wait("slices removed after delete", 30, || async {
        (!root.controller_dir("cpu", "db.slice").exists()
            && !root.controller_dir("memory", "db.slice").exists())
        .then_some(())
    })
    .await;
    wait("labels removed after delete", 30, || async {
        let l = nodes
            .get(node)
            .await
            .ok()?
            .metadata
            .labels
            .unwrap_or_default();
        (!l.contains_key("bulkhead.io/plan")).then_some(())
    })
    .await;
}

/// Applied again, then `helm uninstall`: the pre-delete hook deletes the DaemonSet, the agent
/// undoes what it made at SIGTERM, the reports go, the release is gone.
async fn uninstall(
    k: &Cluster<'_>,
    chart: &Chart<'_>,
    plan: &BulkheadPlan,
    agent_name: &str,
    state_host: &Path,
) {
    let (plans, nodes, reports, agents, node, root) =
        (k.plans, k.nodes, k.reports, k.agents, k.node, k.root);
    let mut again = plan.clone();
    again.metadata.resource_version = None;
    plans.create(&PostParams::default(), &again).await.unwrap();
    wait("applied again", 60, || async {
        root.controller_dir("cpu", "db.slice/db-helper.slice")
            .exists()
            .then_some(())
    })
    .await;
    let t0 = Instant::now();
    chart.uninstall();
    eprintln!("helm uninstall took {} ms", t0.elapsed().as_millis());
    wait("slices removed by the uninstall", 30, || async {
        (!root.controller_dir("cpu", "db.slice").exists()).then_some(())
    })
    .await;
    let l = nodes
        .get(node)
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert!(!l.contains_key("bulkhead.io/plan"), "{l:?}");
    assert!(reports
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .is_empty());
    wait("the agent's pod gone", 60, || async {
        agents
            .get_opt(agent_name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let state = read(&state_host.join("agent/state.json"));
    assert!(state.contains("\"plan\": null"), "{state}");
}

/// NRI's annotation naming the plugins a pod's containers may not be created without.
const REQUIRED: &str = "required-plugins.noderesource.dev/pod";

/// With the plugin gone (the chart uninstalled), a pod that requires it is not created:
/// its container waits with the validator's reason, which names the plugin.
async fn required_without_plugin(pods: &Api<Pod>) {
    pods.create(
        &PostParams::default(),
        &pause_pod("required", json!({REQUIRED: "[bulkhead]"})),
    )
    .await
    .unwrap();
    let why = wait("the pod requiring the plugin refused", 60, || async {
        let p = pods.get("required").await.ok()?;
        let st = p.status?.container_statuses?;
        let waiting = st.first()?.state.as_ref()?.waiting.clone()?;
        waiting.message.filter(|m| m.contains("required plugin"))
    })
    .await;
    eprintln!("    without the plugin: {why}");
    assert!(why.contains("\"bulkhead\" not present"), "{why}");
    delete_pods(pods, &["required"]).await;
}

/// The planned CPUSchedulingSliceSec (5ms), in ns.
const SLICE_NS: u64 = 5_000_000;

/// `se.slice` of a task (/proc/PID/sched, EEVDF kernels), in ns.
fn se_slice(pid: u32) -> Option<u64> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/sched")).ok()?;
    t.lines()
        .find(|l| l.starts_with("se.slice"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// A `sleep` of uid 65534 moved into a slice (every hierarchy that has it), killed on drop.
struct Foreign(std::process::Child);
impl Foreign {
    fn spawn(root: &TestRoot, slice: &str) -> Foreign {
        let child = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sleep",
                "300",
            ])
            .spawn()
            .expect("setpriv sleep");
        let pid = child.id();
        for d in &root.dirs {
            let procs = d.join(slice).join("cgroup.procs");
            if procs.exists() {
                std::fs::write(&procs, pid.to_string())
                    .unwrap_or_else(|e| panic!("{}: {e}", procs.display()));
            }
        }
        Foreign(child)
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}
impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The chart with the test's values; `install` waits for the agent's pod to be Ready.
struct Chart<'a> {
    env: &'a TestEnv,
    sets: Vec<String>,
}

impl Chart<'_> {
    async fn install(&self, agents: &Api<Pod>, extra: &[&str]) -> Pod {
        let mut args: Vec<String> = ["install", "bulkhead-agent", "deploy/helm/bulkhead"]
            .into_iter()
            .chain(["--namespace", NS, "--create-namespace"])
            .map(String::from)
            .collect();
        for s in self
            .sets
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
        {
            args.extend(["--set".to_string(), s.to_string()]);
        }
        let out = Command::new(self.env.bin.join("helm"))
            .args(&args)
            .current_dir(REPO)
            .env("KUBECONFIG", self.env.dir.join("kubeconfig"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "helm install: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait("the agent's pod Ready (both containers)", 120, || async {
            let l = agents
                .list(&ListParams::default().labels("app.kubernetes.io/name=bulkhead"))
                .await
                .ok()?;
            l.items.into_iter().find(ready)
        })
        .await
    }

    /// `helm upgrade` with more values; waits for the DaemonSet's new pod to be Ready.
    async fn upgrade(&self, agents: &Api<Pod>, extra: &[&str]) -> Pod {
        let before = agents
            .list(&ListParams::default().labels("app.kubernetes.io/name=bulkhead"))
            .await
            .unwrap();
        let old: Vec<String> = before
            .items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let chart = format!("{REPO}/deploy/helm/bulkhead");
        let mut args = vec![
            "upgrade",
            "bulkhead-agent",
            &chart,
            "--namespace",
            NS,
            "--reuse-values",
        ];
        for s in extra {
            args.extend(["--set", s]);
        }
        let out = self.env.helm(&args);
        assert!(
            out.status.success(),
            "helm upgrade: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let old = &old;
        wait("the upgraded agent's pod Ready", 120, || async move {
            let l = agents
                .list(&ListParams::default().labels("app.kubernetes.io/name=bulkhead"))
                .await
                .ok()?;
            let gone = l
                .items
                .iter()
                .all(|p| p.metadata.name.as_ref().is_none_or(|n| !old.contains(n)));
            if !gone {
                return None;
            }
            l.items.into_iter().find(ready)
        })
        .await
    }

    fn uninstall(&self) {
        let t0 = Instant::now();
        let out = self
            .env
            .helm(&["uninstall", "bulkhead-agent", "--namespace", NS, "--wait"]);
        assert!(
            out.status.success(),
            "helm uninstall: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("  helm uninstall: {} ms", t0.elapsed().as_millis());
    }
}

/// The plan `redis` (created by the scenario, with db-helper's CPUSchedulingSliceSec) under
/// the chart with one privilege taken away each time.
async fn privileges(
    chart: &Chart<'_>,
    root: &TestRoot,
    agents: &Api<Pod>,
    reports: &Api<BulkheadNode>,
    node: &str,
) {
    // Without SYS_ADMIN: the trusted.bulkhead mark cannot be written, nothing is applied.
    eprintln!("privileges: no SYS_ADMIN");
    chart.install(agents, &["capabilities={SYS_NICE}"]).await;
    let e = wait("ApplyFailed without SYS_ADMIN", 60, || async {
        entry(reports, "redis", node)
            .await
            .filter(|e| is(e, "Degraded", "True").as_deref() == Some("ApplyFailed"))
    })
    .await;
    let msg = &e
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap()
        .message;
    eprintln!("    {msg}");
    assert!(!root
        .controller_dir("cpu", "db.slice/db-helper.slice")
        .exists());
    chart.uninstall();

    // Without SYS_NICE: another user's task refuses its scheduler slice, and the report
    // says so.
    eprintln!("privileges: no SYS_NICE");
    chart.install(agents, &["capabilities={SYS_ADMIN}"]).await;
    wait("applied without SYS_NICE", 60, || async {
        root.controller_dir("cpu", "db.slice/db-helper.slice")
            .exists()
            .then_some(())
    })
    .await;
    let other = Foreign::spawn(root, "db.slice/db-helper.slice");
    let e = wait("the scheduler slice refused, in the report", 60, || async {
        entry(reports, "redis", node).await.filter(|e| {
            e.warnings
                .iter()
                .any(|w| w.contains("CPUSchedulingSliceSec"))
        })
    })
    .await;
    eprintln!("    {:?}", e.warnings);
    assert_ne!(se_slice(other.pid()), Some(SLICE_NS));
    drop(other);
    chart.uninstall();

    // Without the host's PID namespace: the agent does not see the slices' tasks at all.
    eprintln!("privileges: no hostPID");
    chart.install(agents, &["hostPID=false"]).await;
    wait("applied without hostPID", 60, || async {
        root.controller_dir("cpu", "db.slice/db-helper.slice")
            .exists()
            .then_some(())
    })
    .await;
    let other = Foreign::spawn(root, "db.slice/db-helper.slice");
    // Five passes (interval 1 s) that would have set it. A negative check with no later
    // event to wait for (the agent, blind to the task, says nothing): the pause only bounds
    // how long the agent has to (wrongly) set it. A slow host can make it pass without five
    // passes, never fail a correct agent.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let got = se_slice(other.pid());
    eprintln!("    se.slice of the task after 5 passes: {got:?} (planned {SLICE_NS})");
    assert_ne!(got, Some(SLICE_NS));
    drop(other);
    chart.uninstall();
    wait("slices removed by the last uninstall", 30, || async {
        (!root.controller_dir("cpu", "db.slice").exists()).then_some(())
    })
    .await;
}

/// Prints the agent pod's logs when the test fails.
struct Logs<'a>(&'a TestEnv);
impl Drop for Logs<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- pod logs ----\n{}", pod_logs(self.0));
            eprintln!("---- the node's state ----\n{}", node_state(self.0));
        }
    }
}

/// The NRI plugin in the agent's pod, fail-safe by default: a pod taking the db-helper slice
/// gets what this node applies of it (the library's mapping: its cpu.idle and memory limit,
/// its IO weight where the kernel has BFQ or io.cost, else a Warning event with the reason)
/// and runs; an annotation outside the allow-list is reported on its pod, which runs
/// untouched; a pod taking the db-server slice, which the operator did not list (issue 40:
/// a pod author taking the protected slice's weights), gets nothing, is told why and runs
/// untouched; a pod without annotations is untouched. Then fail-closed, as an operator sets
/// it (`nri.onRefused=fail`): the refused pod, and on a kernel without BFQ a pod asking for
/// an IO weight, do not start, and their events say why.
async fn nri(
    chart: &Chart<'_>,
    agents: &Api<Pod>,
    root: &TestRoot,
    node_root: &str,
    pods: &Api<Pod>,
    client: &kube::Client,
) {
    use bulkhead::actions::container;
    let pp = PostParams::default();
    pods.create(
        &pp,
        &pause_pod("helper", json!({"bulkhead.io/slice": "db-helper"})),
    )
    .await
    .unwrap();
    pods.create(&pp, &pause_pod("plain", json!({})))
        .await
        .unwrap();
    // A pod that may not run without the plugin (NRI's default validator): it does here.
    pods.create(&pp, &pause_pod("required", json!({REQUIRED: "[bulkhead]"})))
        .await
        .unwrap();
    pods.create(
        &pp,
        &pause_pod("greedy", json!({"bulkhead.io/MemoryMax": "1G"})),
    )
    .await
    .unwrap();
    pods.create(
        &pp,
        &pause_pod("server", json!({"bulkhead.io/slice": "db-server"})),
    )
    .await
    .unwrap();
    let running = |name: &'static str| async move {
        let p = pods.get(name).await.ok()?;
        ready(&p).then_some(p)
    };
    let helper = wait("the helper pod Running", 60, || running("helper")).await;
    let plain = wait("the plain pod Running", 60, || running("plain")).await;
    wait("the pod requiring the plugin Running", 60, || {
        running("required")
    })
    .await;
    // The plugin's readiness is its registration with the runtime (the chart's probe).
    let agent = agents.list(&Default::default()).await.unwrap().items;
    let nri_ready = agent.iter().flat_map(|p| {
        let st = p.status.as_ref().and_then(|s| s.container_statuses.clone());
        st.unwrap_or_default()
            .into_iter()
            .filter(|c| c.name == "nri")
            .map(|c| c.ready)
    });
    assert_eq!(nri_ready.collect::<Vec<_>>(), [true]);
    // Fail-safe: the refused pod runs, with nothing applied, and says why.
    wait("the refused pod Running (onRefused: log)", 60, || {
        running("greedy")
    })
    .await;
    let server = wait(
        "the pod taking db-server Running (onRefused: log)",
        60,
        || running("server"),
    )
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let event = |pod: &'static str, reason: &'static str, what: &'static str| {
        let events = events.clone();
        async move {
            let l = events
                .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
                .await
                .ok()?;
            l.items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter_map(|e| e.message)
                .find(|m| m.contains(what))
        }
    };
    let msg = wait("a BulkheadRefused event naming the annotation", 60, || {
        event("greedy", "BulkheadRefused", "bulkhead.io/MemoryMax")
    })
    .await;
    assert!(msg.contains("not allowed"), "{msg}");
    let msg = wait(
        "a BulkheadRefused event on the pod taking db-server",
        60,
        || event("server", "BulkheadRefused", "bulkhead.io/slice=db-server"),
    )
    .await;
    eprintln!("    the db-server pod's event: {msg}");
    assert!(
        msg.contains("not a slice pods may take") && msg.contains("nothing applied"),
        "{msg}"
    );
    let hc = container_cgroup(node_root, &helper);
    let pc = container_cgroup(node_root, &plain);
    let under = |c: &str, rel: &str, f: &str| root.path(c, rel, f);
    assert_eq!(read(&under("cpu", &hc, "cpu.idle")), "1", "{hc}");
    // Its pod too (idle counts between siblings: the pod among the other pods).
    let hp = hc.rsplit_once('/').unwrap().0;
    assert_eq!(read(&under("cpu", hp, "cpu.idle")), "1", "{hp}");
    assert_eq!(read(&under("cpu", &pc, "cpu.idle")), "0", "{pc}");
    let limit = if root.v1("memory") {
        "memory.limit_in_bytes"
    } else {
        "memory.max"
    };
    assert_eq!(
        read(&under("memory", &hc, limit)),
        (100u64 << 20).to_string()
    );
    // The IO weight, where this node's kernel can apply it.
    let caps = container::node().unwrap().caps;
    let io_applies = if root.v1("io") {
        caps.bfq
    } else {
        caps.bfq || caps.io_cost
    };
    eprintln!(
        "    this kernel: BFQ {}, io.cost {}",
        caps.bfq, caps.io_cost
    );
    if io_applies && root.v1("io") {
        // BFQ's weight for IOWeight=20 (the library's conversion).
        let w = bulkhead::plan::convert::io_weight_to_bfq(20).to_string();
        assert_eq!(read(&under("io", &hc, "blkio.bfq.weight")), w);
        assert_eq!(read(&under("io", hp, "blkio.bfq.weight")), w);
        assert_eq!(read(&under("io", &pc, "blkio.bfq.weight")), "100");
    } else if io_applies && caps.io_cost {
        assert_eq!(read(&under("io", &hc, "io.weight")), "default 20");
    } else if io_applies {
        assert_eq!(read(&under("io", &hc, "io.bfq.weight")), "default 20");
    } else {
        let msg = wait("a BulkheadNotApplied event naming IOWeight", 60, || {
            event("helper", "BulkheadNotApplied", "IOWeight")
        })
        .await;
        eprintln!("    the helper pod's event: {msg}");
    }
    let msg = wait("a BulkheadApplied event on the helper pod", 60, || {
        event("helper", "BulkheadApplied", "")
    })
    .await;
    eprintln!("    applied: {msg}");
    // The unannotated pod kept what the kubelet gave it (BestEffort: the lowest shares), and
    // so did the pod that asked for db-server's weights (CPUWeight 1000, 10240 shares): its
    // container and its pod as the kubelet made them.
    let sc = container_cgroup(node_root, &server);
    let sp = sc.rsplit_once('/').unwrap().0;
    if root.v1("cpu") {
        assert_eq!(read(&under("cpu", &pc, "cpu.shares")), "2");
        assert_eq!(read(&under("cpu", &sc, "cpu.shares")), "2", "{sc}");
        assert_eq!(read(&under("cpu", sp, "cpu.shares")), "2", "{sp}");
    }
    if root.v1("io") && io_applies {
        assert_eq!(read(&under("io", &sc, "blkio.bfq.weight")), "100");
        assert_eq!(read(&under("io", sp, "blkio.bfq.weight")), "100");
    }
    assert_eq!(read(&under("cpu", &sc, "cpu.idle")), "0", "{sc}");
    assert!(
        event("server", "BulkheadApplied", "").await.is_none(),
        "nothing applied to the pod taking db-server"
    );
    delete_pods(pods, &["helper", "plain", "greedy", "server", "required"]).await;

    // Fail closed, the operator's explicit choice.
    chart.upgrade(agents, &["nri.onRefused=fail"]).await;
    pods.create(
        &pp,
        &pause_pod("greedy", json!({"bulkhead.io/MemoryMax": "1G"})),
    )
    .await
    .unwrap();
    let mut names = vec!["greedy"];
    if !io_applies {
        pods.create(
            &pp,
            &pause_pod("strict", json!({"bulkhead.io/IOWeight": "20"})),
        )
        .await
        .unwrap();
        names.push("strict");
    }
    let failed = |pod: &'static str, what: &'static str| {
        let events = events.clone();
        async move {
            let l = events
                .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
                .await
                .ok()?;
            l.items
                .into_iter()
                .filter_map(|e| e.message)
                .find(|m| m.contains(what) && m.contains("bulkhead"))
        }
    };
    let msg = wait("an event failing the refused pod", 60, || {
        failed("greedy", "bulkhead.io/MemoryMax")
    })
    .await;
    assert!(msg.contains("not allowed"), "{msg}");
    assert!(
        !ready(&pods.get("greedy").await.unwrap()),
        "fail closed: the refused pod must not run"
    );
    if !io_applies {
        let msg = wait("an event failing the IOWeight pod", 60, || {
            failed("strict", "not applied on this node")
        })
        .await;
        assert!(msg.contains("IOWeight"), "{msg}");
        assert!(!ready(&pods.get("strict").await.unwrap()));
    }
    delete_pods(pods, &names).await;
}

async fn delete_pods(pods: &Api<Pod>, names: &[&str]) {
    for p in names {
        pods.delete(p, &DeleteParams::default()).await.unwrap();
    }
    wait("the test pods gone", 60, || async {
        let l = pods.list(&Default::default()).await.ok()?;
        l.items.is_empty().then_some(())
    })
    .await;
}
