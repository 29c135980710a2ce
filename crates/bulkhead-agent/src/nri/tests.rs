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

#[test]
fn directives_by_annotation_on_v2_and_v1() {
    let d = tmp("v2");
    let p = policy(&["CPUWeight", "MemoryHigh", "IOWeight"], &[], &d);
    let a = ann(&[
        ("bulkhead.io/CPUWeight", "idle"),
        ("bulkhead.io/MemoryHigh", "512M"),
        ("bulkhead.io/IOWeight", "50"),
        ("other.io/x", "ignored"),
    ]);
    let v2 = p.decide(&a, Cgroups::V2, &host()).unwrap();
    assert_eq!(v2.adjust.unified["cpu.idle"], "1");
    assert_eq!(v2.adjust.unified["memory.high"], (512u64 << 20).to_string());
    assert_eq!(v2.adjust.unified["io.weight"], "default 50");
    // The pod's own cgroup too: idle and IO weights count between siblings.
    let files =
        |d: &Decision| -> Vec<(bool, &str)> { d.writes.iter().map(|w| (w.pod, w.file)).collect() };
    assert_eq!(files(&v2), [(true, "cpu.idle"), (true, "io.weight")]);
    let v1 = p.decide(&a, Cgroups::V1, &host()).unwrap();
    assert!(
        v1.adjust.unified.is_empty(),
        "runc refuses unified keys on v1"
    );
    assert_eq!(
        files(&v1),
        [
            (false, "cpu.idle"),
            (true, "cpu.idle"),
            (false, "blkio.bfq.weight"),
            (true, "blkio.bfq.weight")
        ]
    );
    assert!(v1.notes.iter().any(|n| n.contains("MemoryHigh")));
    let w = p
        .decide(
            &ann(&[("bulkhead.io/CPUWeight", "50")]),
            Cgroups::V1,
            &host(),
        )
        .unwrap();
    assert_eq!(w.adjust.cpu_shares, Some(512));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn refusals_name_the_annotation() {
    let d = tmp("refuse");
    let p = policy(&["CPUWeight"], &[], &d);
    let e = p
        .decide(
            &ann(&[("bulkhead.io/MemoryMax", "1G")]),
            Cgroups::V2,
            &host(),
        )
        .unwrap_err();
    assert!(
        e.contains("bulkhead.io/MemoryMax") && e.contains("not allowed"),
        "{e}"
    );
    let e = p
        .decide(&ann(&[("bulkhead.io/Bogus", "1")]), Cgroups::V2, &host())
        .unwrap_err();
    assert!(
        e.contains("bulkhead.io/Bogus") && e.contains("unknown"),
        "{e}"
    );
    // The plan file's own checks, with its message.
    let e = p
        .decide(
            &ann(&[("bulkhead.io/CPUWeight", "0")]),
            Cgroups::V2,
            &host(),
        )
        .unwrap_err();
    assert!(e.contains("CPUWeight"), "{e}");
    let e = p
        .decide(
            &ann(&[("bulkhead.io/CPUWeight", "x\"\n[slice.y]")]),
            Cgroups::V2,
            &host(),
        )
        .unwrap_err();
    assert!(e.starts_with("refused"), "{e}");
    // No plan applied: a slice cannot be taken.
    let e = p
        .decide(
            &ann(&[("bulkhead.io/slice", "db-helper")]),
            Cgroups::V2,
            &host(),
        )
        .unwrap_err();
    assert!(e.contains("no plan is applied"), "{e}");
    let p2 = policy(&[], &["db-server"], &d);
    let e = p2
        .decide(
            &ann(&[("bulkhead.io/slice", "db-helper")]),
            Cgroups::V2,
            &host(),
        )
        .unwrap_err();
    assert!(e.contains("not a slice pods may take"), "{e}");
    assert!(Policy {
        allow: ["AllowedCPUs".to_string()].into(),
        ..p.clone()
    }
    .validate()
    .is_err());
    // Nothing of ours: nothing to do.
    let none = p
        .decide(&ann(&[("a/b", "c")]), Cgroups::V2, &host())
        .unwrap();
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
    let r = p
        .decide(
            &ann(&[("bulkhead.io/slice", "db-helper")]),
            Cgroups::V2,
            &host(),
        )
        .unwrap();
    assert_eq!(r.adjust.unified["cpu.idle"], "1");
    assert_eq!(r.adjust.unified["io.weight"], "default 20");
    assert_eq!(r.adjust.memory_limit, Some(1 << 30));
    let e = p
        .decide(&ann(&[("bulkhead.io/slice", "nope")]), Cgroups::V2, &host())
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
