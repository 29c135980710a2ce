//! The agent end to end, no mocks: a real kube-apiserver + etcd (scripts/k8s-testenv), the
//! committed CRDs, a Node object made by hand (there is no kubelet), BulkheadPlans, and the
//! real `bulkhead-agent run` binary against them with the cgroupfs backend under a unique test
//! cgroup root. Checked on the machine (control files, the huge page pool) and in the API (the
//! node's BulkheadNode report, node labels): apply, drift and repair, update, a plan the parser
//! refuses, a kubelet slice, two plans selecting the node, the API server going away and coming
//! back, a selector change, huge pages put back, delete.
//! Every process and cgroup is removed also when the test fails (Drop guards).

mod common;
use bulkhead_agent::crd::{BulkheadNode, BulkheadPlan, Condition, PlanReport};
use bulkhead_testkit::{free_port, prereq, read, TempDir, TestRoot};
use common::{entry, step, wait};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn testenv() -> PathBuf {
    Path::new(REPO).join("scripts/k8s-testenv")
}

/// True when the test can run. Outside CI a missing prerequisite skips with a SKIPPED line;
/// in CI (CI=true) it fails the test.
fn prerequisites() -> bool {
    let problem = if !prereq::is_root() {
        Some("the agent test needs root (cgroups)".to_string())
    } else if let Some(p) = prereq::cgroups_problem() {
        Some(p.to_string())
    } else {
        ["go", "openssl", "curl", "flock"]
            .into_iter()
            .find(|c| !prereq::on_path(c))
            .map(|c| format!("{c} is needed for scripts/k8s-testenv (scripts/setup installs it)"))
    };
    prereq::require(problem)
}

/// etcd + kube-apiserver, stopped and removed on drop.
struct TestEnv {
    dir: PathBuf,
    kubeconfig: PathBuf,
    /// The cached etcd, kube-apiserver and helm.
    bin: PathBuf,
}

impl TestEnv {
    fn start(dir: PathBuf) -> TestEnv {
        // Builds etcd, kube-apiserver and helm on the first run (about 8 minutes, cached
        // after). Its own build lock, so that a caller holding the cargo build lock cannot
        // deadlock it.
        let out = Command::new(testenv())
            .args(["build", "etcd", "kube-apiserver", "helm"])
            .env(
                "BULKHEAD_BUILD_LOCK",
                "/tmp/bulkhead-k8s-testenv-build.lock",
            )
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/k8s-testenv build");
        assert!(out.status.success(), "scripts/k8s-testenv build failed");
        let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(bin.join("helm").is_file(), "no helm in {}", bin.display());
        let env = TestEnv {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            bin,
        };
        let st = Command::new(testenv())
            .arg("start")
            .arg(&env.dir)
            .status()
            .expect("run scripts/k8s-testenv start");
        assert!(st.success(), "scripts/k8s-testenv start failed");
        env
    }

    fn apiserver(&self, what: &str) {
        let st = Command::new(testenv())
            .arg(what)
            .arg(&self.dir)
            .status()
            .expect("run scripts/k8s-testenv");
        assert!(st.success(), "scripts/k8s-testenv {what} failed");
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let _ = Command::new(testenv()).arg("stop").arg(&self.dir).status();
    }
}

/// The agent process, killed on drop; its log is printed when the test fails.
struct Agent {
    child: RefCell<Child>,
    log: PathBuf,
}

impl Agent {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn alive(&self) -> bool {
        matches!(self.child.borrow_mut().try_wait(), Ok(None))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let child = self.child.get_mut();
        let _ = child.kill();
        let _ = child.wait();
        if std::thread::panicking() {
            eprintln!("---- agent log ----\n{}\n----", self.log());
        }
    }
}

/// Puts a huge page pool back to its size, also when the test fails.
struct PoolGuard<'a>(&'a Path, u64);
impl Drop for PoolGuard<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0, self.1.to_string());
    }
}

fn cond<'a>(e: &'a PlanReport, t: &str) -> Option<&'a Condition> {
    e.conditions.iter().find(|c| c.type_ == t)
}

fn is(e: &PlanReport, t: &str, status: &str) -> bool {
    cond(e, t).is_some_and(|c| c.status == status)
}

/// Waits up to `secs` (saying `what` if it never comes) until `plan`'s report on `node` has
/// the condition `(type, status)`, and returns that report.
async fn reported(
    reports: &Api<BulkheadNode>,
    node: &str,
    plan: &str,
    (t, status): (&str, &str),
    (what, secs): (&str, u64),
) -> PlanReport {
    wait(what, secs, move || async move {
        entry(reports, plan, node)
            .await
            .filter(|e| is(e, t, status))
    })
    .await
}

