//! The container mapping on every layout runc knows (v2; v1, which a hybrid host is to
//! runc) against every capability set that changes it: no BFQ, no io.cost, no cpu.idle.

use super::*;
use crate::layout::Layout;
use bulkhead_plan::{Plan, SliceName};
use bulkhead_sys::host::Host;
use bulkhead_sys::units::IdSet;

fn host() -> Host {
    Host {
        memory: 16 << 30,
        cpus: IdSet((0..16).collect()),
        mem_nodes: IdSet([0].into_iter().collect()),
        hugepage_sizes: vec![2 << 20],
        tasks_max: 4_194_304,
        page_size: 4096,
        devices: Default::default(),
    }
}

fn slice(directives: &str) -> ResolvedSlice {
    let p = Plan::parse(&format!("[slice.pod]\n{directives}"), None)
        .unwrap()
        .resolve(&host())
        .unwrap();
    p.slice(&SliceName::parse("pod").unwrap()).unwrap().clone()
}

/// Every capability a recent kernel may have.
fn full() -> Caps {
    Caps {
        cpu_idle: true,
        bfq: true,
        bfq_devices: vec!["sda".into()],
        io_cost: false,
        io_latency: false,
        memsw: true,
        hugetlb_rsvd: true,
        swap_v2: true,
        bfq_module: true,
        sched_ext: None,
        io_v2: true,
    }
}

fn no_bfq() -> Caps {
    Caps {
        bfq: false,
        bfq_devices: vec![],
        ..full()
    }
}

const ALL: &str = "CPUWeight = \"idle\"\nCPUQuota = \"50%\"\nMemoryHigh = \"512M\"\nMemoryMax = \"1G\"\nIOWeight = 50\nTasksMax = 64\n";

fn files(r: &Resources) -> Vec<(bool, &str, &str)> {
    r.writes
        .iter()
        .map(|w| (w.pod, w.file.as_str(), w.value.as_str()))
        .collect()
}

fn says(r: &Resources, what: &str) -> bool {
    r.unapplied().any(|d| d.message.contains(what))
}

#[test]
fn v2_with_bfq_sets_unified_keys_and_the_pod() {
    let r = resources(&slice(ALL), &Node::uniform(Version::V2, full()));
    assert_eq!(r.oci.unified["cpu.idle"], "1");
    assert_eq!(r.oci.unified["memory.high"], (512u64 << 20).to_string());
    assert_eq!(r.oci.unified["io.bfq.weight"], "default 50");
    assert!(!r.oci.unified.contains_key("io.weight"), "io.cost is off");
    assert_eq!(
        (r.oci.cpu_quota, r.oci.cpu_period),
        (Some(50_000), Some(100_000))
    );
    assert_eq!(r.oci.memory_limit, Some(1 << 30));
    assert_eq!(r.oci.pids_limit, Some(64));
    assert_eq!(r.oci.cpu_shares, None);
    assert_eq!(
        files(&r),
        [
            (true, "cpu.idle", "1"),
            (true, "io.bfq.weight", "default 50")
        ]
    );
    assert_eq!(r.unapplied().count(), 0, "{:?}", r.findings);
}

#[test]
fn v2_with_io_cost_and_no_bfq_sets_io_weight() {
    let caps = Caps {
        io_cost: true,
        ..no_bfq()
    };
    let r = resources(&slice("IOWeight = 50\n"), &Node::uniform(Version::V2, caps));
    assert_eq!(r.oci.unified["io.weight"], "default 50");
    assert_eq!(files(&r), [(true, "io.weight", "default 50")]);
    assert_eq!(r.unapplied().count(), 0, "{:?}", r.findings);
}

#[test]
fn v2_without_bfq_or_io_cost_is_a_finding_not_a_write() {
    let r = resources(&slice(ALL), &Node::uniform(Version::V2, no_bfq()));
    assert!(!r.oci.unified.keys().any(|k| k.starts_with("io.")), "{r:?}");
    assert!(r.writes.iter().all(|w| !w.file.starts_with("io.")), "{r:?}");
    assert!(says(&r, "IOWeight is not applied"), "{:?}", r.findings);
    // The rest is applied as before.
    assert_eq!(r.oci.unified["cpu.idle"], "1");
    assert_eq!(r.oci.memory_limit, Some(1 << 30));
}

#[test]
fn v1_with_bfq_writes_after_creation() {
    let r = resources(&slice(ALL), &Node::uniform(Version::V1, full()));
    assert!(r.oci.unified.is_empty(), "runc refuses unified keys on v1");
    assert_eq!(
        (r.oci.cpu_quota, r.oci.cpu_period),
        (Some(50_000), Some(100_000))
    );
    assert_eq!(r.oci.memory_limit, Some(1 << 30));
    assert_eq!(r.oci.pids_limit, Some(64));
    assert_eq!(
        files(&r),
        [
            (false, "cpu.idle", "1"),
            (true, "cpu.idle", "1"),
            (false, "blkio.bfq.weight", "50"),
            (true, "blkio.bfq.weight", "50")
        ]
    );
    assert!(says(&r, "MemoryHigh is not applied"), "{:?}", r.findings);
}

/// The kernel of this project's own machines: hybrid cgroups, no BFQ (issue 38: a pod
/// annotated IOWeight went into CrashLoopBackOff on `blkio.bfq.weight: No such file`).
#[test]
fn v1_without_bfq_writes_no_bfq_file() {
    let r = resources(&slice(ALL), &Node::uniform(Version::V1, no_bfq()));
    assert!(r.writes.iter().all(|w| !w.file.contains("bfq")), "{r:?}");
    assert!(says(&r, "IOWeight is not applied"), "{:?}", r.findings);
    assert!(r.writes.iter().any(|w| w.file == "cpu.idle"));
}

