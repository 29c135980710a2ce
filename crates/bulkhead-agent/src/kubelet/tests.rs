use super::*;
use k8s_openapi::api::core::v1::NodeStatus;

/// kubeadm's /var/lib/kubelet/config.yaml for v1.34 (`kubeadm init` with no patches).
const KUBEADM: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
resolvConf: /run/systemd/resolve/resolv.conf
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"#;

/// A tuned systemd node: reservations enforced on system.slice and kube.slice, the static
/// CPU manager keeping CPUs 0-1 for the system.
const SYSTEMD: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cgroupsPerQOS: true
systemReserved:
  cpu: 500m
  memory: 1Gi
  pid: 1000
kubeReserved: {cpu: "250m", memory: 512Mi}
systemReservedCgroup: /system.slice
kubeReservedCgroup: /kube.slice
enforceNodeAllocatable: [pods, system-reserved, kube-reserved]
cpuManagerPolicy: static
reservedSystemCPUs: "0-1"
"#;

/// A cgroupfs node (the kubelet's default driver) with its own root.
const CGROUPFS: &str = r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
  "cgroupDriver": "cgroupfs", "cgroupRoot": "/k8s",
  "kubeReserved": {"cpu": "1", "memory": "2G"}, "kubeReservedCgroup": "/kube-reserved",
  "enforceNodeAllocatable": ["pods", "kube-reserved"]}"#;