async fn labels(nodes: &Api<Node>, node: &str) -> std::collections::BTreeMap<String, String> {
    nodes
        .get(node)
        .await
        .ok()
        .and_then(|n| n.metadata.labels)
        .unwrap_or_default()
}

fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The chart rendered by the real helm (`helm lint` first), its objects in order, for the
/// release `bulkhead-agent` in `ns`; without the uninstall hook (tests/node.rs runs it).
fn helm_template(env: &TestEnv, ns: &str) -> Vec<serde_json::Value> {
    let chart = Path::new(REPO).join("deploy/helm/bulkhead");
    let lint = Command::new(env.bin.join("helm"))
        .arg("lint")
        .arg(&chart)
        .output()
        .expect("helm lint");
    assert!(
        lint.status.success(),
        "helm lint: {}",
        String::from_utf8_lossy(&lint.stdout)
    );
    let out = Command::new(env.bin.join("helm"))
        .args(["template", "bulkhead-agent"])
        .arg(&chart)
        .args(["--namespace", ns, "--include-crds", "--no-hooks"])
        .output()
        .expect("helm template");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).expect("helm's output is YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// A kubeconfig for the agent with a token of the chart's ServiceAccount (the
/// TokenRequest API), the server and CA of the admin's.
async fn sa_kubeconfig(client: &kube::Client, admin: &Path, dir: &Path) -> PathBuf {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "bulkhead-system");
    let tr: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600},
    }))
    .unwrap();
    let token = sas
        .create_token_request("bulkhead-agent", &PostParams::default(), &tr)
        .await
        .expect("a token for the agent's ServiceAccount")
        .status
        .expect("a token")
        .token;
    let kc = kube::config::Kubeconfig::read_from(admin).unwrap();
    let cluster = kc.clusters[0].cluster.clone().unwrap();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: agent\n  user:\n    token: {token}\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: agent\ncurrent-context: t\n",
        cluster.server.unwrap(),
        cluster.certificate_authority_data.unwrap(),
    );
    let p = dir.join("agent-kubeconfig");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn agent_against_a_real_api_server() {
    if !prerequisites() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(scenario());
}

/// The scenario as named steps, in order: each is a function of its own, says its name and
/// time, and names itself when it fails. A step stands on what the steps before it left (the
/// agent, the plan's revision, the slices).
async fn scenario() {
    let t_all = Instant::now();
    let w = step(
        "set-up: the chart, the node, the plan, the agent",
        World::start(),
    )
    .await;
    step(
        "the ServiceAccount can do what the agent needs and no more",
        service_account_limits(&w),
    )
    .await;
    step("1. apply", apply(&w)).await;
    step("2. drift", drift(&w)).await;
    step("3. update", update(&w)).await;
    step("4. an unknown directive", unknown_directive(&w)).await;
    step("5. a slice of the kubelet's", kubelet_slice(&w)).await;
    step("6. two plans select the node", two_plans(&w)).await;
    step("7. the API server goes away", api_server_away(&w)).await;
    step("8. the plan stops selecting the node", selector_change(&w)).await;
    step("9. huge pages, then delete", hugepages_and_delete(&w)).await;
    step("10. the docs' example plan", example_plan(&w)).await;
    assert!(w.agent.alive(), "{}", w.agent.log());
    eprintln!("agent test done in {} s", t_all.elapsed().as_secs());
}

/// A plan's spec with db-helper's CPU weight and memory limit.
fn spec(cpu: serde_json::Value, mem: &str) -> serde_json::Value {
    json!({"spec": {"slices": {
        "db": {"Description": "databases"},
        "db-server": {"CPUWeight": 1000},
        "db-helper": {"CPUWeight": cpu, "MemoryMax": mem},
    }}})
}

/// The slices' control files the steps read and write.
struct Files {
    cpu_file: &'static str,
    cpu_of: fn(u64) -> String,
    helper_cpu: PathBuf,
    server_cpu: PathBuf,
    helper_mem: PathBuf,
}

