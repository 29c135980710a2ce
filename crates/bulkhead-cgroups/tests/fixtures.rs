//! The directive -> cgroup file mapping, checked against fixture trees of the layouts real
//! hosts have: pure cgroup v2 under systemd, pure v1 with co-mounted controllers (Debian,
//! RHEL 7), and systemd's hybrid mode. Every tree lives in a temporary directory; the real
//! /sys/fs/cgroup is never read or written here.
//!
//! Marks are `trusted.*` extended attributes, so these tests run as root.

use bulkhead_cgroups::fs::{mark, Op};
use bulkhead_cgroups::layout::{Caps, Kind};
use bulkhead_cgroups::{Backend, CgroupFs, Layout, Version};
use bulkhead_plan::Plan;
use bulkhead_sys::host::{DevNum, Host};
use bulkhead_sys::units::IdSet;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

type Changes = bulkhead_cgroups::Changes<Op>;

// ---------------------------------------------------------------------------------------
// Fixture trees
// ---------------------------------------------------------------------------------------

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fake root directory holding cgroup mounts; removed on drop (also when a test panics).
struct Fixture {
    root: PathBuf,
    mountinfo: String,
}

impl Fixture {
    fn new(label: &str) -> Fixture {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let root = std::env::temp_dir().join(format!(
            "bulkhead-fixture-{label}-{}-{n}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        Fixture {
            root,
            mountinfo: String::new(),
        }
    }

    /// A mountinfo line that is not a cgroup (kept so the parser has to skip it).
    fn other_mount(&mut self, line: &str) {
        self.mountinfo.push_str(line);
        self.mountinfo.push('\n');
    }

    /// Add a mountinfo line and create its mount point with the root files a kernel has.
    fn mount(&mut self, line: &str, files: &[(&str, &str)]) -> PathBuf {
        self.other_mount(line);
        let point = line.split_whitespace().nth(4).expect("mount point field");
        let dir = self.root.join(point.trim_start_matches('/'));
        fs::create_dir_all(&dir).unwrap();
        for (name, content) in files {
            fs::write(dir.join(name), content).unwrap();
        }
        dir
    }

    /// `<root>/sys/fs/cgroup/<rel>`.
    fn cg(&self, rel: &str) -> PathBuf {
        let base = self.root.join("sys/fs/cgroup");
        if rel.is_empty() {
            base
        } else {
            base.join(rel)
        }
    }

    fn layout(&self) -> Layout {
        let mut layout = Layout::from_mountinfo(&self.mountinfo, &self.root);
        // Fixed capabilities: nothing may depend on this machine's disks or kernel.
        layout.caps = Some(Caps {
            cpu_idle: true,
            bfq: true,
            bfq_devices: vec![],
            io_cost: true,
            memsw: true,
            hugetlb_rsvd: true,
            swap_v2: true,
        });
        layout
    }

    fn backend(&self) -> CgroupFs {
        CgroupFs::new(self.layout(), "/").unwrap()
    }

    fn try_apply(&self, plan: &str) -> bulkhead_sys::Result<Changes> {
        let resolved = Plan::parse(plan, None)?.resolve(&host())?;
        self.backend().plan_apply(&resolved, Default::default())
    }

    /// Plan an apply; every operation must stay inside the fixture.
    fn apply(&self, plan: &str) -> Changes {
        let changes = self
            .try_apply(plan)
            .unwrap_or_else(|e| panic!("plan_apply failed: {e}"));
        for op in &changes.ops {
            for p in op_paths(op) {
                assert!(
                    p.starts_with(&self.root),
                    "{op} leaves the fixture {}",
                    self.root.display()
                );
            }
        }
        changes
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn host() -> Host {
    let mut h = Host {
        memory: 24 << 30,
        cpus: IdSet::parse("0-3").unwrap(),
        mem_nodes: IdSet::parse("0").unwrap(),
        hugepage_sizes: vec![2 << 20, 1 << 30],
        tasks_max: 32768,
        page_size: 4096,
        devices: Default::default(),
    };
    h.look_up_devices(["/"]);
    h
}

/// The disk behind `/`, as the plan's device directives resolve it.
fn root_disk() -> String {
    DevNum::resolve(Path::new("/")).unwrap().to_string()
}

/// `pct`% of the host's 24G, rounded down to whole pages as the kernel counts memory.
fn pct_of_ram(pct: u64) -> u64 {
    (24u64 << 30) * pct / 100 / 4096 * 4096
}

/// Files every v1 hierarchy root has.
const V1_COMMON: &[(&str, &str)] = &[
    ("cgroup.procs", "1\n"),
    ("tasks", "1\n"),
    ("cgroup.clone_children", "0\n"),
    ("cgroup.sane_behavior", "0\n"),
    ("notify_on_release", "0\n"),
    ("release_agent", "\n"),
];

const V1_CPU: &[(&str, &str)] = &[
    ("cpu.shares", "1024\n"),
    ("cpu.cfs_quota_us", "-1\n"),
    ("cpu.cfs_period_us", "100000\n"),
    ("cpu.rt_runtime_us", "950000\n"),
    ("cpu.rt_period_us", "1000000\n"),
    (
        "cpu.stat",
        "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
    ),
    ("cpuacct.usage", "81234567890\n"),
    (
        "cpuacct.usage_percpu",
        "20308641972 20308641972 20308641973 20308641973 \n",
    ),
    ("cpuacct.stat", "user 6512\nsystem 1710\n"),
];

const V1_CPUSET: &[(&str, &str)] = &[
    ("cpuset.cpus", "0-3\n"),
    ("cpuset.mems", "0\n"),
    ("cpuset.effective_cpus", "0-3\n"),
    ("cpuset.effective_mems", "0\n"),
    ("cpuset.cpu_exclusive", "1\n"),
    ("cpuset.mem_exclusive", "1\n"),
    ("cpuset.sched_load_balance", "1\n"),
    ("cpuset.memory_migrate", "0\n"),
];

const V1_MEMORY: &[(&str, &str)] = &[
    ("memory.limit_in_bytes", "9223372036854771712\n"),
    ("memory.memsw.limit_in_bytes", "9223372036854771712\n"),
    ("memory.soft_limit_in_bytes", "9223372036854771712\n"),
    ("memory.usage_in_bytes", "3063779328\n"),
    ("memory.memsw.usage_in_bytes", "3063779328\n"),
    ("memory.max_usage_in_bytes", "0\n"),
    ("memory.swappiness", "60\n"),
    ("memory.use_hierarchy", "1\n"),
    (
        "memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    ),
    ("memory.kmem.limit_in_bytes", "9223372036854771712\n"),
];

const V1_BLKIO: &[(&str, &str)] = &[
    ("blkio.throttle.read_bps_device", ""),
    ("blkio.throttle.write_bps_device", ""),
    ("blkio.throttle.read_iops_device", ""),
    ("blkio.throttle.write_iops_device", ""),
    ("blkio.throttle.io_service_bytes", "Total 0\n"),
    ("blkio.throttle.io_serviced", "Total 0\n"),
    ("blkio.reset_stats", ""),
];

const V1_HUGETLB: &[(&str, &str)] = &[
    ("hugetlb.2MB.limit_in_bytes", "9223372036854771712\n"),
    ("hugetlb.2MB.usage_in_bytes", "0\n"),
    ("hugetlb.2MB.max_usage_in_bytes", "0\n"),
    ("hugetlb.2MB.failcnt", "0\n"),
    ("hugetlb.2MB.rsvd.limit_in_bytes", "9223372036854771712\n"),
    ("hugetlb.2MB.rsvd.usage_in_bytes", "0\n"),
    ("hugetlb.1GB.limit_in_bytes", "9223372036854771712\n"),
    ("hugetlb.1GB.usage_in_bytes", "0\n"),
    ("hugetlb.1GB.max_usage_in_bytes", "0\n"),
    ("hugetlb.1GB.failcnt", "0\n"),
    ("hugetlb.1GB.rsvd.limit_in_bytes", "9223372036854771712\n"),
    ("hugetlb.1GB.rsvd.usage_in_bytes", "0\n"),
];

fn with_common(files: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    V1_COMMON.iter().chain(files).copied().collect()
}

/// A modern distribution under systemd: everything on one cgroup2 mount.
fn unified() -> Fixture {
    let mut f = Fixture::new("v2");
    f.other_mount("22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro");
    f.other_mount("24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw");
    f.mount(
        "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot",
        &[
            ("cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n"),
            ("cgroup.subtree_control", "cpu io memory pids\n"),
            ("cgroup.procs", "1\n2\n"),
            ("cgroup.threads", "1\n2\n"),
            ("cgroup.max.depth", "max\n"),
            ("cgroup.max.descendants", "max\n"),
            ("cgroup.stat", "nr_descendants 57\nnr_dying_descendants 0\n"),
            ("cgroup.pressure", "1\n"),
            ("cpu.stat", "usage_usec 81234567\nuser_usec 65123456\nsystem_usec 16111111\n"),
            ("cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            ("memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            ("io.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            ("memory.stat", "anon 0\nfile 0\n"),
            ("io.stat", ""),
            ("io.cost.qos", ""),
            ("io.cost.model", ""),
            ("cpuset.cpus.effective", "0-3\n"),
            ("cpuset.mems.effective", "0\n"),
            ("misc.capacity", ""),
        ],
    );
    f
}

/// The v1 controller mounts of a Debian 10 / RHEL 7 host (cpu,cpuacct and
/// net_cls,net_prio co-mounted), plus systemd's own named hierarchy.
fn add_v1_mounts(f: &mut Fixture) {
    let opts = "rw,nosuid,nodev,noexec,relatime";
    f.mount(
        &format!("26 25 0:23 / /sys/fs/cgroup/systemd {opts} shared:9 - cgroup cgroup rw,xattr,name=systemd"),
        &with_common(&[]),
    );
    f.mount(
        &format!("27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct {opts} shared:10 - cgroup cgroup rw,cpu,cpuacct"),
        &with_common(V1_CPU),
    );
    f.mount(
        &format!("28 25 0:25 / /sys/fs/cgroup/memory {opts} shared:11 - cgroup cgroup rw,memory"),
        &with_common(V1_MEMORY),
    );
    f.mount(
        &format!("29 25 0:26 / /sys/fs/cgroup/blkio {opts} shared:12 - cgroup cgroup rw,blkio"),
        &with_common(V1_BLKIO),
    );
    f.mount(
        &format!("30 25 0:27 / /sys/fs/cgroup/pids {opts} shared:13 - cgroup cgroup rw,pids"),
        &with_common(&[]),
    );
    f.mount(
        &format!("31 25 0:28 / /sys/fs/cgroup/cpuset {opts} shared:14 - cgroup cgroup rw,cpuset"),
        &with_common(V1_CPUSET),
    );
    f.mount(
        &format!("32 25 0:29 / /sys/fs/cgroup/hugetlb {opts} shared:15 - cgroup cgroup rw,hugetlb"),
        &with_common(V1_HUGETLB),
    );
    f.mount(
        &format!("33 25 0:30 / /sys/fs/cgroup/net_cls,net_prio {opts} shared:16 - cgroup cgroup rw,net_cls,net_prio"),
        &with_common(&[("net_cls.classid", "0\n"), ("net_prio.ifpriomap", "lo 0\n")]),
    );
    f.mount(
        &format!("34 25 0:31 / /sys/fs/cgroup/devices {opts} shared:17 - cgroup cgroup rw,devices"),
        &with_common(&[("devices.list", "a *:* rwm\n")]),
    );
    f.mount(
        &format!("35 25 0:32 / /sys/fs/cgroup/freezer {opts} shared:18 - cgroup cgroup rw,freezer"),
        &with_common(&[]),
    );
    f.mount(
        &format!(
            "36 25 0:33 / /sys/fs/cgroup/perf_event {opts} shared:19 - cgroup cgroup rw,perf_event"
        ),
        &with_common(&[]),
    );
    // systemd links the single names to the co-mounted hierarchies.
    for (link, target) in [
        ("cpu", "cpu,cpuacct"),
        ("cpuacct", "cpu,cpuacct"),
        ("net_cls", "net_cls,net_prio"),
        ("net_prio", "net_cls,net_prio"),
    ] {
        std::os::unix::fs::symlink(target, f.cg(link)).unwrap();
    }
}

fn v1_base(label: &str) -> Fixture {
    let mut f = Fixture::new(label);
    f.other_mount("22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro");
    f.other_mount("24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw");
    f.mount(
        "25 24 0:21 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755",
        &[],
    );
    f
}

/// Pure v1 (legacy).
fn legacy() -> Fixture {
    let mut f = v1_base("v1");
    add_v1_mounts(&mut f);
    f
}

/// systemd's hybrid mode: every controller on v1, plus an empty cgroup2 mount for
/// process tracking.
fn hybrid() -> Fixture {
    let mut f = v1_base("hybrid");
    f.mount(
        "37 25 0:34 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:20 - cgroup2 cgroup2 rw,nsdelegate",
        &[
            ("cgroup.controllers", ""),
            ("cgroup.subtree_control", ""),
            ("cgroup.procs", "1\n"),
            ("cgroup.threads", "1\n"),
            ("cgroup.max.depth", "max\n"),
            ("cgroup.max.descendants", "max\n"),
            ("cgroup.stat", "nr_descendants 40\nnr_dying_descendants 0\n"),
            ("cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            ("io.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            ("memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            ("cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n"),
        ],
    );
    add_v1_mounts(&mut f);
    f
}

// ---------------------------------------------------------------------------------------
// Reading operations
// ---------------------------------------------------------------------------------------

fn op_paths(op: &Op) -> Vec<&Path> {
    match op {
        Op::Mkdir { dir } | Op::Rmdir { dir } => vec![dir],
        Op::Write { file, .. } => vec![file],
        Op::Enable { dir, .. } | Op::Disable { dir, .. } => vec![dir],
        Op::Kill { dirs } => dirs.iter().map(PathBuf::as_path).collect(),
    }
}

/// Every value written to `file`, in order.
fn values(ops: &[Op], file: &Path) -> Vec<String> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Write { file: f, value, .. } if f == file => Some(value.clone()),
            _ => None,
        })
        .collect()
}

/// The only value written to `file`.
fn value(ops: &[Op], file: &Path) -> String {
    let v = values(ops, file);
    assert_eq!(
        v.len(),
        1,
        "one write to {} expected in {ops:#?}",
        file.display()
    );
    v[0].clone()
}

fn writes_in(ops: &[Op], dir: &Path) -> Vec<Op> {
    ops.iter()
        .filter(|op| matches!(op, Op::Write { file, .. } if file.parent() == Some(dir)))
        .cloned()
        .collect()
}

fn mkdirs(ops: &[Op]) -> Vec<PathBuf> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Mkdir { dir } => Some(dir.clone()),
            _ => None,
        })
        .collect()
}

fn enables(ops: &[Op]) -> BTreeSet<(PathBuf, String)> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Enable {
                dir, controller, ..
            } => Some((dir.clone(), controller.clone())),
            _ => None,
        })
        .collect()
}

