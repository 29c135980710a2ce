use super::*;

fn policy(allow: &[&str], slices: &[&str], dir: &std::path::Path) -> Policy {
    Policy {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        slices: slices.iter().map(|s| s.to_string()).collect(),
        namespaces: ["default".to_string()].into(),
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
            let got = p.decide("default", &a, &node, &host()).unwrap();
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
    let e = p.decide("default", &a, &node, &host()).unwrap_err();
    assert!(
        e.contains("not applied on this node") && e.contains("IOWeight"),
        "{e}"
    );
    p.on_refused = OnRefused::Log;
    let ok = p.decide("default", &a, &node, &host()).unwrap();
    assert_eq!(ok.unapplied.len(), 1, "{ok:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn refusals_name_the_annotation() {
    let d = tmp("refuse");
    let p = policy(&["CPUWeight"], &[], &d);
    let e = p
        .decide(
            "default",
            &ann(&[("bulkhead.io/MemoryMax", "1G")]),
            &v2(),
            &host(),
        )
        .unwrap_err();
    assert!(
        e.contains("bulkhead.io/MemoryMax") && e.contains("not allowed"),
        "{e}"
    );
    let e = p
        .decide(
            "default",
            &ann(&[("bulkhead.io/Bogus", "1")]),
            &v2(),
            &host(),
        )
        .unwrap_err();
    assert!(
        e.contains("bulkhead.io/Bogus") && e.contains("unknown"),
        "{e}"
    );
    // The plan file's own checks, with its message.
    let e = p
        .decide(
            "default",
            &ann(&[("bulkhead.io/CPUWeight", "0")]),
            &v2(),
            &host(),
        )
        .unwrap_err();
    assert!(e.contains("CPUWeight"), "{e}");
    let e = p
        .decide(
            "default",
            &ann(&[("bulkhead.io/CPUWeight", "x\"\n[slice.y]")]),
            &v2(),
            &host(),
        )
        .unwrap_err();
    assert!(e.starts_with("refused"), "{e}");
    // No plan applied: a slice cannot be taken.
    let e = policy(&["CPUWeight"], &["db-helper"], &d)
        .decide(
            "default",
            &ann(&[("bulkhead.io/slice", "db-helper")]),
            &v2(),
            &host(),
        )
        .unwrap_err();
    assert!(e.contains("no plan is applied"), "{e}");
    let p2 = policy(&[], &["db-server"], &d);
    let e = p2
        .decide(
            "default",
            &ann(&[("bulkhead.io/slice", "db-helper")]),
            &v2(),
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
        .decide("default", &ann(&[("a/b", "c")]), &v2(), &host())
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
    let p = policy(&[], &["db-helper", "nope"], &d);
    let node = v2();
    let r = p
        .decide(
            "default",
            &ann(&[("bulkhead.io/slice", "db-helper")]),
            &node,
            &host(),
        )
        .unwrap();
    let want = library(
        "CPUWeight = \"idle\"\nIOWeight = 20\nMemoryMax = \"1G\"\n",
        &node,
    );
    assert_eq!(r.adjust, want.oci);
    assert_eq!(r.writes, want.writes);
    assert_eq!(r.adjust.memory_limit, Some(1 << 30));
    let e = p
        .decide(
            "default",
            &ann(&[("bulkhead.io/slice", "nope")]),
            &v2(),
            &host(),
        )
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

/// A plan with a server slice that outweighs everything and a helper slice that yields.
fn applied_plan(name: &str) -> PathBuf {
    let d = tmp(name);
    std::fs::write(
        d.join("state.json"),
        r#"{"plan": "redis", "generation": 1, "created": []}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("plan.toml"),
        "[slice.db-server]\nCPUWeight = 1000\nIOWeight = 1000\n\
         [slice.db-helper]\nCPUWeight = \"idle\"\nIOWeight = 20\n",
    )
    .unwrap();
    d
}

/// Issue 40 item 5, as a pod author would try it: with the chart's defaults (no slice
/// listed) no slice may be taken, the server's least of all, and the refusal says how the
/// operator allows slices.
#[test]
fn no_slice_may_be_taken_by_default() {
    let d = applied_plan("deny");
    let p = policy(&["CPUWeight"], &[], &d);
    for slice in ["db-server", "db-helper"] {
        let e = p
            .decide("default", &ann(&[(SLICE, slice)]), &v2(), &host())
            .unwrap_err();
        assert!(
            e.contains(&format!("{SLICE}={slice}"))
                && e.contains("no slice may be taken")
                && e.contains("nri.slices")
                && e.contains("--slice"),
            "{e}"
        );
    }
    // Listed: only what is listed.
    let p = policy(&[], &["db-helper"], &d);
    assert!(p
        .decide("default", &ann(&[(SLICE, "db-helper")]), &v2(), &host())
        .is_ok());
    let e = p
        .decide("default", &ann(&[(SLICE, "db-server")]), &v2(), &host())
        .unwrap_err();
    assert!(
        e.contains("not a slice pods may take (allowed: db-helper"),
        "{e}"
    );
    // Under `log` a refusal is the same refusal (the stub applies nothing and reports it).
    let mut p = policy(&[], &[], &d);
    p.on_refused = OnRefused::Log;
    assert!(p
        .decide("default", &ann(&[(SLICE, "db-server")]), &v2(), &host())
        .is_err());
    // A wildcard is no slice name.
    assert!(policy(&[], &["*"], &d).validate().is_err());
    assert!(policy(&[], &["db-helper"], &d).validate().is_ok());
    std::fs::remove_dir_all(&d).unwrap();
}

/// Namespaces are the unit of trust: a pod of a namespace the operator did not list gets
/// nothing, whatever it asks; "*" lists every namespace; no list is no namespace.
#[test]
fn annotations_only_from_listed_namespaces() {
    let d = applied_plan("ns");
    let idle = ann(&[("bulkhead.io/CPUWeight", "idle"), (SLICE, "db-helper")]);
    let mut p = policy(&["CPUWeight"], &["db-helper"], &d);
    p.namespaces = ["team-a".to_string()].into();
    assert!(p.decide("team-a", &idle, &v2(), &host()).is_ok());
    let e = p.decide("team-b", &idle, &v2(), &host()).unwrap_err();
    assert!(
        e.contains("\"team-b\"")
            && e.contains("bulkhead.io/CPUWeight")
            && e.contains(SLICE)
            && e.contains("team-a")
            && e.contains("nri.namespaces"),
        "{e}"
    );
    // The default: none.
    p.namespaces.clear();
    let e = p.decide("team-a", &idle, &v2(), &host()).unwrap_err();
    assert!(e.contains("allows namespaces: none"), "{e}");
    // A pod without annotations of ours is nobody's business, listed or not.
    assert_eq!(
        p.decide("team-a", &ann(&[("a/b", "c")]), &v2(), &host()),
        Ok(Decision::default())
    );
    // "*": every namespace.
    p.namespaces = [ANY_NAMESPACE.to_string()].into();
    assert!(p.validate().is_ok());
    for ns in ["team-a", "team-b", "kube-system"] {
        assert!(p.decide(ns, &idle, &v2(), &host()).is_ok(), "{ns}");
    }
    assert_eq!(p.namespaces_text(), "every namespace");
    for bad in ["", "Team", "a_b", "-a", "a/b"] {
        p.namespaces = [bad.to_string()].into();
        assert!(p.validate().is_err(), "{bad:?}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Issue 40 item 5's second half: a value that counts between siblings goes on the pod's own
/// cgroup only when it does not raise the pod above a fresh cgroup (idle, a lower I/O
/// weight); a higher one stays on the container, and the decision says so.
#[test]
fn a_pod_is_never_raised_above_the_default() {
    let d = applied_plan("raise");
    let mut p = policy(&["IOWeight", "CPUWeight"], &["db-server", "db-helper"], &d);
    for version in [container::Version::V2, container::Version::V1] {
        let node = Node::uniform(version, caps(true));
        // The server's slice: its weights on the container, nothing on the pod.
        let r = p
            .decide("default", &ann(&[(SLICE, "db-server")]), &node, &host())
            .unwrap();
        let pod: Vec<&Write> = r.writes.iter().filter(|w| w.pod).collect();
        assert!(pod.is_empty(), "{version:?}: {r:?}");
        let full = library("CPUWeight = 1000\nIOWeight = 1000\n", &node);
        assert!(full.writes.iter().any(|w| w.pod && w.raises()), "{full:?}");
        // The container keeps each value the pod does not get.
        for w in full.writes.iter().filter(|w| w.pod) {
            let on_container = r.writes.iter().any(|c| !c.pod && c.file == w.file)
                || r.adjust.unified.contains_key(&w.file);
            assert!(on_container, "{version:?}: {} {r:?}", w.file);
            assert!(
                r.notes.iter().any(|n| n.contains(&w.file)
                    && n.contains("container only")
                    && n.starts_with("bulkhead.io/slice=db-server")),
                "{version:?}: {:?}",
                r.notes
            );
        }
        assert!(r.unapplied.is_empty(), "{r:?}");
        // The same weight as a directive of the pod's own: the same rule.
        let r = p
            .decide(
                "default",
                &ann(&[("bulkhead.io/IOWeight", "10000")]),
                &node,
                &host(),
            )
            .unwrap();
        assert!(r.writes.iter().all(|w| !w.pod), "{version:?}: {r:?}");
        assert!(!r.notes.is_empty(), "{r:?}");
        // The helper's slice lowers: on the pod too.
        let r = p
            .decide("default", &ann(&[(SLICE, "db-helper")]), &node, &host())
            .unwrap();
        let want = library("CPUWeight = \"idle\"\nIOWeight = 20\n", &node);
        assert_eq!(r.writes, want.writes, "{version:?}");
        assert!(r.writes.iter().any(|w| w.pod), "{r:?}");
        // Under fail, a value kept off the pod is no refusal: the container has it.
        p.on_refused = OnRefused::Fail;
        assert!(p
            .decide("default", &ann(&[(SLICE, "db-server")]), &node, &host())
            .is_ok());
    }
    std::fs::remove_dir_all(&d).unwrap();
}

mod pending {
    use super::super::events::Events;
    use super::super::stub::{handle, Envelope, Pending};
    use super::*;
    use std::time::{Duration, Instant};

    fn envelope(seq: u64, event: &str, id: &str) -> Envelope {
        serde_json::from_value(serde_json::json!({
            "seq": seq, "event": event, "id": id, "namespace": "default", "pod": "p",
            "container": "c", "cgroupsPath": "/nowhere/kubepods/pod1/abc",
            "annotations": {"bulkhead.io/CPUWeight": "idle"},
        }))
        .unwrap()
    }

    /// A decision with one file to write after creation.
    fn with_writes() -> Result<Decision, String> {
        Ok(Decision {
            writes: vec![Write {
                controller: "cpu".into(),
                file: "x".into(),
                value: "1".into(),
                pod: false,
            }],
            ..Default::default()
        })
    }

    fn log_policy() -> Policy {
        let mut p = policy(&["CPUWeight"], &[], &std::env::temp_dir());
        p.on_refused = OnRefused::Log;
        p
    }

    /// Issue 40 item 10: a container created and removed without a start leaves nothing
    /// behind; `remove` is answered like any request, with nothing.
    #[test]
    fn remove_drops_a_container_that_never_started() {
        let (p, ev) = (log_policy(), Events::off());
        let mut pending = Pending::default();
        let t = Instant::now();
        let a = handle(&p, &ev, envelope(1, "create", "a"), &mut pending, t, |_| {
            with_writes()
        });
        assert_eq!(a["post"], true, "{a}");
        assert_eq!(pending.len(), 1);
        let a = handle(&p, &ev, envelope(2, "remove", "a"), &mut pending, t, |_| {
            panic!("a removal decides nothing")
        });
        assert_eq!(a, serde_json::json!({"seq": 2}));
        assert_eq!(pending.len(), 0);
        // Unknown, or removed twice: the same answer.
        let a = handle(
            &p,
            &ev,
            envelope(3, "remove", "a"),
            &mut pending,
            t,
            |_| unreachable!(),
        );
        assert_eq!(a, serde_json::json!({"seq": 3}));
        // 4096 created and removed, then one more: it is held.
        for i in 0..5000u64 {
            let id = format!("c{i}");
            handle(&p, &ev, envelope(i, "create", &id), &mut pending, t, |_| {
                with_writes()
            });
            handle(
                &p,
                &ev,
                envelope(i, "remove", &id),
                &mut pending,
                t,
                |_| unreachable!(),
            );
        }
        let a = handle(&p, &ev, envelope(9, "create", "z"), &mut pending, t, |_| {
            with_writes()
        });
        assert_eq!(a["post"], true, "{a}");
        assert_eq!(pending.len(), 1);
    }

    /// Issue 40 item 10: containers created and never started nor removed are forgotten
    /// after ten minutes, a bounded number per creation, so the map never fills for good.
    #[test]
    fn containers_never_started_age_out() {
        let (p, ev) = (log_policy(), Events::off());
        let mut pending = Pending::default();
        let t0 = Instant::now();
        for i in 0..4096u64 {
            let a = handle(
                &p,
                &ev,
                envelope(i, "create", &format!("old{i}")),
                &mut pending,
                t0,
                |_| with_writes(),
            );
            assert_eq!(a["post"], true);
        }
        assert_eq!(pending.len(), 4096);
        // Full, and none old enough: under log the container starts without its files.
        let a = handle(
            &p,
            &ev,
            envelope(1, "create", "new"),
            &mut pending,
            t0 + Duration::from_secs(60),
            |_| with_writes(),
        );
        assert!(a.get("post").is_none() && a.get("error").is_none(), "{a}");
        assert!(a.get("adjust").is_some(), "{a}");
        // Under fail it is refused.
        let mut fail = p.clone();
        fail.on_refused = OnRefused::Fail;
        let a = handle(
            &fail,
            &ev,
            envelope(2, "create", "new"),
            &mut pending,
            t0 + Duration::from_secs(60),
            |_| with_writes(),
        );
        assert!(a["error"].as_str().unwrap().contains("waiting"), "{a}");
        // Eleven minutes on: each creation forgets a bounded number of the old ones.
        let later = t0 + Duration::from_secs(660);
        let a = handle(
            &fail,
            &ev,
            envelope(3, "create", "new"),
            &mut pending,
            later,
            |_| with_writes(),
        );
        assert_eq!(a["post"], true, "{a}");
        let n = pending.len();
        assert!((4096 - 64..4096).contains(&n), "{n}");
        for i in 0..200u64 {
            handle(
                &p,
                &ev,
                envelope(10 + i, "create", &format!("n{i}")),
                &mut pending,
                later,
                |_| with_writes(),
            );
        }
        assert_eq!(pending.len(), 201, "every old one gone, the new ones held");
        // A forgotten container that starts after all is told, not silently bare: under
        // fail its start fails; under log it starts and a warning says why.
        let a = handle(
            &fail,
            &ev,
            envelope(4, "start", "old1"),
            &mut pending,
            later,
            |_| unreachable!(),
        );
        assert!(a["error"].as_str().unwrap().contains("forgotten"), "{a}");
        let a = handle(
            &p,
            &ev,
            envelope(5, "start", "old2"),
            &mut pending,
            later,
            |_| unreachable!(),
        );
        assert_eq!(a, serde_json::json!({"seq": 5}));
    }

    /// A refused pod under log: nothing applied, nothing held, the container starts.
    #[test]
    fn a_refusal_under_log_holds_nothing() {
        let (p, ev) = (log_policy(), Events::off());
        let mut pending = Pending::default();
        let a = handle(
            &p,
            &ev,
            envelope(1, "create", "a"),
            &mut pending,
            Instant::now(),
            |_| Err("refused: bulkhead.io/slice=db-server: no slice may be taken".into()),
        );
        assert_eq!(a, serde_json::json!({"seq": 1}));
        assert_eq!(pending.len(), 0);
        let mut fail = p.clone();
        fail.on_refused = OnRefused::Fail;
        let a = handle(
            &fail,
            &ev,
            envelope(2, "create", "a"),
            &mut pending,
            Instant::now(),
            |_| Err("refused: x".into()),
        );
        assert_eq!(a["error"], "bulkhead: refused: x");
    }
}