impl Files {
    fn of(root: &TestRoot) -> Files {
        let (cpu_file, cpu_of): (&str, fn(u64) -> String) = if root.v1("cpu") {
            ("cpu.shares", |w: u64| (w * 1024 / 100).to_string())
        } else {
            ("cpu.weight", |w: u64| w.to_string())
        };
        let mem_file = if root.v1("memory") {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        let helper_cpu = root
            .controller_dir("cpu", "db.slice/db-helper.slice")
            .join(cpu_file);
        let server_cpu = root
            .controller_dir("cpu", "db.slice/db-server.slice")
            .join(cpu_file);
        let helper_mem = root
            .dir("memory", "db.slice/db-helper.slice")
            .join(mem_file);
        Files {
            cpu_file,
            cpu_of,
            helper_cpu,
            server_cpu,
            helper_mem,
        }
    }
}

/// What every step stands on. Dropped in this order: the agent, the test's cgroups, the API
/// server, the temporary files.
struct World {
    agent: Agent,
    root: TestRoot,
    env: TestEnv,
    _tmp: TempDir,
    node: String,
    node_uid: String,
    plans: Api<BulkheadPlan>,
    nodes: Api<Node>,
    reports: Api<BulkheadNode>,
    example: BulkheadPlan,
    agent_kubeconfig: PathBuf,
    missing_cgroup: String,
    state_dir: PathBuf,
    health: u16,
    files: Files,
}

impl World {
    /// The API server with the chart installed, a Node, the plan "redis" selecting it, the
    /// kubelet's configuration, and the agent running with the chart's ServiceAccount.
    async fn start() -> World {
        let id = format!("bulkhead-agent-test-{}", std::process::id());
        let tmp = TempDir::new("agent-test");
        let env = TestEnv::start(tmp.0.join("k8s"));
        let root = TestRoot::named(&id);
        let node = format!("{id}-node");
        let kc = kube::config::Kubeconfig::read_from(&env.kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        install_the_chart(&client, &env).await;
        let example = the_example_is_valid(&client).await;
        let agent_kubeconfig = sa_kubeconfig(&client, &env.kubeconfig, &tmp.0).await;
        let nodes: Api<Node> = Api::all(client.clone());
        let plans: Api<BulkheadPlan> = Api::all(client.clone());
        let n: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"pool": "redis"}},
        }))
        .unwrap();
        let node_uid = nodes
            .create(&PostParams::default(), &n)
            .await
            .unwrap()
            .metadata
            .uid
            .unwrap();

        let redis: BulkheadPlan = serde_json::from_value(json!({
            "apiVersion": "bulkhead.io/v1alpha1", "kind": "BulkheadPlan",
            "metadata": {"name": "redis"},
            "spec": {
                "nodeSelector": {"pool": "redis"},
                "slices": {
                    "db": {"Description": "databases"},
                    "db-server": {"CPUWeight": 1000},
                    "db-helper": {"CPUWeight": 50, "MemoryMax": "100M"},
                },
                "guard": {"protect": "db-server", "sideloads": ["db-helper"]},
            },
        }))
        .unwrap();
        plans.create(&PostParams::default(), &redis).await.unwrap();
        // The kubelet's configuration the agent checks plans against: it enforces kube-reserved
        // on the plan's db-helper slice (the two would fight over CPU weight and memory limit),
        // and names a system-reserved cgroup that exists nowhere.
        let kubelet_config = tmp.0.join("kubelet-config.yaml");
        let missing_cgroup = format!("/{id}-nowhere.slice");
        std::fs::write(
            &kubelet_config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 cgroupDriver: cgroupfs\nenforceNodeAllocatable: [pods, kube-reserved]\n\
                 kubeReserved: {{cpu: 500m, memory: 1Gi}}\n\
                 kubeReservedCgroup: {}/db.slice/db-helper.slice\n\
                 systemReservedCgroup: {missing_cgroup}\n",
                root.cgroup.trim_end_matches('/')
            ),
        )
        .unwrap();
        // The agent.
        let state_dir = tmp.0.join("state");
        let log = tmp.0.join("agent.log");
        let health = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_bulkhead-agent"))
            .args([
                "--backend",
                "cgroupfs",
                "--cgroup-root",
                &root.cgroup,
                "run",
            ])
            .args(["--node", &node, "--interval", "1"])
            .arg("--kubeconfig")
            .arg(&agent_kubeconfig)
            .arg("--state-dir")
            .arg(&state_dir)
            .arg("--kubelet-config")
            .arg(&kubelet_config)
            .args(["--health-listen", &format!("127.0.0.1:{health}")])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start bulkhead-agent");
        let agent = Agent {
            child: RefCell::new(child),
            log,
        };
        World {
            agent,
            files: Files::of(&root),
            root,
            env,
            _tmp: tmp,
            node,
            node_uid,
            reports: Api::all(client),
            plans,
            nodes,
            example,
            agent_kubeconfig,
            missing_cgroup,
            state_dir,
            health,
        }
    }
}

