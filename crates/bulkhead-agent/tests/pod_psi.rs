//! A pod's stall from its real cgroup: a pod cgroup where the kubelet (cgroupfs driver) puts a
//! burstable pod, below a scratch cgroup root on the unified hierarchy, with two busy loops
//! pinned to one CPU inside (each waits for the CPU half the time); the agent's pod reading
//! (`pods::stalls`, what the BulkheadNode's `podStalls` holds) must name it, by UID, class
//! and resource, within a deadline. The kernel's PSI, not a file the test wrote.

use bulkhead_agent::kubelet::KubeletConfig;
use bulkhead_agent::pods;
use bulkhead_testkit::TestRoot;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const UID: &str = "5e0c2b1a-7d3f-4e6a-9b8c-0a1b2c3d4e5f";
/// PSI's avg10 is refreshed every 2 s; the loops make it climb at once.
const WITHIN: Duration = Duration::from_secs(30);

/// Busy loops, killed by PID when dropped (the root's drop kills what is left in it).
struct Loops(Vec<Child>);

impl Drop for Loops {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_pod_whose_tasks_wait_for_a_cpu_is_named_with_its_class_and_resource() {
    let problem = if !bulkhead_testkit::prereq::is_root() {
        Some("root (a cgroup on the unified hierarchy)")
    } else if !bulkhead_testkit::prereq::on_path("taskset") {
        Some("taskset (util-linux), to pin the loops to one CPU")
    } else {
        None
    };
    if !bulkhead_testkit::require(problem) {
        return;
    }
    let root = TestRoot::new();
    let Some(unified) = root.layout.unified.as_ref().map(|h| h.mount.clone()) else {
        bulkhead_testkit::prereq::missing("a cgroup2 mount (pure v1 has no per-cgroup PSI)");
        return;
    };
    let pod = unified
        .join(root.cgroup.trim_start_matches('/'))
        .join(format!("kubepods/burstable/pod{UID}"));
    std::fs::create_dir_all(&pod).unwrap_or_else(|e| panic!("mkdir {}: {e}", pod.display()));
    let procs = [pod.join("cgroup.procs")];
    let mut loops = Loops(Vec::new());
    for _ in 0..2 {
        let mut c = Command::new("taskset");
        c.args(["-c", "0", "sh", "-c", "while :; do :; done"])
            .stdin(Stdio::null());
        loops.0.push(
            bulkhead_testkit::groups::spawn_joined(&mut c, &procs).expect("start a busy loop"),
        );
    }
    let cfg = KubeletConfig::parse(&format!("cgroupRoot: {}\n", root.cgroup)).unwrap();
    let t0 = Instant::now();
    let seen = loop {
        let stalls = pods::stalls(&unified, &cfg);
        if let Some(s) = stalls.into_iter().find(|s| s.uid == UID) {
            break s;
        }
        assert!(
            t0.elapsed() < WITHIN,
            "the pod's CPU stall was not reported within {WITHIN:?} (cpu.pressure: {:?})",
            std::fs::read_to_string(pod.join("cpu.pressure"))
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(seen.qos, "burstable");
    assert_eq!(seen.resource, "cpu", "{seen:?}");
    assert!(seen.some_avg10 > 0.0, "{seen:?}");
    eprintln!(
        "pod {UID}: {} {:.1}% after {:.1} s",
        seen.resource,
        seen.some_avg10,
        t0.elapsed().as_secs_f64()
    );
}
