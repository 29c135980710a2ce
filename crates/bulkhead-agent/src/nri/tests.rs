use super::*;

fn policy(allow: &[&str], slices: &[&str], dir: &std::path::Path) -> Policy {
    Policy {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        slices: slices.iter().map(|s| s.to_string()).collect(),
        state_dir: dir.to_path_buf(),
        on_refused: OnRefused::Fail,
    }
}

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn host() -> Host {
    Host::detect()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bulkhead-nri-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn caps(bfq: bool) -> container::Caps {
    container::Caps {
        cpu_idle: true,
        bfq,
        bfq_devices: if bfq { vec!["sda".into()] } else { vec![] },
        ..Default::default()
    }
}

fn v2() -> Node {
    Node::uniform(container::Version::V2, caps(true))
}

/// The slice the library maps, from the same directives.
fn library(directives: &str, node: &Node) -> container::Resources {
    let plan = Plan::parse(&format!("[slice.pod]\n{directives}"), None).unwrap();
    let r = plan.resolve(&host()).unwrap();
    container::resources(&r.slices[0], node)
}

/// The plugin decides nothing of its own: every layout and capability set gets exactly the
/// library's mapping of the same directives (the one `apply` uses), and what the node does not
/// apply is said, not written.
#[test]
fn annotations_get_the_librarys_mapping_on_every_node() {
    let d = tmp("map");
    let mut p = policy(&["CPUWeight", "MemoryHigh", "IOWeight"], &[], &d);
    p.on_refused = OnRefused::Log;
    let a = ann(&[
        ("bulkhead.io/CPUWeight", "idle"),
        ("bulkhead.io/MemoryHigh", "512M"),
        ("bulkhead.io/IOWeight", "50"),
        ("other.io/x", "ignored"),
    ]);
    let same = "CPUWeight = \"idle\"\nMemoryHigh = \"512M\"\nIOWeight = 50\n";
    for version in [container::Version::V2, container::Version::V1] {
        for bfq in [true, false] {
            let node = Node::uniform(version, caps(bfq));
            let got = p.decide(&a, &node, &host()).unwrap();
            let want = library(same, &node);
            assert_eq!(got.adjust, want.oci, "{version:?} bfq={bfq}");
            assert_eq!(got.writes, want.writes, "{version:?} bfq={bfq}");
            let unapplied: Vec<String> = want.unapplied().map(|d| d.message.clone()).collect();
            assert_eq!(got.unapplied, unapplied, "{version:?} bfq={bfq}");
            assert!(
                !got.writes.is_empty(),
                "idle counts between siblings: the pod too"
            );
            assert!(got.writes.iter().any(|w| w.pod));
            // Without BFQ (nor io.cost) the weight is a finding with its reason, not a write.
            if !bfq {
                assert!(
                    got.unapplied
                        .iter()
                        .any(|u| u.contains("IOWeight") && u.contains("BFQ")),
                    "{got:?}"
                );
            }
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Fail closed only when the operator says so: a directive the node cannot apply refuses the
/// container with its reason.
#[test]
fn on_refused_fail_refuses_what_the_node_cannot_apply() {
    let d = tmp("closed");
    let mut p = policy(&["IOWeight"], &[], &d);
    let a = ann(&[("bulkhead.io/IOWeight", "50")]);
    let node = Node::uniform(container::Version::V1, caps(false));
    let e = p.decide(&a, &node, &host()).unwrap_err();
    assert!(
        e.contains("not applied on this node") && e.contains("IOWeight"),
        "{e}"
    );
    p.on_refused = OnRefused::Log;
    let ok = p.decide(&a, &node, &host()).unwrap();
    assert_eq!(ok.unapplied.len(), 1, "{ok:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn refusals_name_the_annotation() {
    let d = tmp("refuse");
    let p = policy(&["CPUWeight"], &[], &d);
    let e = p
        .decide(&ann(&[("bulkhead.io/MemoryMax", "1G")]), &v2(), &host())
        .unwrap_err();
    assert!(
        e.contains("bulkhead.io/MemoryMax") && e.contains("not allowed"),
        "{e}"
    );
    let e = p
        .decide(&ann(&[("bulkhead.io/Bogus", "1")]), &v2(), &host())
        .unwrap_err();
    assert!(
        e.contains("bulkhead.io/Bogus") && e.contains("unknown"),
        "{e}"
    );
    // The plan file's own checks, with its message.
    let e = p
        .decide(&ann(&[("bulkhead.io/CPUWeight", "0")]), &v2(), &host())
        .unwrap_err();
    assert!(e.contains("CPUWeight"), "{e}");
    let e = p
        .decide(
            &ann(&[("bulkhead.io/CPUWeight", "x\"\n[slice.y]")]),
            &v2(),
            &host(),
        )
        .unwrap_err();
    assert!(e.starts_with("refused"), "{e}");
    // No plan applied: a slice cannot be taken.
    let e = p
        .decide(&ann(&[("bulkhead.io/slice", "db-helper")]), &v2(), &host())
        .unwrap_err();
    assert!(e.contains("no plan is applied"), "{e}");
    let p2 = policy(&[], &["db-server"], &d);
    let e = p2
        .decide(&ann(&[("bulkhead.io/slice", "db-helper")]), &v2(), &host())
        .unwrap_err();
    assert!(e.contains("not a slice pods may take"), "{e}");
    assert!(Policy {
        allow: ["AllowedCPUs".to_string()].into(),
        ..p.clone()
    }
    .validate()
    .is_err());
    // Nothing of ours: nothing to do.
    let none = p.decide(&ann(&[("a/b", "c")]), &v2(), &host()).unwrap();
    assert_eq!(none, Decision::default());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_slice_of_the_applied_plan() {
    let d = tmp("slice");
    std::fs::write(
        d.join("state.json"),
        r#"{"plan": "redis", "generation": 1, "created": []}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("plan.toml"),
        "[slice.db-helper]\nCPUWeight = \"idle\"\nIOWeight = 20\nMemoryMax = \"1G\"\n",
    )
    .unwrap();
    let p = policy(&[], &[], &d);
    let node = v2();
    let r = p
        .decide(&ann(&[("bulkhead.io/slice", "db-helper")]), &node, &host())
        .unwrap();
    let want = library(
        "CPUWeight = \"idle\"\nIOWeight = 20\nMemoryMax = \"1G\"\n",
        &node,
    );
    assert_eq!(r.adjust, want.oci);
    assert_eq!(r.writes, want.writes);
    assert_eq!(r.adjust.memory_limit, Some(1 << 30));
    let e = p
        .decide(&ann(&[("bulkhead.io/slice", "nope")]), &v2(), &host())
        .unwrap_err();
    assert!(e.contains("has no slice nope"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn cgroup_dirs_from_the_runtime() {
    assert_eq!(
        cgroup_dir("/k/kubepods/besteffort/pod1/abc"),
        Some(PathBuf::from("k/kubepods/besteffort/pod1/abc"))
    );
    assert_eq!(
        cgroup_dir("kubepods-besteffort-pod1.slice:cri-containerd:abc"),
        Some(PathBuf::from(
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-abc.scope"
        ))
    );
    for bad in [
        "/a/../b",
        "/a//b",
        "relative/path",
        "",
        "/a/b c",
        "x.slice:p",
    ] {
        assert_eq!(cgroup_dir(bad), None, "{bad}");
    }
}