/// The Helm chart, rendered by the real helm: its CRDs (generated into the chart's crds/),
/// ServiceAccount and RBAC for real (the agent runs with the ServiceAccount's token, so they
/// must be enough), the DaemonSet by a server-side dry run (there is no kubelet to run it).
async fn install_the_chart(client: &kube::Client, env: &TestEnv) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let plans: Api<BulkheadPlan> = Api::all(client.clone());
    let reports: Api<BulkheadNode> = Api::all(client.clone());
    let (plans, reports) = (&plans, &reports);
    let ns = "bulkhead-system";
    let manifests = helm_template(env, ns);
    let kinds: Vec<&str> = manifests
        .iter()
        .map(|m| m["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "DaemonSet"
        ],
        "the chart's objects"
    );
    let (real, dry) = (
        PostParams::default(),
        PostParams {
            dry_run: true,
            ..Default::default()
        },
    );
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&real, &namespace)
        .await
        .unwrap();
    for item in &manifests {
        let kind = item["kind"].as_str().unwrap_or_default().to_string();
        let v = item.clone();
        let r = match kind.as_str() {
            "CustomResourceDefinition" => crds
                .create(&real, &serde_json::from_value(v).unwrap())
                .await
                .map(|_| ()),
            "ServiceAccount" => Api::<ServiceAccount>::namespaced(client.clone(), ns)
                .create(&real, &serde_json::from_value(v).unwrap())
                .await
                .map(|_| ()),
            "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                .create(&real, &serde_json::from_value(v).unwrap())
                .await
                .map(|_| ()),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
                .create(&real, &serde_json::from_value(v).unwrap())
                .await
                .map(|_| ()),
            "Role" => Api::<Role>::namespaced(client.clone(), ns)
                .create(&real, &serde_json::from_value(v).unwrap())
                .await
                .map(|_| ()),
            "RoleBinding" => Api::<RoleBinding>::namespaced(client.clone(), ns)
                .create(&real, &serde_json::from_value(v).unwrap())
                .await
                .map(|_| ()),
            "DaemonSet" => Api::<DaemonSet>::namespaced(client.clone(), ns)
                .create(&dry, &serde_json::from_value(v).unwrap())
                .await
                .map(|_| ()),
            k => panic!("the chart: unexpected kind {k}"),
        };
        r.unwrap_or_else(|e| panic!("the chart: {kind}: {e}"));
    }
    wait("CRDs established and served", 60, move || async move {
        plans.list(&Default::default()).await.ok()?;
        reports.list(&Default::default()).await.ok()
    })
    .await;
}

/// The example plan of the docs is valid against the CRD (server-side dry run), and a dry
/// run stores nothing.
async fn the_example_is_valid(client: &kube::Client) -> BulkheadPlan {
    let plans: Api<BulkheadPlan> = Api::all(client.clone());
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let example: BulkheadPlan = serde_saphyr::from_str(&read(
        &Path::new(REPO).join("deploy/examples/redis-node-pool.yaml"),
    ))
    .expect("deploy/examples/redis-node-pool.yaml");
    plans
        .create(&dry, &example)
        .await
        .expect("the example plan");
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "bulkhead-system");
    assert!(
        daemonsets
            .get_opt("bulkhead-agent")
            .await
            .unwrap()
            .is_none(),
        "a dry run stores nothing"
    );
    example
}

/// The ServiceAccount can do what the agent needs and no more.
async fn service_account_limits(w: &World) {
    let node = w.node.as_str();
    let sa_client = {
        let kc = kube::config::Kubeconfig::read_from(&w.agent_kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(cfg).unwrap()
    };
    let forbidden =
        |r: Result<(), kube::Error>| matches!(r, Err(kube::Error::Api(ref s)) if s.code == 403);
    let sa_plans: Api<BulkheadPlan> = Api::all(sa_client.clone());
    assert!(sa_plans.list(&Default::default()).await.is_ok());
    assert!(forbidden(
        sa_plans
            .delete("redis", &DeleteParams::default())
            .await
            .map(|_| ())
    ));
    assert!(forbidden(
        sa_plans
            .patch(
                "redis",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {}}))
            )
            .await
            .map(|_| ())
    ));
    assert!(forbidden(
        Api::<BulkheadNode>::all(sa_client.clone())
            .delete(node, &DeleteParams::default())
            .await
            .map(|_| ())
    ));
    assert!(forbidden(
        Api::<k8s_openapi::api::core::v1::Secret>::all(sa_client.clone())
            .list(&Default::default())
            .await
            .map(|_| ())
    ));
}