fn cfg(text: &str) -> KubeletConfig {
    KubeletConfig::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

fn plan(text: &str) -> PlanFacts {
    let p = Plan::parse(text, None).unwrap_or_else(|e| panic!("{e}"));
    PlanFacts::from_plan(&p, "/", Some(64 << 30))
}

fn none(_: &str) -> bool {
    false
}

fn all(_: &str) -> bool {
    true
}

fn run(c: &KubeletConfig, p: &PlanFacts, exists: &dyn Fn(&str) -> bool) -> Vec<String> {
    check(c, p, &NodeFacts::default(), exists)
}

fn one(w: &[String], parts: &[&str]) {
    assert_eq!(w.len(), 1, "{w:#?}");
    for p in parts {
        assert!(w[0].contains(p), "{p:?} not in {}", w[0]);
    }
}

#[test]
fn kubeadm_default_parses_and_agrees_with_a_plan() {
    let c = cfg(KUBEADM);
    assert!(c.systemd());
    assert_eq!(c.kind.as_deref(), Some("KubeletConfiguration"));
    assert_eq!(c.system_reserved, None);
    assert_eq!(c.cpu_manager_policy, None);
    let p = plan("[slice.db]\nCPUWeight = 100\n[slice.db-server]\nAllowedCPUs = \"2-3\"\nMemoryMax = \"4G\"\n");
    assert!(run(&c, &p, &none).is_empty());
}

#[test]
fn systemd_example_parses() {
    let c = cfg(SYSTEMD);
    let sr = c.system_reserved.as_ref().unwrap();
    assert_eq!(sr["cpu"], "500m");
    assert_eq!(sr["pid"], "1000");
    assert_eq!(c.kube_reserved.as_ref().unwrap()["memory"], "512Mi");
    assert_eq!(c.cgroups_per_qos, Some(true));
    assert_eq!(c.reserved_system_cpus.as_deref(), Some("0-1"));
    assert!(c.enforces("system-reserved") && c.enforces("kube-reserved"));
    // Both cgroups exist on the host, the plan pins inside 0-1: nothing to say.
    let p = plan("[slice.db]\nAllowedCPUs = \"0-1\"\n");
    assert!(run(&c, &p, &all).is_empty());
}

#[test]
fn cgroupfs_example_parses() {
    let c = cfg(CGROUPFS);
    assert!(!c.systemd());
    assert_eq!(c.cgroup_root.as_deref(), Some("/k8s"));
    assert_eq!(c.kube_reserved.as_ref().unwrap()["cpu"], "1");
    let seen = std::cell::RefCell::new(Vec::new());
    let exists = |p: &str| {
        seen.borrow_mut().push(p.to_string());
        true
    };
    assert!(run(&c, &plan("[slice.db]\nCPUWeight = 10\n"), &exists).is_empty());
    assert_eq!(*seen.borrow(), ["kube-reserved"]);
}

#[test]
fn bad_configurations_say_what_is_wrong() {
    let e = KubeletConfig::parse("kind: Pod\n").unwrap_err();
    assert!(e.contains("kind is Pod"), "{e}");
    let e = KubeletConfig::parse("apiVersion: v1\n").unwrap_err();
    assert!(e.contains("apiVersion is v1"), "{e}");
    for bad in [
        "- a\n- b\n",
        "cgroupDriver: [1]\n",
        "cgroupsPerQOS: maybe\n",
        "systemReserved: 3\n",
        ": :\n  - {",
        "enforceNodeAllocatable: {a: 1}\n",
    ] {
        assert!(KubeletConfig::parse(bad).is_err(), "{bad}");
    }
    // Fields may be missing or null.
    let c = cfg("kind: KubeletConfiguration\nsystemReserved:\ncgroupRoot: null\n");
    assert_eq!(c.system_reserved, None);
    assert_eq!(c.cgroup_root, None);
    assert!(!c.systemd());
}

#[test]
fn load_names_the_file_and_bounds_its_size() {
    let dir = std::env::temp_dir().join(format!("bulkhead-kubelet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("config.yaml");
    std::fs::write(&good, SYSTEMD).unwrap();
    assert_eq!(load(&good).unwrap(), cfg(SYSTEMD));

    let big = dir.join("big.yaml");
    let mut text = String::from("kind: KubeletConfiguration\n");
    text.push_str(&format!("# {}\n", "x".repeat(MAX_CONFIG as usize)));
    std::fs::write(&big, text).unwrap();
    let e = load(&big).unwrap_err();
    assert!(e.contains("big.yaml") && e.contains("more than"), "{e}");

    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "kind: Deployment\n").unwrap();
    let e = load(&bad).unwrap_err();
    assert!(e.contains("bad.yaml") && e.contains("Deployment"), "{e}");

    let binary = dir.join("binary.yaml");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    assert!(load(&binary).unwrap_err().contains("binary.yaml"));

    let e = load(&dir.join("missing.yaml")).unwrap_err();
    assert!(
        e.contains("missing.yaml") && e.contains("cannot read"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cgroup_names_normalise_like_the_kubelet() {
    let sd = |n: &str| cgroup_path(n, true);
    assert_eq!(sd("/system.slice").as_deref(), Some("system.slice"));
    assert_eq!(sd("system.slice").as_deref(), Some("system.slice"));
    assert_eq!(sd("system").as_deref(), Some("system.slice"));
    assert_eq!(
        sd("/db.slice/db-server.slice").as_deref(),
        Some("db.slice/db-server.slice")
    );
    assert_eq!(
        sd("db-server.slice").as_deref(),
        Some("db.slice/db-server.slice")
    );
    assert_eq!(sd("/kubereserved/").as_deref(), Some("kubereserved.slice"));
    for root in ["", "/", " ", "-.slice", ".slice", "//"] {
        assert_eq!(sd(root), None, "{root:?}");
    }
    let fs = |n: &str| cgroup_path(n, false);
    assert_eq!(fs("/kube-reserved").as_deref(), Some("kube-reserved"));
    assert_eq!(fs("/a//b/./").as_deref(), Some("a/b"));
    assert_eq!(fs("/system.slice").as_deref(), Some("system.slice"));
    assert_eq!(fs("/"), None);
}

#[test]
fn quantities_parse_exactly() {
    let q = parse_quantity;
    assert_eq!(q("0"), Some(0));
    assert_eq!(q("1Gi"), Some(1 << 30));
    assert_eq!(q("512Mi"), Some(512 << 20));
    assert_eq!(q("2Mi"), Some(2 << 20));
    assert_eq!(q("2M"), Some(2_000_000));
    assert_eq!(q("1k"), Some(1000));
    assert_eq!(q("1Ki"), Some(1024));
    assert_eq!(q("0.5Ki"), Some(512));
    assert_eq!(q("1.5Gi"), Some(3 << 29));
    assert_eq!(q("500m"), Some(1));
    assert_eq!(q("1e3"), Some(1000));
    assert_eq!(q("1E3"), Some(1000));
    assert_eq!(q("2E"), Some(2_000_000_000_000_000_000));
    assert_eq!(q("+7"), Some(7));
    assert_eq!(q(" 3 "), Some(3));
    assert_eq!(q("1n"), Some(1));
    assert_eq!(q("0.000m"), Some(0));
    for bad in [
        "",
        "-1",
        "Gi",
        "1GB",
        "1.2.3",
        ".",
        "1 Gi",
        "16Ei",
        "1e100",
        "1e-100x",
        "x",
        "1e",
        "99999999999999999999999999999999",
        "1Ei1",
        "--1",
        "+",
        "e3",
    ] {
        assert_eq!(q(bad), None, "{bad:?}");
    }
    // No input panics.
    let pieces = [
        "", "0", "9", ".", "e", "E", "-", "+", "Ki", "Ei", "m", "n", "99999", "e-60", "e60",
    ];
    for a in pieces {
        for b in pieces {
            for c in pieces {
                let _ = q(&format!("{a}{b}{c}"));
            }
        }
    }
}

#[test]
fn plan_facts_come_from_the_parsed_plan() {
    let p = Plan::parse(
        "[slice.db-server]\nAllowedCPUs = \"2-3\"\nCPUWeight = 100\nMemoryHigh = \"4G\"\nIOWeight = 10\n\
         [hugepages]\npools = { \"2M\" = { node0 = 100, node1 = 28 }, \"1G\" = \"50%\" }\n",
        None,
    )
    .unwrap();
    let f = PlanFacts::from_plan(&p, "/sys-root/", Some(100 << 30));
    let s = f.slices.iter().find(|s| s.name == "db-server").unwrap();
    assert_eq!(s.path, "sys-root/db.slice/db-server.slice");
    assert_eq!(s.allowed_cpus.as_ref().unwrap().to_string(), "2-3");
    let limits: Vec<&str> = s.limits.iter().map(String::as_str).collect();
    assert_eq!(limits, ["CPUWeight", "MemoryHigh"]);
    // The implicit parent is there too: the plan makes it.
    let parent = f.slices.iter().find(|s| s.name == "db").unwrap();
    assert_eq!(parent.path, "sys-root/db.slice");
    assert!(parent.limits.is_empty() && parent.allowed_cpus.is_none());
    assert_eq!(f.hugepages[&(2 << 20)], 128);
    assert_eq!(f.hugepages[&(1 << 30)], 50);
    // A share of RAM counts only when RAM is known.
    let f = PlanFacts::from_plan(&p, "", None);
    assert_eq!(f.slices[0].path, "db.slice");
    assert!(!f.hugepages.contains_key(&(1 << 30)));
}

#[test]
fn node_facts_read_capacity_then_allocatable() {
    let q = |pairs: &[(&str, &str)]| -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    };
    let node = Node {
        status: Some(NodeStatus {
            capacity: Some(q(&[
                ("cpu", "8"),
                ("memory", "32827428Ki"),
                ("hugepages-2Mi", "1Gi"),
                ("hugepages-bogus", "1Gi"),
            ])),
            allocatable: Some(q(&[("hugepages-2Mi", "0"), ("hugepages-1Gi", "2Gi")])),
            ..Default::default()
        }),
        ..Default::default()
    };
    let n = NodeFacts::from_node(&node);
    assert_eq!(n.memory, Some(32827428 * 1024));
    assert_eq!(n.hugepages.len(), 2);
    assert_eq!(n.hugepages[&(2 << 20)], 1 << 30);
    assert_eq!(n.hugepages[&(1 << 30)], 2 << 30);
    assert_eq!(NodeFacts::from_node(&Node::default()), NodeFacts::default());
}

// a. The reserved cgroups exist.

#[test]
fn a_reserved_cgroup_that_exists_nowhere_is_named() {
    let c = cfg("cgroupDriver: systemd\nsystemReservedCgroup: /system.slice\n");
    let w = run(&c, &plan("[slice.db]\nCPUWeight = 10\n"), &none);
    one(
        &w,
        &[
            "systemReservedCgroup = /system.slice",
            "system.slice",
            "does not exist",
            "fails",
        ],
    );
    let c = cfg(CGROUPFS);
    let w = run(&c, &PlanFacts::default(), &none);
    one(
        &w,
        &[
            "kubeReservedCgroup = /kube-reserved",
            "the cgroup kube-reserved",
        ],
    );
}

#[test]
fn a_reserved_cgroup_on_the_host_or_in_the_plan_is_fine() {
    let c = cfg("cgroupDriver: systemd\nkubeReservedCgroup: /db.slice/db-server.slice\n");
    assert!(run(&c, &PlanFacts::default(), &all).is_empty());
    assert!(run(&c, &plan("[slice.db-server]\nCPUWeight = 10\n"), &none).is_empty());
    // An implicit parent is made by the plan as well.
    let c = cfg("cgroupDriver: systemd\nkubeReservedCgroup: db.slice\n");
    assert!(run(&c, &plan("[slice.db-server]\nCPUWeight = 10\n"), &none).is_empty());
    let c = cfg("kubeReservedCgroup: \"\"\nsystemReservedCgroup: /\n");
    assert!(run(&c, &PlanFacts::default(), &none).is_empty());
}

// b. The kubelet and the plan set the same cgroup.

#[test]
fn b_an_enforced_reservation_on_a_plan_slice_fights() {
    let c = cfg(SYSTEMD);
    let p =
        plan("[slice.system]\nCPUWeight = 100\nMemoryMax = \"2G\"\nTasksMax = 100\nIOWeight = 5\n");
    let w = run(&c, &p, &all);
    one(
        &w,
        &[
            "enforces system-reserved",
            "systemReservedCgroup = /system.slice",
            "slice system",
            "CPUWeight from systemReserved cpu",
            "MemoryMax from systemReserved memory",
            "TasksMax from systemReserved pid",
            "drift",
        ],
    );
    assert!(!w[0].contains("IOWeight"), "{}", w[0]);
}

#[test]
fn b_no_fight_without_enforcement_or_shared_directives() {
    let p = plan("[slice.system]\nCPUWeight = 100\nMemoryMax = \"2G\"\n");
    let c = cfg(&SYSTEMD.replace("[pods, system-reserved, kube-reserved]", "[pods]"));
    assert!(run(&c, &p, &all).is_empty());
    // The kubelet writes no CPU quota and no memory high mark.
    let c = cfg(SYSTEMD);
    let p2 = plan("[slice.system]\nCPUQuota = \"50%\"\nMemoryHigh = \"2G\"\n");
    assert!(run(&c, &p2, &all).is_empty());
    // Nothing reserved: nothing written.
    let c = cfg("cgroupDriver: systemd\nsystemReservedCgroup: system.slice\nenforceNodeAllocatable: [system-reserved]\n");
    assert!(run(&c, &p, &all).is_empty());
    // The compressible form enforces cpu only.
    let c = cfg(&SYSTEMD.replace(
        "[pods, system-reserved, kube-reserved]",
        "[pods, system-reserved-compressible]",
    ));
    let w = run(&c, &p, &all);
    one(&w, &["CPUWeight from systemReserved cpu"]);
    assert!(!w[0].contains("MemoryMax from"), "{}", w[0]);
}

// c. An enforced reservation needs its cgroup.

#[test]
fn c_enforced_without_a_cgroup_is_named() {
    let c = cfg("enforceNodeAllocatable: [pods, system-reserved, kube-reserved]\n");
    let w = run(&c, &PlanFacts::default(), &all);
    assert_eq!(w.len(), 2, "{w:#?}");
    assert!(w[0].contains("system-reserved") && w[0].contains("systemReservedCgroup is empty"));
    assert!(w[1].contains("kubeReservedCgroup is empty") && w[1].contains("refuses to start"));
    let c = cfg("enforceNodeAllocatable: [pods]\n");
    assert!(run(&c, &PlanFacts::default(), &all).is_empty());
    let c = cfg("enforceNodeAllocatable: [kube-reserved]\nkubeReservedCgroup: /kube\n");
    assert!(run(&c, &PlanFacts::default(), &all).is_empty());
}

// d. The static CPU manager's exclusive CPUs.

#[test]
fn d_allowed_cpus_outside_the_reserved_set_are_named() {
    let c = cfg(SYSTEMD);
    let p = plan("[slice.db]\nAllowedCPUs = \"0-3\"\n[slice.db-server]\nAllowedCPUs = \"1\"\n[slice.web]\nAllowedCPUs = \"0,5\"\n");
    let w = run(&c, &p, &all);
    assert_eq!(w.len(), 2, "{w:#?}");
    assert!(
        w[0].contains("slice db:") && w[0].contains("CPUs 2-3 outside"),
        "{}",
        w[0]
    );
    assert!(w[0].contains("reservedSystemCPUs = 0-1") && w[0].contains("static"));
    assert!(
        w[1].contains("slice web:") && w[1].contains("CPUs 5 outside"),
        "{}",
        w[1]
    );
}

#[test]
fn d_static_without_reserved_cpus_or_not_static() {
    let p = plan("[slice.db]\nAllowedCPUs = \"2-3\"\n");
    let c = cfg("cpuManagerPolicy: static\n");
    one(
        &run(&c, &p, &all),
        &[
            "reservedSystemCPUs is not set",
            "any of the node's",
            "db 2-3",
        ],
    );
    let c = cfg("cpuManagerPolicy: none\nreservedSystemCPUs: \"0\"\n");
    assert!(run(&c, &p, &all).is_empty());
    let c = cfg("cpuManagerPolicy: static\n");
    assert!(run(&c, &plan("[slice.db]\nCPUWeight = 5\n"), &all).is_empty());
    let c = cfg("cpuManagerPolicy: static\nreservedSystemCPUs: \"0-x\"\n");
    one(
        &run(&c, &p, &all),
        &["reservedSystemCPUs = 0-x is not a CPU list"],
    );
    let c = cfg("cpuManagerPolicy: static\nreservedSystemCPUs: \"0-3, 8\"\n");
    assert!(run(&c, &p, &all).is_empty());
}

// e. Huge pages the node advertises.

fn node(pairs: &[(u64, u64)]) -> NodeFacts {
    NodeFacts {
        hugepages: pairs.iter().copied().collect(),
        memory: None,
    }
}

#[test]
fn e_huge_pages_that_differ_are_named() {
    let p = plan("[hugepages]\npools = { \"2M\" = 512 }\n");
    let w = check(&cfg(KUBEADM), &p, &node(&[(2 << 20, 2 << 30)]), &all);
    one(
        &w,
        &[
            "2Gi of hugepages-2Mi",
            "holds 1Gi (512 pages)",
            "SIGBUS",
            "kubernetes#71233",
            "restart the kubelet",
        ],
    );
    let w = check(&cfg(KUBEADM), &p, &node(&[(2 << 20, 0)]), &all);
    one(
        &w,
        &[
            "0 of hugepages-2Mi",
            "cannot request",
            "restart the kubelet",
        ],
    );
    assert!(!w[0].contains("SIGBUS"));
    // Not advertised at all: 0.
    let w = check(&cfg(KUBEADM), &p, &NodeFacts::default(), &all);
    one(&w, &["0 of hugepages-2Mi"]);
}

#[test]
fn e_matching_or_unplanned_sizes_are_fine() {
    let p = plan("[hugepages]\npools = { \"2M\" = \"1G\" }\n");
    let n = node(&[(2 << 20, 1 << 30), (1 << 30, 4 << 30)]);
    assert!(check(&cfg(KUBEADM), &p, &n, &all).is_empty());
    // No pools in the plan: nothing to compare.
    let p = plan("[hugepages]\nthp = \"madvise\"\n");
    assert!(check(&cfg(KUBEADM), &p, &n, &all).is_empty());
    let p = plan("[hugepages]\npools = { \"1G\" = 0 }\n");
    assert!(check(&cfg(KUBEADM), &p, &node(&[]), &all).is_empty());
}

// f. Slices inside the kubelet's cgroupRoot.

#[test]
fn f_a_slice_under_a_custom_cgroup_root_is_named() {
    let c = cfg("cgroupDriver: systemd\ncgroupRoot: /kube.slice\n");
    let w = run(
        &c,
        &plan("[slice.kube-db]\nCPUWeight = 5\n[slice.db]\nCPUWeight = 5\n"),
        &all,
    );
    assert_eq!(w.len(), 2, "{w:#?}");
    assert!(w[0].contains("slice kube (kube.slice)"), "{}", w[0]);
    assert!(
        w[1].contains("slice kube-db (kube.slice/kube-db.slice)")
            && w[1].contains("cgroupRoot = /kube.slice")
    );
    let c = cfg(CGROUPFS);
    let p = Plan::parse("[slice.db]\nCPUWeight = 5\n", None).unwrap();
    let w = run(&c, &PlanFacts::from_plan(&p, "/k8s", None), &all);
    one(
        &w,
        &["slice db (k8s/db.slice)", "move the slice out of k8s"],
    );
}

#[test]
fn f_the_default_root_or_a_sibling_is_fine() {
    let p = plan("[slice.kubex]\nCPUWeight = 5\n[slice.db]\nCPUWeight = 5\n");
    for root in [
        "cgroupRoot: /\n",
        "cgroupRoot: \"\"\n",
        "",
        "cgroupRoot: /kube\ncgroupDriver: cgroupfs\n",
    ] {
        assert!(run(&cfg(root), &p, &all).is_empty(), "{root}");
    }
}

#[test]
fn cgroup_dir_exists_refuses_dot_dot() {
    let tmp = std::env::temp_dir();
    assert!(cgroup_dir_exists(Path::new("/"), "tmp") == Path::new("/tmp").is_dir());
    assert!(!cgroup_dir_exists(&tmp, "../tmp"));
    assert!(!cgroup_dir_exists(&tmp, "no-such-cgroup-here"));
}

// The node's cgroup version (issue 45): Kubernetes 1.35+ refuses v1 unless told.

#[test]
fn a_v1_or_hybrid_node_is_told_what_kubernetes_1_35_does() {
    assert_eq!(cgroup_v1_notice("v2", Some(&cfg(KUBEADM))), None);
    let unset = cgroup_v1_notice("hybrid", Some(&cfg(KUBEADM))).unwrap();
    assert!(
        unset.contains("hybrid")
            && unset.contains("KEP-5573")
            && unset.contains("does not set failCgroupV1")
            && unset.contains("refuses to start here"),
        "{unset}"
    );
    let allowed = cfg(&format!("{KUBEADM}failCgroupV1: false\n"));
    assert_eq!(allowed.fail_cgroup_v1, Some(false));
    let n = cgroup_v1_notice("v1", Some(&allowed)).unwrap();
    assert!(
        n.contains("sets failCgroupV1: false, so it starts here"),
        "{n}"
    );
    let n = cgroup_v1_notice("v1", None).unwrap();
    assert!(n.contains("was not read"), "{n}");
}
