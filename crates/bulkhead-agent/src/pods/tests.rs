use super::*;
use std::path::PathBuf;

/// A scratch "unified mount", removed when dropped.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let d = std::env::temp_dir().join(format!("bulkhead-pods-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tree(d)
    }
    /// A cgroup at `rel` with these "some" avg10 values (cpu, memory, io); io and memory
    /// get a "full" line too, as the kernel has them.
    fn pod(&self, rel: &str, cpu: f64, memory: f64, io: f64) {
        let d = self.0.join(rel);
        std::fs::create_dir_all(&d).unwrap();
        let line =
            |kind: &str, v: f64| format!("{kind} avg10={v:.2} avg60=0.00 avg300=0.00 total=1234\n");
        std::fs::write(d.join("cpu.pressure"), line("some", cpu)).unwrap();
        for (f, v) in [("memory.pressure", memory), ("io.pressure", io)] {
            std::fs::write(d.join(f), line("some", v) + &line("full", v / 2.0)).unwrap();
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const UID1: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
const UID2: &str = "11111111-2222-3333-4444-555555555555";
const UID3: &str = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

fn cfg(yaml: &str) -> KubeletConfig {
    KubeletConfig::parse(yaml).unwrap()
}

#[test]
fn pod_cgroup_names_give_their_uids() {
    assert_eq!(pod_uid(&format!("pod{UID1}")).as_deref(), Some(UID1));
    let systemd = format!("kubepods-burstable-pod{}.slice", UID2.replace('-', "_"));
    assert_eq!(pod_uid(&systemd).as_deref(), Some(UID2));
    let guaranteed = format!("kubepods-pod{}.slice", UID3.replace('-', "_"));
    assert_eq!(pod_uid(&guaranteed).as_deref(), Some(UID3));
    // A static pod's UID is its manifest's hash.
    assert_eq!(
        pod_uid("pod7d3f0e2a9b8c4d5e6f708192a3b4c5d6").as_deref(),
        Some("7d3f0e2a9b8c4d5e6f708192a3b4c5d6")
    );
    for other in [
        "burstable",
        "kubepods-burstable.slice",
        "kubepods.slice",
        "mypod1234",
        "pod",
        "podxyz",
        "cri-containerd-abc.scope",
        &format!("pod{}", "a".repeat(MAX_UID + 1)),
    ] {
        assert_eq!(pod_uid(other), None, "{other}");
    }
}

#[test]
fn the_worst_pods_first_with_their_class_and_resource_cgroupfs() {
    let t = Tree::new("cgroupfs");
    t.pod(&format!("node-x/kubepods/pod{UID1}"), 12.5, 1.0, 0.0);
    t.pod(
        &format!("node-x/kubepods/burstable/pod{UID2}"),
        0.5,
        0.0,
        40.0,
    );
    // Idle: not reported.
    t.pod(
        &format!("node-x/kubepods/besteffort/pod{UID3}"),
        0.0,
        0.0,
        0.0,
    );
    // Not a pod cgroup, stalling: not read.
    t.pod("node-x/kubepods/besteffort/other", 90.0, 0.0, 0.0);
    let got = stalls(&t.0, &cfg("cgroupRoot: /node-x\n"));
    let want = [
        (UID2, "burstable", "io", 40.0, Some(20.0)),
        (UID1, "guaranteed", "cpu", 12.5, None),
    ];
    let got: Vec<_> = got
        .iter()
        .map(|s| {
            (
                s.uid.as_str(),
                s.qos.as_str(),
                s.resource.as_str(),
                s.some_avg10,
                s.full_avg10,
            )
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn systemd_slices_and_a_bounded_report() {
    let t = Tree::new("systemd");
    let slice = "kubepods.slice/kubepods-besteffort.slice";
    for i in 0..(MAX_REPORTED + 2) {
        let uid = format!("{i:08}-0000-0000-0000-000000000000");
        let name = format!("kubepods-besteffort-pod{}.slice", uid.replace('-', "_"));
        t.pod(&format!("{slice}/{name}"), 0.0, i as f64 + 1.0, 0.0);
    }
    let got = stalls(&t.0, &cfg("cgroupDriver: systemd\n"));
    assert_eq!(got.len(), MAX_REPORTED);
    assert_eq!(
        got[0].uid,
        format!("{:08}-0000-0000-0000-000000000000", MAX_REPORTED + 1)
    );
    assert!(got
        .iter()
        .all(|s| s.qos == "besteffort" && s.resource == "memory"));
    assert!(got.windows(2).all(|w| w[0].some_avg10 >= w[1].some_avg10));
    // The same pods under a cgroupfs configuration are not found: the names follow the driver.
    assert!(stalls(&t.0, &cfg("cgroupDriver: cgroupfs\n")).is_empty());
}

#[test]
fn a_systemd_root_slice_prefixes_the_kubelets_slices() {
    let c = cfg("cgroupDriver: systemd\ncgroupRoot: /node.slice\n");
    let dirs: Vec<String> = qos_dirs(&c).into_iter().map(|(_, d)| d).collect();
    assert_eq!(
        dirs,
        [
            "node.slice/node-kubepods.slice",
            "node.slice/node-kubepods.slice/node-kubepods-burstable.slice",
            "node.slice/node-kubepods.slice/node-kubepods-besteffort.slice",
        ]
    );
    let flat = cfg("cgroupsPerQOS: false\ncgroupRoot: /pods\n");
    assert_eq!(qos_dirs(&flat), [("", "pods".to_string())]);
}