/// 1. apply: the slices, the report, the labels, the kubelet's disagreements.
async fn apply(w: &World) {
    let nodes = &w.nodes;
    let reports = &w.reports;
    let node = w.node.as_str();
    let helper_cpu = w.files.helper_cpu.as_path();
    let server_cpu = w.files.server_cpu.as_path();
    let helper_mem = w.files.helper_mem.as_path();
    let cpu_of = w.files.cpu_of;
    // 1. Apply.
    let e = wait("status Applied=True, revision 1", 60, move || async move {
        entry(reports, "redis", node)
            .await
            .filter(|e| is(e, "Applied", "True") && e.applied_revision == Some(1))
    })
    .await;
    assert!(is(&e, "Degraded", "False"), "{e:?}");
    // The kubelet's configuration disagrees twice, and the report says how.
    let fight = e
        .warnings
        .iter()
        .find(|w| w.contains("enforces kube-reserved"));
    assert!(
        fight.is_some_and(|w| w.contains("db-helper")
            && w.contains("MemoryMax")
            && w.contains("CPUWeight")),
        "{:#?}",
        e.warnings
    );
    assert!(
        e.warnings
            .iter()
            .any(|m| m.contains(&w.missing_cgroup) && m.contains("does not exist")),
        "{:#?}",
        e.warnings
    );
    assert_eq!(e.warnings.len(), 2, "{:#?}", e.warnings);
    assert!(cond(&e, "Degraded")
        .unwrap()
        .message
        .contains("2 disagreement(s) with the kubelet"));
    assert_eq!(read(helper_cpu), cpu_of(50));
    assert_eq!(read(server_cpu), cpu_of(1000));
    assert_eq!(read(helper_mem), (100u64 << 20).to_string());
    let names: Vec<&str> = e.slices.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["db", "db-helper", "db-server"], "{e:?}");
    assert!(
        e.slices.iter().all(|s| s.memory_current_bytes.is_some()),
        "{e:?}"
    );
    // Pressure where the node has it (a cgroup2 hierarchy with PSI: pure v2, or hybrid's
    // unified mount); the protected slice's worst stall is the node's (below), written once.
    let psi_here = bulkhead::actions::host::cgroup_version() != Some("v1")
        && Path::new("/proc/pressure/cpu").exists();
    assert_eq!(e.slices.iter().all(|s| s.psi.is_some()), psi_here, "{e:?}");
    assert!(
        e.stall.is_none(),
        "the plan's report repeats the node's stall: {e:?}"
    );
    let l = wait("node labels", 30, move || async move {
        let l = labels(nodes, node).await;
        (l.get("bulkhead.io/plan").map(String::as_str) == Some("redis")).then_some(l)
    })
    .await;
    assert_eq!(l["bulkhead.io/plan-revision"], "1");
    // The report object: owned by the Node, labelled with the plan, its summary for
    // `kubectl get bhnode`.
    let r = reports.get(node).await.unwrap();
    let owner = &r.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Node", w.node_uid.as_str())
    );
    assert_eq!(
        r.metadata.labels.as_ref().unwrap()["bulkhead.io/plan"],
        "redis"
    );
    let st = r.status.unwrap();
    assert_eq!(
        (st.plan.as_deref(), st.applied_revision, st.state.as_str()),
        (Some("redis"), Some(1), "Applied")
    );
    let stall = st.stall.as_ref().map(|s| s.slice.as_str());
    assert_eq!(stall, psi_here.then_some("db-server"), "{st:?}");
    let listed = reports
        .list(&kube::api::ListParams::default().labels("bulkhead.io/plan=redis"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert!(http_get(w.health, "/healthz").starts_with("HTTP/1.1 200"));
    assert!(http_get(w.health, "/readyz").starts_with("HTTP/1.1 200"));
}

/// 2. drift: a hand-made change put back, Drifted=True then Repaired.
async fn drift(w: &World) {
    let reports = &w.reports;
    let node = w.node.as_str();
    let helper_cpu = w.files.helper_cpu.as_path();
    let cpu_of = w.files.cpu_of;
    let cpu_file = w.files.cpu_file;
    let agent = &w.agent;
    // 2. Drift: a hand-made change is put back, and the status says so: Drifted=True while
    //    it re-applies (seen by a watch), then Drifted=False reason Repaired.
    let drifted_seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watch = {
        use futures::StreamExt;
        use kube::runtime::{watcher, WatchStreamExt};
        let seen = drifted_seen.clone();
        let node = node.to_string();
        let cfg = watcher::Config::default().fields(&format!("metadata.name={node}"));
        let mut events = watcher(reports.clone(), cfg).applied_objects().boxed();
        tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                let Ok(n) = ev else { continue };
                let e = n
                    .status
                    .and_then(|s| s.plans.into_iter().find(|r| r.plan == "redis"));
                if let Some(c) = e.as_ref().and_then(|e| cond(e, "Drifted")) {
                    seen.lock()
                        .unwrap()
                        .push(format!("{}/{}", c.status, c.reason));
                }
            }
        })
    };
    std::fs::write(helper_cpu, cpu_of(7)).unwrap();
    wait("the drifted value put back", 30, move || async move {
        (read(helper_cpu) == cpu_of(50)).then_some(())
    })
    .await;
    let e = wait(
        "Drifted=False reason Repaired, Applied=True",
        30,
        move || async move {
            entry(reports, "redis", node).await.filter(|e| {
                is(e, "Applied", "True")
                    && cond(e, "Drifted")
                        .is_some_and(|c| c.status == "False" && c.reason == "Repaired")
            })
        },
    )
    .await;
    assert!(
        cond(&e, "Drifted").unwrap().message.contains(cpu_file),
        "{e:?}"
    );
    assert!(
        agent.log().contains("drift, re-applying"),
        "{}",
        agent.log()
    );
    wait("the watch saw Drifted=True, then Repaired", 30, || async {
        let seen = drifted_seen.lock().unwrap().clone();
        let t = seen.iter().position(|s| s == "True/DriftDetected")?;
        seen[t..]
            .iter()
            .any(|s| s == "False/Repaired")
            .then_some(())
    })
    .await;
    watch.abort();
}