#[test]
fn without_cpu_idle_the_lowest_weight_is_used() {
    let caps = Caps {
        cpu_idle: false,
        ..full()
    };
    let v2 = resources(
        &slice("CPUWeight = \"idle\"\n"),
        &Node::uniform(Version::V2, caps.clone()),
    );
    assert_eq!(v2.oci.unified["cpu.weight"], "1");
    assert!(
        says(&v2, "CPUWeight=idle is not applied"),
        "{:?}",
        v2.findings
    );
    let v1 = resources(
        &slice("CPUWeight = \"idle\"\n"),
        &Node::uniform(Version::V1, caps),
    );
    assert_eq!(v1.oci.cpu_shares, Some(10));
    assert!(v1.writes.is_empty(), "{v1:?}");
}

#[test]
fn weights_are_converted_as_for_slices() {
    let v1 = resources(
        &slice("CPUWeight = 50\n"),
        &Node::uniform(Version::V1, full()),
    );
    assert_eq!(v1.oci.cpu_shares, Some(512));
    let v2 = resources(
        &slice("CPUWeight = 50\n"),
        &Node::uniform(Version::V2, full()),
    );
    assert_eq!(v2.oci.unified["cpu.weight"], "50");
    assert!(v2.writes.is_empty());
}

#[test]
fn what_no_container_holds_is_said() {
    let r = resources(
        &slice("AllowedCPUs = \"0\"\nCPUSchedulingSliceSec = \"1ms\"\n"),
        &Node::uniform(Version::V2, full()),
    );
    assert!(says(&r, "AllowedCPUs"), "{:?}", r.findings);
    assert!(says(&r, "CPUSchedulingSliceSec"), "{:?}", r.findings);
    assert!(r.writes.is_empty() && r.oci == Oci::default(), "{r:?}");
}

#[test]
fn a_hybrid_host_is_v1_to_runc() {
    let mi = "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
              31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
              32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
              33 25 0:29 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio\n\
              34 25 0:30 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
    let node = Node::of(
        &Layout::from_mountinfo(mi, std::path::Path::new("/nonexistent")),
        no_bfq(),
    );
    assert!(!node.is_v2());
    assert_eq!(node.versions.len(), 4, "{node:?}");
    let v2 = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    let node = Node::of(
        &Layout::from_mountinfo(v2, std::path::Path::new("/nonexistent")),
        full(),
    );
    // No cgroup.controllers to read under /nonexistent: nothing to manage, and it says so.
    assert!(node.versions.is_empty());
    let r = resources(&slice("TasksMax = 10\n"), &node);
    assert!(
        says(&r, "pids directives are not applied"),
        "{:?}",
        r.findings
    );
}

fn w(file: &str, value: &str) -> Write {
    Write {
        controller: "cpu".into(),
        file: file.into(),
        value: value.into(),
        pod: true,
    }
}

/// What the NRI plugin may write on a pod's own cgroup: values at or below a fresh cgroup's.
#[test]
fn a_write_raises_only_above_the_default() {
    for (file, value, raises) in [
        ("cpu.idle", "1", false),
        ("cpu.idle", "0", false),
        ("cpu.idle", "2", true),
        ("io.weight", "default 20", false),
        ("io.weight", "default 100", false),
        ("io.weight", "default 101", true),
        ("io.weight", "8:0 1000", true),
        ("io.weight", "8:0 50", false),
        ("io.bfq.weight", "default 1000", true),
        ("blkio.bfq.weight", "20", false),
        ("blkio.bfq.weight", "100", false),
        ("blkio.bfq.weight", "190", true),
        ("blkio.bfq.weight_device", "8:0 190", true),
        ("blkio.bfq.weight_device", "8:0 10", false),
        ("blkio.bfq.weight_device", "8:0 default", false),
        ("cpu.weight", "10000", true),
        ("cpu.weight", "1", false),
        ("cpu.shares", "2", false),
        ("cpu.shares", "10240", true),
        // Unreadable, or a file whose direction is not known here: anything but the
        // default counts as raising.
        ("io.weight", "default lots", true),
        ("io.weight", "", true),
        ("memory.max", "max", false),
        ("memory.max", "1073741824", true),
        ("some.file", "1", true),
    ] {
        assert_eq!(w(file, value).raises(), raises, "{file} = {value:?}");
    }
    // What the mapping writes on the pod for a helper's slice lowers; for a server's it
    // raises.
    for caps in [
        full(),
        Caps {
            io_cost: true,
            ..no_bfq()
        },
    ] {
        for version in [Version::V1, Version::V2] {
            let node = Node::uniform(version, caps.clone());
            let low = resources(&slice("CPUWeight = \"idle\"\nIOWeight = 20\n"), &node);
            assert!(low.writes.iter().any(|w| w.pod), "{low:?}");
            assert!(low.writes.iter().all(|w| !w.raises()), "{low:?}");
            let high = resources(&slice("CPUWeight = 1000\nIOWeight = 1000\n"), &node);
            let pod: Vec<&Write> = high.writes.iter().filter(|w| w.pod).collect();
            if version == Version::V2 || caps.bfq {
                assert!(pod.iter().any(|w| w.raises()), "{version:?} {high:?}");
            }
        }
    }
}