fn index(ops: &[Op], want: &Op) -> usize {
    ops.iter()
        .position(|op| op == want)
        .unwrap_or_else(|| panic!("{want} not planned in {ops:#?}"))
}

/// Directories are created parents first, and nothing touches a new directory before
/// it exists.
fn assert_parents_first(ops: &[Op]) {
    for (i, op) in ops.iter().enumerate() {
        for p in op_paths(op) {
            for (j, earlier) in ops.iter().enumerate() {
                let Op::Mkdir { dir } = earlier else { continue };
                let inside = match op {
                    Op::Mkdir { .. } => p != dir && p.starts_with(dir),
                    _ => p.starts_with(dir),
                };
                if inside {
                    assert!(j < i, "{op} comes before mkdir {}", dir.display());
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// A small cgroup v2 kernel, to execute planned operations against a fixture
// ---------------------------------------------------------------------------------------

/// Files a new v2 cgroup has whatever the parent enables.
const V2_CORE: &[(&str, &str)] = &[
    ("cgroup.procs", ""),
    ("cgroup.threads", ""),
    ("cgroup.subtree_control", ""),
    ("cgroup.type", "domain\n"),
    ("cgroup.events", "populated 0\nfrozen 0\n"),
    ("cgroup.freeze", "0\n"),
    ("cgroup.kill", ""),
    ("cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n"),
];

/// Files a controller adds to a cgroup when its parent enables it, with a fresh cgroup's
/// values.
fn v2_controller_files(controller: &str) -> &'static [(&'static str, &'static str)] {
    match controller {
        "cpu" => &[
            ("cpu.weight", "100\n"),
            ("cpu.weight.nice", "0\n"),
            ("cpu.idle", "0\n"),
            ("cpu.max", "max 100000\n"),
            ("cpu.max.burst", "0\n"),
        ],
        "cpuset" => &[
            ("cpuset.cpus", "\n"),
            ("cpuset.mems", "\n"),
            ("cpuset.cpus.effective", "0-3\n"),
            ("cpuset.mems.effective", "0\n"),
            ("cpuset.cpus.partition", "member\n"),
        ],
        "memory" => &[
            ("memory.min", "0\n"),
            ("memory.low", "0\n"),
            ("memory.high", "max\n"),
            ("memory.max", "max\n"),
            ("memory.swap.max", "max\n"),
            ("memory.swap.high", "max\n"),
            ("memory.current", "0\n"),
        ],
        "io" => &[
            ("io.max", ""),
            ("io.weight", "default 100\n"),
            ("io.bfq.weight", "default 100\n"),
            ("io.latency", ""),
            ("io.stat", ""),
        ],
        "pids" => &[("pids.max", "max\n"), ("pids.current", "0\n")],
        "hugetlb" => &[
            ("hugetlb.2MB.max", "max\n"),
            ("hugetlb.2MB.rsvd.max", "max\n"),
            ("hugetlb.2MB.current", "0\n"),
            ("hugetlb.1GB.max", "max\n"),
            ("hugetlb.1GB.rsvd.max", "max\n"),
            ("hugetlb.1GB.current", "0\n"),
        ],
        _ => &[],
    }
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

struct Kernel {
    mount: PathBuf,
}

impl Kernel {
    /// The controllers a cgroup may enable for its children (and has files for).
    fn available(&self, dir: &Path) -> Vec<String> {
        let from = if dir == self.mount {
            dir.join("cgroup.controllers")
        } else {
            dir.parent().unwrap().join("cgroup.subtree_control")
        };
        words(&fs::read_to_string(from).unwrap_or_default())
    }

    fn add_controller_files(&self, dir: &Path, controller: &str) {
        for (name, content) in v2_controller_files(controller) {
            let f = dir.join(name);
            if !f.exists() {
                fs::write(f, content).unwrap();
            }
        }
        let ctrls = self.available(dir).join(" ");
        fs::write(dir.join("cgroup.controllers"), format!("{ctrls}\n")).unwrap();
    }

    /// Apply a keyed write (`KEY rest`) the way io.max and the weight files take it.
    fn keyed(file: &str, old: &str, line: &str) -> String {
        let (key, rest) = line.trim().split_once(' ').expect("KEY VALUE");
        let mut lines: Vec<(String, String)> = old
            .lines()
            .filter_map(|l| {
                let (k, r) = l.trim().split_once(' ')?;
                Some((k.to_string(), r.trim().to_string()))
            })
            .collect();
        // The kernel lists only devices with a setting of their own.
        let cleared = match file {
            "io.max" | "io.latency" => rest.split_whitespace().all(|t| t.ends_with("=max")),
            _ => key != "default" && rest.trim() == "default",
        };
        lines.retain(|(k, _)| k != key);
        if !cleared {
            lines.push((key.to_string(), words(rest).join(" ")));
        }
        lines.sort_by_key(|(k, _)| (k != "default", k.clone()));
        lines.iter().map(|(k, r)| format!("{k} {r}\n")).collect()
    }

    /// Execute ops; returns the writes and enables that changed nothing.
    fn run(&self, ops: &[Op]) -> Vec<String> {
        let mut idle = Vec::new();
        for op in ops {
            match op {
                Op::Mkdir { dir } => {
                    fs::create_dir(dir).unwrap_or_else(|e| panic!("{op}: {e}"));
                    mark::set(dir).unwrap();
                    for (name, content) in V2_CORE {
                        fs::write(dir.join(name), content).unwrap();
                    }
                    fs::write(dir.join("cgroup.controllers"), "").unwrap();
                    for c in self.available(dir) {
                        self.add_controller_files(dir, &c);
                    }
                }
                Op::Write {
                    file,
                    value,
                    optional,
                    ..
                } => {
                    if !file.exists() {
                        assert!(*optional, "{op}: no such file in this cgroup");
                        continue;
                    }
                    let old = fs::read_to_string(file).unwrap();
                    let name = file.file_name().unwrap().to_str().unwrap();
                    let new = match name {
                        "io.max" | "io.weight" | "io.bfq.weight" | "io.latency" => {
                            Kernel::keyed(name, &old, value)
                        }
                        _ => format!("{value}\n"),
                    };
                    if words(&old) == words(&new) {
                        idle.push(op.to_string());
                    }
                    fs::write(file, new).unwrap();
                }
                Op::Enable {
                    dir, controller, ..
                } => {
                    assert!(
                        self.available(dir).contains(controller),
                        "{op}: {controller} is not available in {}",
                        dir.display()
                    );
                    let f = dir.join("cgroup.subtree_control");
                    let mut on = words(&fs::read_to_string(&f).unwrap());
                    if on.contains(controller) {
                        idle.push(op.to_string());
                    } else {
                        on.push(controller.clone());
                    }
                    fs::write(&f, format!("{}\n", on.join(" "))).unwrap();
                    for e in fs::read_dir(dir).unwrap().filter_map(|e| e.ok()) {
                        if e.path().is_dir() {
                            self.add_controller_files(&e.path(), controller);
                        }
                    }
                }
                other => panic!("apply planned {other}"),
            }
        }
        idle
    }
}

// ---------------------------------------------------------------------------------------
// Layout detection
// ---------------------------------------------------------------------------------------

#[test]
fn layouts_are_recognised() {
    let v2 = unified();
    let l = v2.layout();
    assert_eq!(l.kind, Kind::Unified);
    assert!(l.v1.is_empty());
    let u = l.unified.as_ref().unwrap();
    assert_eq!(u.mount, v2.cg(""));
    assert_eq!(u.version, Version::V2);
    assert_eq!(
        u.controllers,
        ["cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"]
    );
    assert_eq!(l.hierarchy("io").unwrap().mount, v2.cg(""));
    assert_eq!(l.primary().unwrap().mount, v2.cg(""));

    let v1 = legacy();
    let l = v1.layout();
    assert_eq!(l.kind, Kind::Legacy);
    assert!(l.unified.is_none());
    assert_eq!(l.hierarchy("io").unwrap().mount, v1.cg("blkio"));
    assert_eq!(l.hierarchy("io").unwrap().version, Version::V1);
    assert_eq!(l.hierarchy("cpu").unwrap().mount, v1.cg("cpu,cpuacct"));
    assert_eq!(l.hierarchy("cpu").unwrap().controllers, ["cpu", "cpuacct"]);
    assert_eq!(l.cpuacct().unwrap().mount, v1.cg("cpu,cpuacct"));
    assert_eq!(l.hierarchy("memory").unwrap().mount, v1.cg("memory"));
    assert_eq!(l.hierarchy("cpuset").unwrap().mount, v1.cg("cpuset"));
    assert_eq!(l.hierarchy("hugetlb").unwrap().mount, v1.cg("hugetlb"));
    assert_eq!(l.hierarchy("pids").unwrap().mount, v1.cg("pids"));
    assert_eq!(l.primary().unwrap().mount, v1.cg("memory"));
    assert!(
        l.v1.iter().all(|h| h.mount != v1.cg("systemd")),
        "name=systemd is not a controller hierarchy: {l:?}"
    );
    assert_eq!(l.v1.len(), 10, "{l:?}");

    let hy = hybrid();
    let l = hy.layout();
    assert_eq!(l.kind, Kind::Hybrid);
    let u = l.unified.as_ref().unwrap();
    assert_eq!(u.mount, hy.cg("unified"));
    assert!(u.controllers.is_empty());
    assert_eq!(l.hierarchy("io").unwrap().mount, hy.cg("blkio"));
    assert_eq!(l.hierarchy("memory").unwrap().mount, hy.cg("memory"));
    // The unified mount is where membership is read on a hybrid host.
    assert_eq!(l.primary().unwrap().mount, hy.cg("unified"));
}

// ---------------------------------------------------------------------------------------
// Pure v2
// ---------------------------------------------------------------------------------------

const V2_PLAN: &str = r#"
[slice.db]

[slice.db-server]
CPUWeight = 1000
CPUQuota = "50%"
MemoryMin = "1G"
MemoryLow = "10%"
MemoryHigh = "33%"
MemoryMax = "16G"
MemorySwapMax = 0
IOWeight = 1000
IOReadBandwidthMax = "/ 10M"
TasksMax = 100
HugetlbMax = { "2M" = "1G" }
AllowedCPUs = "0-1"

[slice.db-helper]
CPUWeight = "idle"
IOWeight = 10
"#;

#[test]
fn v2_directives_map_to_files() {
    let f = unified();
    let ops = f.apply(V2_PLAN).ops;
    let top = f.cg("");
    let db = f.cg("db.slice");
    let server = f.cg("db.slice/db-server.slice");
    let helper = f.cg("db.slice/db-helper.slice");
    let dev = root_disk();

    assert_eq!(mkdirs(&ops), [db.clone(), helper.clone(), server.clone()]);
    assert_parents_first(&ops);

    // CPU
    assert_eq!(value(&ops, &server.join("cpu.weight")), "1000");
    assert_eq!(value(&ops, &server.join("cpu.max")), "50000 100000");
    assert_eq!(value(&ops, &helper.join("cpu.idle")), "1");
    assert!(
        values(&ops, &helper.join("cpu.weight")).is_empty(),
        "{ops:#?}"
    );
    assert!(
        values(&ops, &server.join("cpu.idle")).is_empty(),
        "{ops:#?}"
    );

    // Memory, with percentages of 24G rounded down to pages.
    assert_eq!(value(&ops, &server.join("memory.min")), "1073741824");
    assert_eq!(
        value(&ops, &server.join("memory.low")),
        pct_of_ram(10).to_string()
    );
    assert_eq!(pct_of_ram(10), 2_576_977_920);
    assert_eq!(
        value(&ops, &server.join("memory.high")),
        pct_of_ram(33).to_string()
    );
    assert_eq!(pct_of_ram(33), 8_504_033_280);
    assert_eq!(
        value(&ops, &server.join("memory.max")),
        (16u64 << 30).to_string()
    );
    assert_eq!(value(&ops, &server.join("memory.swap.max")), "0");
    assert!(values(&ops, &helper.join("memory.max")).is_empty());

    // I/O: io.cost weights as written, BFQ weights converted as systemd does.
    assert_eq!(value(&ops, &server.join("io.weight")), "default 1000");
    assert_eq!(value(&ops, &server.join("io.bfq.weight")), "default 181");
    assert_eq!(value(&ops, &helper.join("io.weight")), "default 10");
    assert_eq!(value(&ops, &helper.join("io.bfq.weight")), "default 10");
    assert_eq!(
        value(&ops, &server.join("io.max")),
        format!("{dev} rbps=10000000 wbps=max riops=max wiops=max")
    );
    assert!(values(&ops, &helper.join("io.max")).is_empty());

    // Tasks, huge pages, cpuset.
    assert_eq!(value(&ops, &server.join("pids.max")), "100");
    assert_eq!(value(&ops, &server.join("hugetlb.2MB.max")), "1073741824");
    assert_eq!(
        value(&ops, &server.join("hugetlb.2MB.rsvd.max")),
        "1073741824"
    );
    assert!(values(&ops, &server.join("hugetlb.1GB.max")).is_empty());
    assert_eq!(value(&ops, &server.join("cpuset.cpus")), "0-1");
    assert!(values(&ops, &server.join("cpuset.mems")).is_empty());
    assert!(values(&ops, &helper.join("cpuset.cpus")).is_empty());

    // db.slice has no directives: a new cgroup already holds every default.
    assert!(
        writes_in(&ops, &db).is_empty(),
        "{:#?}",
        writes_in(&ops, &db)
    );

    // Controllers: systemd enabled cpu io memory pids at the root; cpuset and hugetlb
    // are missing there, and db.slice is new.
    let want: BTreeSet<(PathBuf, String)> = [
        (top.clone(), "cpuset"),
        (top.clone(), "hugetlb"),
        (db.clone(), "cpu"),
        (db.clone(), "cpuset"),
        (db.clone(), "memory"),
        (db.clone(), "io"),
        (db.clone(), "pids"),
        (db.clone(), "hugetlb"),
    ]
    .into_iter()
    .map(|(d, c)| (d, c.to_string()))
    .collect();
    assert_eq!(enables(&ops), want);
    // The root is enabled before db.slice, and before anything is written below it.
    let root_hugetlb = index(
        &ops,
        &Op::Enable {
            dir: top.clone(),
            controller: "hugetlb".into(),
            foreign: true,
        },
    );
    let db_hugetlb = index(
        &ops,
        &Op::Enable {
            dir: db.clone(),
            controller: "hugetlb".into(),
            foreign: false,
        },
    );
    assert!(root_hugetlb < db_hugetlb);
    let hugetlb_write = ops
        .iter()
        .position(
            |op| matches!(op, Op::Write { file, .. } if file == &server.join("hugetlb.2MB.max")),
        )
        .unwrap();
    assert!(db_hugetlb < hugetlb_write);

    // Nothing is written to a new cgroup's restore: removing it undoes it.
    for op in &ops {
        if let Op::Write { restore, .. } = op {
            assert!(restore.is_none(), "{op} on a new cgroup has a restore");
        }
    }
}

#[test]
fn v2_apply_is_idempotent_and_changes_only_what_changed() {
    let f = unified();
    let kernel = Kernel { mount: f.cg("") };
    let first = f.apply(V2_PLAN).ops;
    let idle = kernel.run(&first);
    assert!(
        idle.is_empty(),
        "operations that changed nothing: {idle:#?}"
    );

    // The kernel state now matches the plan.
    let server = f.cg("db.slice/db-server.slice");
    let read = |p: PathBuf| fs::read_to_string(p).unwrap();
    assert_eq!(read(server.join("cpu.weight")), "1000\n");
    assert_eq!(read(server.join("io.weight")), "default 1000\n");
    assert_eq!(
        read(server.join("io.max")),
        format!(
            "{} rbps=10000000 wbps=max riops=max wiops=max\n",
            root_disk()
        )
    );
    assert!(mark::is_ours(&server));

    let again = f.apply(V2_PLAN).ops;
    assert!(again.is_empty(), "second apply is not empty: {again:#?}");

    // One value changes: exactly that file is written, remembering the old value.
    let changed = f
        .apply(&V2_PLAN.replace("CPUWeight = 1000", "CPUWeight = 500"))
        .ops;
    assert_eq!(
        changed,
        [Op::Write {
            file: server.join("cpu.weight"),
            value: "500".into(),
            why: "CPUWeight=500".into(),
            restore: Some("1000".into()),
            optional: false,
        }]
    );

    let changed = f
        .apply(&V2_PLAN.replace("MemoryMax = \"16G\"", "MemoryMax = \"8G\""))
        .ops;
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert!(matches!(
        &changed[0],
        Op::Write { file, value, restore: Some(r), .. }
            if file == &server.join("memory.max") && value == "8589934592" && r == "17179869184"
    ));

    let dev = root_disk();
    let old_line = format!("{dev} rbps=10000000 wbps=max riops=max wiops=max");
    let changed = f.apply(&V2_PLAN.replace("/ 10M", "/ 20M")).ops;
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert!(
        matches!(
            &changed[0],
            Op::Write { file, value, restore: Some(r), .. }
                if file == &server.join("io.max")
                    && value == &format!("{dev} rbps=20000000 wbps=max riops=max wiops=max")
                    && r == &old_line
        ),
        "{changed:#?}"
    );

    // A device limit dropped from the plan is cleared.
    let changed = f
        .apply(&V2_PLAN.replace("IOReadBandwidthMax = \"/ 10M\"\n", ""))
        .ops;
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert!(
        matches!(
            &changed[0],
            Op::Write { file, value, restore: Some(r), .. }
                if file == &server.join("io.max")
                    && value == &format!("{dev} rbps=max wbps=max riops=max wiops=max")
                    && r == &old_line
        ),
        "{changed:#?}"
    );

    // Leaving idle writes the weight after clearing cpu.idle.
    let helper = f.cg("db.slice/db-helper.slice");
    let changed = f
        .apply(&V2_PLAN.replace("CPUWeight = \"idle\"", "CPUWeight = 20"))
        .ops;
    let files: Vec<(PathBuf, String)> = changed
        .iter()
        .map(|op| match op {
            Op::Write { file, value, .. } => (file.clone(), value.clone()),
            other => panic!("unexpected {other}"),
        })
        .collect();
    assert_eq!(
        files,
        [
            (helper.join("cpu.idle"), "0".to_string()),
            (helper.join("cpu.weight"), "20".to_string()),
        ]
    );
}

/// IODeviceLatencyTargetSec becomes io.latency's `MAJ:MIN target=USEC` on the whole disk
/// the path leads to; a changed target remembers the old line, a removed one goes back to
/// `target=max` (the kernel then lists the device no more).
#[test]
fn v2_io_latency_targets_map_change_and_clear() {
    let f = unified();
    let kernel = Kernel { mount: f.cg("") };
    let dev = root_disk();
    let plan = V2_PLAN.replace(
        "IOWeight = 1000\n",
        "IOWeight = 1000\nIODeviceLatencyTargetSec = \"/ 10ms\"\n",
    );
    let ops = f.apply(&plan).ops;
    let server = f.cg("db.slice/db-server.slice");
    assert_eq!(
        value(&ops, &server.join("io.latency")),
        format!("{dev} target=10000")
    );
    let helper = f.cg("db.slice/db-helper.slice");
    assert!(values(&ops, &helper.join("io.latency")).is_empty());
    assert!(kernel.run(&ops).is_empty());
    assert_eq!(
        fs::read_to_string(server.join("io.latency")).unwrap(),
        format!("{dev} target=10000\n")
    );
    assert!(
        f.apply(&plan).ops.is_empty(),
        "a second apply changes nothing"
    );

    let changed = f.apply(&plan.replace("/ 10ms", "/ 2.5ms")).ops;
    assert_eq!(
        changed,
        [Op::Write {
            file: server.join("io.latency"),
            value: format!("{dev} target=2500"),
            why: "IODeviceLatencyTargetSec".into(),
            restore: Some(format!("{dev} target=10000")),
            optional: false,
        }]
    );

    let cleared = f.apply(V2_PLAN).ops;
    assert_eq!(
        cleared,
        [Op::Write {
            file: server.join("io.latency"),
            value: format!("{dev} target=max"),
            why: "IODeviceLatencyTargetSec (removed from the plan)".into(),
            restore: Some(format!("{dev} target=10000")),
            optional: false,
        }]
    );
    kernel.run(&cleared);
    assert_eq!(fs::read_to_string(server.join("io.latency")).unwrap(), "");
}

/// On a disk with the `none` scheduler and io.cost off, IOWeight does nothing and apply
/// says so; a plan whose [iocost] section turns io.cost on gets io.weight written (the
/// weights then share those disks) and no such warning.
#[test]
fn v2_io_weight_is_written_where_the_plan_turns_io_cost_on() {
    let f = unified();
    let mut layout = f.layout();
    if let Some(c) = layout.caps.as_mut() {
        c.io_cost = false;
        c.bfq = false;
        c.bfq_devices.clear();
    }
    let fs_ = CgroupFs::new(layout, "/").unwrap();
    let helper = f.cg("db.slice/db-helper.slice");
    let plan = |text: &str| {
        let p = Plan::parse(text, None).unwrap();
        let mut h = host();
        h.look_up_devices(p.device_paths());
        fs_.plan_apply(&p.resolve(&h).unwrap(), Default::default())
            .unwrap()
    };
    let off = plan(V2_PLAN);
    assert!(values(&off.ops, &helper.join("io.weight")).is_empty());
    assert!(
        off.warnings
            .iter()
            .any(|d| d.message.contains("IOWeight has no effect here")),
        "{:#?}",
        off.warnings
    );
    let on = plan(&format!("{V2_PLAN}\n[iocost]\ndevices = [\"/\"]\n"));
    assert_eq!(value(&on.ops, &helper.join("io.weight")), "default 10");
    assert!(
        !on.warnings
            .iter()
            .any(|d| d.message.contains("has no effect here")),
        "{:#?}",
        on.warnings
    );
}

/// On v1 and hybrid hosts (blkio on v1) there is no io.latency: nothing is written for it
/// and apply says plainly that it has no effect.
#[test]
fn v1_and_hybrid_say_io_latency_has_no_effect() {
    let plan = format!("{V1_PLAN}\n[slice.db-helper-x]\nIODeviceLatencyTargetSec = \"/ 10ms\"\n");
    for f in [legacy(), hybrid()] {
        let changes = f.apply(&plan);
        for op in &changes.ops {
            assert!(!op.to_string().contains("latency"), "{op}");
        }
        let w: Vec<String> = changes.warnings.iter().map(|d| d.to_string()).collect();
        assert!(
            w.iter()
                .any(|m| m.contains("IODeviceLatencyTargetSec is not applied")
                    && m.contains("cgroup v2")
                    && m.contains("no effect here")
                    && m.contains("[slice.db-helper-x]")),
            "{w:#?}"
        );
    }
}

#[test]
fn v2_foreign_cgroup_is_not_adopted() {
    let f = unified();
    fs::create_dir(f.cg("db.slice")).unwrap();
    let err = f.try_apply(V2_PLAN).unwrap_err().to_string();
    assert!(err.contains("refusing to adopt"), "{err}");
    assert!(
        err.contains(&f.cg("db.slice").display().to_string()),
        "{err}"
    );
    // Nothing of it was marked as ours on the way.
    assert!(!mark::is_ours(&f.cg("db.slice")));
}

// ---------------------------------------------------------------------------------------
// Pure v1
// ---------------------------------------------------------------------------------------

const V1_PLAN: &str = r#"
[slice.db-helper]
CPUWeight = 10
CPUQuota = "150%"
MemoryMax = "1G"
MemorySwapMax = 0
MemoryHigh = "512M"
IOReadBandwidthMax = "/ 10M"
TasksMax = 64

[slice.db-server]
AllowedCPUs = "1"
"#;

#[test]
fn v1_directives_map_to_files() {
    let f = legacy();
    let changes = f.apply(V1_PLAN);
    let ops = &changes.ops;
    let cpu = f.cg("cpu,cpuacct/db.slice/db-helper.slice");
    let mem = f.cg("memory/db.slice/db-helper.slice");
    let blkio = f.cg("blkio/db.slice/db-helper.slice");
    let pids = f.cg("pids/db.slice/db-helper.slice");
    assert_parents_first(ops);

    // The slices exist in every hierarchy bulkhead drives, and nowhere else (the freezer:
    // pure v1 has no cgroup.freeze, and the guard freezes sideloads there).
    let made: BTreeSet<PathBuf> = mkdirs(ops).into_iter().collect();
    let mut want = BTreeSet::new();
    for h in [
        "cpu,cpuacct",
        "memory",
        "blkio",
        "pids",
        "cpuset",
        "freezer",
    ] {
        for s in [
            "db.slice",
            "db.slice/db-helper.slice",
            "db.slice/db-server.slice",
        ] {
            want.insert(f.cg(&format!("{h}/{s}")));
        }
    }
    assert_eq!(made, want);
    for other in [
        "systemd",
        "hugetlb",
        "net_cls,net_prio",
        "devices",
        "perf_event",
    ] {
        let h = f.cg(other);
        assert!(
            ops.iter()
                .all(|op| op_paths(op).iter().all(|p| !p.starts_with(&h))),
            "{other} was touched: {ops:#?}"
        );
    }
    assert!(enables(ops).is_empty(), "v1 has no subtree_control");

    // CPU: systemd's weight -> shares, quota per the default period.
    assert_eq!(value(ops, &cpu.join("cpu.shares")), "102");
    assert_eq!(value(ops, &cpu.join("cpu.cfs_quota_us")), "150000");
    // A new cgroup's period is already 100000.
    assert!(values(ops, &cpu.join("cpu.cfs_period_us"))
        .iter()
        .all(|v| v == "100000"));

    // Memory: the limit first, then memory+swap (which must never be below it).
    let limit = write_index(ops, &mem.join("memory.limit_in_bytes"));
    let memsw = write_index(ops, &mem.join("memory.memsw.limit_in_bytes"));
    assert_eq!(value(ops, &mem.join("memory.limit_in_bytes")), "1073741824");
    assert_eq!(
        value(ops, &mem.join("memory.memsw.limit_in_bytes")),
        "1073741824"
    );
    assert!(limit < memsw, "{ops:#?}");
    assert!(values(ops, &mem.join("memory.high")).is_empty());
    let high = changes
        .warnings
        .iter()
        .find(|w| w.message.contains("MemoryHigh"))
        .unwrap_or_else(|| panic!("no MemoryHigh warning: {:#?}", changes.warnings));
    assert!(high.message.contains("memory.high"), "{}", high.message);
    assert_eq!(high.context.as_deref(), Some("[slice.db-helper]"));

    // I/O throttling on blkio.
    assert_eq!(
        value(ops, &blkio.join("blkio.throttle.read_bps_device")),
        format!("{} 10000000", root_disk())
    );
    for unset in [
        "blkio.throttle.write_bps_device",
        "blkio.throttle.read_iops_device",
        "blkio.throttle.write_iops_device",
    ] {
        assert!(values(ops, &blkio.join(unset)).is_empty(), "{unset}");
    }
    assert!(values(ops, &blkio.join("io.max")).is_empty());

    assert_eq!(value(ops, &pids.join("pids.max")), "64");

    // cpuset: a v1 cpuset cgroup holds no task until both lists are set, so slices without
    // AllowedCPUs get the root's lists.
    let cs = |s: &str| f.cg(&format!("cpuset/{s}"));
    assert_eq!(value(ops, &cs("db.slice").join("cpuset.cpus")), "0-3");
    assert_eq!(value(ops, &cs("db.slice").join("cpuset.mems")), "0");
    assert_eq!(
        value(ops, &cs("db.slice/db-server.slice").join("cpuset.cpus")),
        "1"
    );
    assert_eq!(
        value(ops, &cs("db.slice/db-server.slice").join("cpuset.mems")),
        "0"
    );
    assert_eq!(
        value(ops, &cs("db.slice/db-helper.slice").join("cpuset.cpus")),
        "0-3"
    );
    // Parents' lists are set before the children's.
    assert!(
        write_index(ops, &cs("db.slice").join("cpuset.cpus"))
            < write_index(ops, &cs("db.slice/db-server.slice").join("cpuset.cpus"))
    );
}

/// The position of the only write to `file`.
fn write_index(ops: &[Op], file: &Path) -> usize {
    let found: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| matches!(op, Op::Write { file: f, .. } if f == file))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(found.len(), 1, "one write to {} expected", file.display());
    found[0]
}

#[test]
fn v1_cpuset_inherits_the_roots_lists() {
    let f = legacy();
    // CPU 3 isolated from the scheduler (isolcpus): the root's list is not the host's.
    fs::write(f.cg("cpuset/cpuset.cpus"), "0-2\n").unwrap();
    let ops = f.apply(V1_PLAN).ops;
    let cs = |s: &str| f.cg(&format!("cpuset/{s}/cpuset.cpus"));
    assert_eq!(value(&ops, &cs("db.slice")), "0-2");
    assert_eq!(value(&ops, &cs("db.slice/db-helper.slice")), "0-2");
    assert_eq!(value(&ops, &cs("db.slice/db-server.slice")), "1");

    // A parent's AllowedCPUs is what its children inherit.
    let plan = r#"
[slice.db]
AllowedCPUs = "0-1"
[slice.db-server]
[slice.db-helper]
AllowedCPUs = "1"
"#;
    let ops = f.apply(plan).ops;
    assert_eq!(value(&ops, &cs("db.slice")), "0-1");
    assert_eq!(value(&ops, &cs("db.slice/db-server.slice")), "0-1");
    assert_eq!(value(&ops, &cs("db.slice/db-helper.slice")), "1");
}

#[test]
fn v1_hugetlb_limits() {
    let f = legacy();
    let ops = f
        .apply("[slice.db-server]\nHugetlbMax = { \"2M\" = \"1G\", \"1G\" = \"2G\" }\n")
        .ops;
    let h = f.cg("hugetlb/db.slice/db-server.slice");
    assert_eq!(
        value(&ops, &h.join("hugetlb.2MB.limit_in_bytes")),
        "1073741824"
    );
    assert_eq!(
        value(&ops, &h.join("hugetlb.2MB.rsvd.limit_in_bytes")),
        "1073741824"
    );
    assert_eq!(
        value(&ops, &h.join("hugetlb.1GB.limit_in_bytes")),
        "2147483648"
    );
    assert!(writes_in(&ops, &f.cg("hugetlb/db.slice")).is_empty());
    // cpuset is only driven when the plan uses it.
    assert!(!mkdirs(&ops).iter().any(|d| d.starts_with(f.cg("cpuset"))));
}

/// Create a marked cgroup with the given files, as an earlier apply would have left it.
fn existing(dir: &Path, files: &[(String, String)]) {
    fs::create_dir_all(dir).unwrap();
    mark::set(dir).unwrap();
    for (name, content) in files {
        fs::write(dir.join(name), content).unwrap();
    }
}

#[test]
fn v1_existing_slice_changes_in_a_safe_order() {
    let f = legacy();
    let unlimited = "9223372036854771712\n";
    let swappiness = fs::read_to_string("/proc/sys/vm/swappiness").unwrap_or("60\n".into());
    let mem_files = |limit: &str, memsw: &str| -> Vec<(String, String)> {
        [
            ("memory.limit_in_bytes", limit),
            ("memory.memsw.limit_in_bytes", memsw),
            ("memory.soft_limit_in_bytes", unlimited),
            ("memory.usage_in_bytes", "0\n"),
            ("memory.swappiness", &swappiness),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    existing(&f.cg("memory/db.slice"), &mem_files(unlimited, unlimited));
    existing(
        &f.cg("memory/db.slice/db-helper.slice"),
        &mem_files("1073741824\n", "1073741824\n"),
    );
    let cpu_files = |period: &str| -> Vec<(String, String)> {
        [
            ("cpu.shares", "1024\n"),
            ("cpu.cfs_quota_us", "-1\n"),
            ("cpu.cfs_period_us", period),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    existing(&f.cg("cpu,cpuacct/db.slice"), &cpu_files("100000\n"));
    // An earlier plan had CPUQuotaPeriodSec = "50ms".
    existing(
        &f.cg("cpu,cpuacct/db.slice/db-helper.slice"),
        &cpu_files("50000\n"),
    );

    let plan = r#"
[slice.db-helper]
CPUQuota = "150%"
MemoryMax = "2G"
MemorySwapMax = 0
"#;
    let ops = f.apply(plan).ops;
    let mem = f.cg("memory/db.slice/db-helper.slice");
    let cpu = f.cg("cpu,cpuacct/db.slice/db-helper.slice");
    assert!(!mkdirs(&ops).contains(&mem));
    assert!(
        writes_in(&ops, &f.cg("memory/db.slice")).is_empty(),
        "{ops:#?}"
    );
    assert!(
        writes_in(&ops, &f.cg("cpu,cpuacct/db.slice")).is_empty(),
        "{ops:#?}"
    );

    // Raising memory from 1G/1G to 2G/2G: memory+swap is opened first, or the kernel
    // refuses a limit above it.
    let memory: Vec<(String, String, Option<String>)> = writes_in(&ops, &mem)
        .into_iter()
        .map(|op| match op {
            Op::Write {
                file,
                value,
                restore,
                ..
            } => (
                file.file_name().unwrap().to_string_lossy().into_owned(),
                value,
                restore,
            ),
            _ => unreachable!(),
        })
        .collect();
    let s = |x: &str| x.to_string();
    assert_eq!(
        memory,
        [
            (
                s("memory.memsw.limit_in_bytes"),
                s("-1"),
                Some(s("1073741824"))
            ),
            (
                s("memory.limit_in_bytes"),
                s("2147483648"),
                Some(s("1073741824"))
            ),
            (
                s("memory.memsw.limit_in_bytes"),
                s("2147483648"),
                Some(s("-1"))
            ),
        ]
    );

    // The period an earlier plan set goes back to the default with the quota.
    assert_eq!(value(&ops, &cpu.join("cpu.cfs_period_us")), "100000");
    assert_eq!(value(&ops, &cpu.join("cpu.cfs_quota_us")), "150000");
    let restore_of = |file: PathBuf| {
        ops.iter()
            .find_map(|op| match op {
                Op::Write {
                    file: f, restore, ..
                } if *f == file => restore.clone(),
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(restore_of(cpu.join("cpu.cfs_period_us")), "50000");
    assert_eq!(restore_of(cpu.join("cpu.cfs_quota_us")), "-1");
    assert!(values(&ops, &cpu.join("cpu.shares")).is_empty());
}

#[test]
fn v1_foreign_cgroup_is_not_adopted() {
    let f = legacy();
    // Someone else's db.slice in one hierarchy only.
    fs::create_dir(f.cg("blkio/db.slice")).unwrap();
    let err = f.try_apply(V1_PLAN).unwrap_err().to_string();
    assert!(err.contains("refusing to adopt"), "{err}");
    assert!(
        err.contains(&f.cg("blkio/db.slice").display().to_string()),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------
// Hybrid
// ---------------------------------------------------------------------------------------

#[test]
fn hybrid_tracks_slices_in_the_empty_unified_mount() {
    let f = hybrid();
    let ops = f.apply(V1_PLAN).ops;
    let unified = f.cg("unified");
    assert_parents_first(&ops);

    let in_unified: Vec<PathBuf> = mkdirs(&ops)
        .into_iter()
        .filter(|d| d.starts_with(&unified))
        .collect();
    assert_eq!(
        in_unified,
        [
            unified.join("db.slice"),
            unified.join("db.slice/db-helper.slice"),
            unified.join("db.slice/db-server.slice"),
        ]
    );
    for op in &ops {
        if let Op::Write { file, .. } = op {
            assert!(!file.starts_with(&unified), "{op}");
        }
    }
    assert!(enables(&ops).is_empty(), "{ops:#?}");

    // The limits themselves go to the v1 hierarchies.
    assert_eq!(
        value(
            &ops,
            &f.cg("cpu,cpuacct/db.slice/db-helper.slice/cpu.shares")
        ),
        "102"
    );
    assert_eq!(
        value(
            &ops,
            &f.cg("memory/db.slice/db-helper.slice/memory.limit_in_bytes")
        ),
        "1073741824"
    );
    assert!(ops
        .iter()
        .all(|op| op_paths(op).iter().all(|p| !p.starts_with(f.cg("systemd")))));
}

/// cgroup v2 OOM-kills rather than refusing a memory.max below current use, so the planner
/// refuses it; and limits the plan stops naming go back to "no limit".
#[test]
fn v2_refuses_memory_max_below_use_and_resets_removed_limits() {
    let f = unified();
    let kernel = Kernel { mount: f.cg("") };
    let plan = "[slice.db-server]\nMemoryMax = \"2G\"\nHugetlbMax = { \"2M\" = \"1G\" }\n";
    let first = f.apply(plan).ops;
    kernel.run(&first);
    let server = f.cg("db.slice/db-server.slice");
    fs::write(server.join("memory.current"), (1u64 << 30).to_string()).unwrap();
    let err = f
        .try_apply(&plan.replace("MemoryMax = \"2G\"", "MemoryMax = \"512M\""))
        .unwrap_err()
        .to_string();
    assert!(err.contains("below what the slice uses now (1G)"), "{err}");
    assert!(err.contains("OOM-kill"), "{err}");
    // Above current use is fine.
    assert!(f
        .try_apply(&plan.replace("MemoryMax = \"2G\"", "MemoryMax = \"1536M\""))
        .is_ok());
    // Dropping HugetlbMax from the plan resets the limit instead of leaving it in force.
    let ops = f.apply("[slice.db-server]\nMemoryMax = \"2G\"\n").ops;
    assert_eq!(
        value(&ops, &server.join("hugetlb.2MB.max")),
        "max",
        "{ops:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// The guard's throttles: cut on top of the plan, and a release that gives the plan back
// ---------------------------------------------------------------------------------------

const GUARD_PLAN: &str = r#"
[slice.db-server]
CPUWeight = 1000

[slice.db-helper]
CPUWeight = 10
CPUQuota = "150%"
"#;

fn helper_slice() -> bulkhead_plan::ResolvedSlice {
    let plan = Plan::parse(GUARD_PLAN, None)
        .unwrap()
        .resolve(&host())
        .unwrap();
    plan.slices
        .into_iter()
        .find(|s| s.name().as_str() == "db-helper")
        .expect("db-helper in the plan")
}

fn cut() -> bulkhead_cgroups::Throttle {
    bulkhead_cgroups::Throttle {
        cpu: Some(0.05),
        period_us: 10_000,
        idle: true,
        frozen: true,
        io_bps: Some(8 << 20),
    }
}

#[test]
fn v2_throttle_cuts_and_release_restores_the_plan() {
    let f = unified();
    let kernel = Kernel { mount: f.cg("") };
    kernel.run(&f.apply(GUARD_PLAN).ops);
    let helper = f.cg("db.slice/db-helper.slice");
    let read = |name: &str| fs::read_to_string(helper.join(name)).unwrap();
    let backend = f.backend();
    let slice = helper_slice();
    let disk = DevNum::resolve(Path::new("/")).unwrap();

    let ops = backend.plan_throttle(&slice, &cut(), &[disk]).unwrap();
    let idle = kernel.run(&ops);
    assert!(idle.is_empty(), "writes that changed nothing: {idle:#?}");
    assert_eq!(read("cpu.idle"), "1\n");
    // 5% of one CPU is below the kernel's 1 ms per 10 ms: the period grows instead.
    assert_eq!(read("cpu.max"), "1000 20000\n");
    assert_eq!(read("cgroup.freeze"), "1\n");
    assert_eq!(
        read("io.max"),
        format!("{disk} rbps=8388608 wbps=8388608 riops=max wiops=max\n")
    );
    // Planned against the files as they are: a second cut writes nothing.
    let again = backend.plan_throttle(&slice, &cut(), &[disk]).unwrap();
    assert!(again.is_empty(), "{again:#?}");

    // An idle group shows the idle weight (the kernel's 3 shares) and leaving idle resets
    // it to the default, so the release writes the plan's weight after cpu.idle=0, and
    // puts quota, I/O and the freezer back.
    fs::write(helper.join("cpu.weight"), "1\n").unwrap();
    let none = bulkhead_cgroups::Throttle::none();
    let release = backend.plan_throttle(&slice, &none, &[disk]).unwrap();
    assert!(
        write_index(&release, &helper.join("cpu.idle"))
            < write_index(&release, &helper.join("cpu.weight")),
        "{release:#?}"
    );
    kernel.run(&release);
    assert_eq!(read("cpu.idle"), "0\n");
    assert_eq!(read("cpu.weight"), "10\n");
    assert_eq!(read("cpu.max"), "150000 100000\n");
    assert_eq!(read("cgroup.freeze"), "0\n");
    assert_eq!(read("io.max"), "");
    let settled = backend.plan_throttle(&slice, &none, &[disk]).unwrap();
    assert!(settled.is_empty(), "{settled:#?}");
}

#[test]
fn v1_and_hybrid_throttles_use_cfs_quota_and_the_right_freezer() {
    for (f, freezer, frozen) in [
        (
            legacy(),
            "freezer/db.slice/db-helper.slice/freezer.state",
            "FROZEN",
        ),
        (
            hybrid(),
            "unified/db.slice/db-helper.slice/cgroup.freeze",
            "1",
        ),
    ] {
        let cpu = f.cg("cpu,cpuacct/db.slice/db-helper.slice");
        existing(
            &cpu,
            &[
                ("cpu.shares".into(), "102\n".into()),
                ("cpu.cfs_quota_us".into(), "150000\n".into()),
                ("cpu.cfs_period_us".into(), "100000\n".into()),
                ("cpu.idle".into(), "0\n".into()),
            ],
        );
        existing(
            &f.cg("blkio/db.slice/db-helper.slice"),
            &[
                ("blkio.throttle.read_bps_device".into(), "".into()),
                ("blkio.throttle.write_bps_device".into(), "".into()),
            ],
        );
        let fz = f.cg(freezer);
        let state = if frozen == "1" { "0\n" } else { "THAWED\n" };
        existing(fz.parent().unwrap(), &[(fz_name(&fz), state.into())]);
        let ops = f
            .backend()
            .plan_throttle(&helper_slice(), &cut(), &[])
            .unwrap();
        assert_eq!(value(&ops, &cpu.join("cpu.idle")), "1", "{ops:#?}");
        assert_eq!(value(&ops, &cpu.join("cpu.cfs_period_us")), "20000");
        assert_eq!(value(&ops, &cpu.join("cpu.cfs_quota_us")), "1000");
        assert_eq!(value(&ops, &fz), frozen);
        // Nothing outside the throttle's files: memory, pids and the weight stay apply's.
        for op in &ops {
            for p in op_paths(op) {
                assert!(p == fz || p.starts_with(&cpu), "{op}");
                assert!(!op.to_string().contains("cpu.shares"), "{op}");
            }
        }
    }
}

fn fz_name(p: &Path) -> String {
    p.file_name().unwrap().to_str().unwrap().to_string()
}

/// A slice bulkhead did not create is never throttled.
#[test]
fn throttle_refuses_a_foreign_cgroup() {
    let f = unified();
    let dir = f.cg("db.slice/db-helper.slice");
    fs::create_dir_all(&dir).unwrap();
    let err = f
        .backend()
        .plan_throttle(&helper_slice(), &cut(), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("was not created by bulkhead"), "{err}");
}