/// 3. update: a new generation lands.
async fn update(w: &World) {
    let plans = &w.plans;
    let nodes = &w.nodes;
    let reports = &w.reports;
    let node = w.node.as_str();
    let helper_cpu = w.files.helper_cpu.as_path();
    let helper_mem = w.files.helper_mem.as_path();
    let cpu_of = w.files.cpu_of;
    let merge = PatchParams::default();
    // 3. Update: the generation goes up, the new values land.
    let p = plans
        .patch("redis", &merge, &Patch::Merge(spec(json!(100), "200M")))
        .await
        .unwrap();
    assert_eq!(p.metadata.generation, Some(2));
    wait("revision 2 applied", 30, move || async move {
        entry(reports, "redis", node)
            .await
            .filter(|e| e.applied_revision == Some(2) && is(e, "Applied", "True"))
    })
    .await;
    assert_eq!(read(helper_cpu), cpu_of(100));
    assert_eq!(read(helper_mem), (200u64 << 20).to_string());
    wait("label revision 2", 30, move || async move {
        let l = labels(nodes, node).await;
        (l.get("bulkhead.io/plan-revision").map(String::as_str) == Some("2")).then_some(())
    })
    .await;
}

/// 4. a directive the parser does not know: Degraded, nothing applied.
async fn unknown_directive(w: &World) {
    let plans = &w.plans;
    let reports = &w.reports;
    let node = w.node.as_str();
    let helper_cpu = w.files.helper_cpu.as_path();
    let cpu_of = w.files.cpu_of;
    let agent = &w.agent;
    let merge = PatchParams::default();
    // 4. A directive the parser does not know: Degraded with its message, nothing applied
    //    (not even the valid change next to it).
    let mut bad = spec(json!(300), "200M");
    bad["spec"]["slices"]["db-helper"]["CPUWieght"] = json!(5);
    plans
        .patch("redis", &merge, &Patch::Merge(&bad))
        .await
        .unwrap();
    let e = wait("Degraded=True reason InvalidPlan", 30, move || async move {
        entry(reports, "redis", node).await.filter(|e| {
            cond(e, "Degraded").is_some_and(|c| c.status == "True" && c.reason == "InvalidPlan")
        })
    })
    .await;
    let msg = &cond(&e, "Degraded").unwrap().message;
    assert!(msg.contains("unknown directive 'CPUWieght'"), "{msg}");
    assert!(is(&e, "Applied", "False"), "{e:?}");
    assert_eq!(
        e.applied_revision,
        Some(2),
        "the node still runs revision 2"
    );
    assert_eq!(read(helper_cpu), cpu_of(100));
    assert!(agent.alive());
}

/// 5. a slice of the kubelet's: refused.
async fn kubelet_slice(w: &World) {
    let plans = &w.plans;
    let reports = &w.reports;
    let node = w.node.as_str();
    let root = &w.root;
    let merge = PatchParams::default();
    // 5. A slice of the kubelet's: refused the same way.
    let mut kubepods = spec(json!(100), "200M");
    kubepods["spec"]["slices"]["db-helper"]["CPUWieght"] = json!(null);
    kubepods["spec"]["slices"]["kubepods-burstable"] = json!({"CPUWeight": 10});
    plans
        .patch("redis", &merge, &Patch::Merge(&kubepods))
        .await
        .unwrap();
    let e = wait("Degraded: kubepods refused", 30, move || async move {
        entry(reports, "redis", node).await.filter(|e| {
            cond(e, "Degraded").is_some_and(|c| c.status == "True" && c.message.contains("kubelet"))
        })
    })
    .await;
    assert_eq!(e.applied_revision, Some(2));
    assert!(!root.controller_dir("cpu", "kubepods.slice").exists());
    let mut fixed = json!({"spec": {"slices": {"kubepods-burstable": null}}});
    fixed["spec"]["slices"]["db-helper"] = json!({"CPUWeight": 100, "MemoryMax": "200M"});
    let p = plans
        .patch("redis", &merge, &Patch::Merge(&fixed))
        .await
        .unwrap();
    let g = p.metadata.generation.unwrap();
    wait(
        "valid again: Applied=True at the new revision",
        30,
        move || async move {
            entry(reports, "redis", node).await.filter(|e| {
                e.applied_revision == Some(g)
                    && is(e, "Applied", "True")
                    && is(e, "Degraded", "False")
            })
        },
    )
    .await;
}

/// 6. two plans select the node: Degraded on both.
async fn two_plans(w: &World) {
    let plans = &w.plans;
    let reports = &w.reports;
    let node = w.node.as_str();
    let root = &w.root;
    // 6. A second plan selecting the node: Degraded on both, naming the other; nothing of it
    //    applied.
    let other: BulkheadPlan = serde_json::from_value(json!({
        "apiVersion": "bulkhead.io/v1alpha1", "kind": "BulkheadPlan",
        "metadata": {"name": "other"},
        "spec": {"slices": {"other": {"CPUWeight": 10}}},
    }))
    .unwrap();
    plans.create(&PostParams::default(), &other).await.unwrap();
    let e = reported(
        reports,
        node,
        "other",
        ("Degraded", "True"),
        ("Degraded on the second plan", 30),
    )
    .await;
    assert!(
        cond(&e, "Degraded").unwrap().message.contains("redis"),
        "{e:?}"
    );
    assert!(is(&e, "Applied", "False"));
    let e = reported(
        reports,
        node,
        "redis",
        ("Degraded", "True"),
        ("Degraded on the first plan", 30),
    )
    .await;
    assert!(
        cond(&e, "Degraded").unwrap().message.contains("other"),
        "{e:?}"
    );
    assert!(is(&e, "Applied", "True"));
    assert!(!root.controller_dir("cpu", "other.slice").exists());
    plans
        .delete("other", &DeleteParams::default())
        .await
        .unwrap();
    reported(
        reports,
        node,
        "redis",
        ("Degraded", "False"),
        ("Degraded back to False once the other plan is gone", 30),
    )
    .await;
}

/// 7. the API server goes away and comes back.
async fn api_server_away(w: &World) {
    let plans = &w.plans;
    let reports = &w.reports;
    let node = w.node.as_str();
    let helper_cpu = w.files.helper_cpu.as_path();
    let helper_mem = w.files.helper_mem.as_path();
    let cpu_of = w.files.cpu_of;
    let agent = &w.agent;
    // 7. The API server goes away: the slices stay, drift is still repaired; it comes back
    //    and the agent catches up with a change made after.
    let log_before = agent.log().len();
    w.env.apiserver("stop-apiserver");
    // The agent has noticed (both watches failed), not a pause it may not have got through;
    // and it runs on.
    let log = &agent.log;
    wait(
        "the agent sees the API server gone",
        60,
        move || async move {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let since = text.get(log_before..).unwrap_or_default();
            (since.contains("watch of plans failed") && since.contains("watch of node failed"))
                .then_some(())
        },
    )
    .await;
    assert!(agent.alive(), "{}", agent.log());
    assert_eq!(read(helper_cpu), cpu_of(100));
    std::fs::write(helper_cpu, cpu_of(9)).unwrap();
    wait(
        "drift repaired while the API server is down",
        30,
        move || async move { (read(helper_cpu) == cpu_of(100)).then_some(()) },
    )
    .await;
    w.env.apiserver("start-apiserver");
    eprintln!("API server back");
    // Right after a start, the watch cache may still answer 429 for a moment: retry.
    let change = spec(json!(100), "300M");
    let p = wait("the change made after the restart accepted", 30, || {
        let change = change.clone();
        async move {
            plans
                .patch("redis", &PatchParams::default(), &Patch::Merge(change))
                .await
                .ok()
        }
    })
    .await;
    let g = p.metadata.generation.unwrap();
    wait(
        "the change made after the restart applied",
        90,
        move || async move { (read(helper_mem) == (300u64 << 20).to_string()).then_some(()) },
    )
    .await;
    wait("status caught up", 60, move || async move {
        entry(reports, "redis", node)
            .await
            .filter(|e| e.applied_revision == Some(g) && is(e, "Applied", "True"))
    })
    .await;
}

/// 8. the plan stops selecting the node.
async fn selector_change(w: &World) {
    let plans = &w.plans;
    let nodes = &w.nodes;
    let reports = &w.reports;
    let node = w.node.as_str();
    let root = &w.root;
    let merge = PatchParams::default();
    // 8. The plan stops selecting the node: slices, labels and the status entry go.
    plans
        .patch(
            "redis",
            &merge,
            &Patch::Merge(json!({"spec": {"nodeSelector": {"pool": "elsewhere"}}})),
        )
        .await
        .unwrap();
    wait("slices removed", 30, move || async move {
        (!root.controller_dir("cpu", "db.slice").exists()
            && !root.controller_dir("memory", "db.slice").exists())
        .then_some(())
    })
    .await;
    wait("labels removed", 30, move || async move {
        let l = labels(nodes, node).await;
        (!l.contains_key("bulkhead.io/plan") && !l.contains_key("bulkhead.io/plan-revision"))
            .then_some(())
    })
    .await;
    wait("the report says no plan", 30, move || async move {
        let r = reports.get(node).await.ok()?;
        let labels = r.metadata.labels.unwrap_or_default();
        let st = r.status?;
        (st.plans.is_empty() && st.state == "None" && !labels.contains_key("bulkhead.io/plan"))
            .then_some(())
    })
    .await;
}

/// 9. selected again with a huge page pool, then deleted.
async fn hugepages_and_delete(w: &World) {
    let plans = &w.plans;
    let nodes = &w.nodes;
    let reports = &w.reports;
    let node = w.node.as_str();
    let root = &w.root;
    let merge = PatchParams::default();
    // 9. Selected again with a huge page pool two pages bigger, then deleted: applied, then
    //    removed, and the pool is put back as it was.
    let pool = Path::new("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
    let before: u64 = read(pool).trim().parse().unwrap();
    let _restore = PoolGuard(pool, before);
    plans
        .patch(
            "redis",
            &merge,
            &Patch::Merge(json!({"spec": {
                "nodeSelector": {"pool": "redis"},
                "hugepages": {"pools": {"2M": before + 2}},
            }})),
        )
        .await
        .unwrap();
    wait("applied again", 30, move || async move {
        root.controller_dir("cpu", "db.slice/db-helper.slice")
            .exists()
            .then_some(())
    })
    .await;
    wait("the pool grown by the plan", 30, move || async move {
        (read(pool).trim() == (before + 2).to_string()).then_some(())
    })
    .await;
    // The Node (there is no kubelet) advertises no huge pages: the report says so.
    let e = wait("the huge page warning", 30, move || async move {
        entry(reports, "redis", node)
            .await
            .filter(|e| e.warnings.iter().any(|w| w.contains("hugepages-2Mi")))
    })
    .await;
    let warning = e
        .warnings
        .iter()
        .find(|m| m.contains("hugepages-2Mi"))
        .unwrap();
    assert!(warning.contains("(2 pages)") || before > 0, "{warning}");
    plans
        .delete("redis", &DeleteParams::default())
        .await
        .unwrap();
    wait("slices removed after delete", 30, move || async move {
        (!root.controller_dir("cpu", "db.slice").exists()).then_some(())
    })
    .await;
    wait("labels removed after delete", 30, move || async move {
        (!labels(nodes, node).await.contains_key("bulkhead.io/plan")).then_some(())
    })
    .await;
    wait("the pool put back after delete", 30, move || async move {
        (read(pool).trim() == before.to_string()).then_some(())
    })
    .await;
    let state = read(&w.state_dir.join("state.json"));
    assert!(state.contains("\"plan\": null"), "{state}");
}

/// 10. the docs' example plan end to end.
async fn example_plan(w: &World) {
    let plans = &w.plans;
    let reports = &w.reports;
    let node = w.node.as_str();
    let root = &w.root;
    let server_cpu = w.files.server_cpu.as_path();
    let helper_mem = w.files.helper_mem.as_path();
    let cpu_of = w.files.cpu_of;
    // 10. The docs' example plan (deploy/examples/redis-node-pool.yaml) end to end.
    let name = w.example.metadata.name.clone().unwrap();
    plans
        .create(&PostParams::default(), &w.example)
        .await
        .unwrap();
    let name = name.as_str();
    wait("the example plan applied", 60, move || async move {
        entry(reports, name, node)
            .await
            .filter(|e| is(e, "Applied", "True") && e.applied_revision == Some(1))
    })
    .await;
    assert_eq!(read(server_cpu), cpu_of(1000));
    // MemoryMax = 5% of RAM, at least 1400M (v1 rounds to pages).
    let limit: u64 = read(helper_mem).trim().parse().unwrap();
    assert!(
        ((1400u64 << 20) - 4096..1 << 62).contains(&limit),
        "db-helper's memory limit {limit}"
    );
    plans.delete(name, &DeleteParams::default()).await.unwrap();
    wait("the example's slices removed", 30, move || async move {
        (!root.controller_dir("cpu", "db.slice").exists()).then_some(())
    })
    .await;
}
