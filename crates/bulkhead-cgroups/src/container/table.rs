//! docs/DIRECTIVES.md's table, generated from the mapping itself: for each directive, the
//! control files it becomes on cgroup v2 and v1 (a hybrid host is v1 for every controller it
//! mounts there), the kernel features without which it is not applied (found by taking each
//! feature away and seeing the mapping warn), and what a container gets of it through NRI.
//! The test fails when the document and the code disagree;
//! `BULKHEAD_BLESS=1 cargo test -p bulkhead-cgroups directive_table` rewrites the document.

use crate::container::{self, Node};
use crate::fs::map::{Mapper, Want};
use crate::layout::{Caps, Version};
use bulkhead_plan::{IoMax, Plan, ResolvedSlice, SliceName};
use bulkhead_sys::error::Severity;
use bulkhead_sys::host::{DevNum, Host};
use bulkhead_sys::units::{IdSet, Limit};

const DISK: DevNum = DevNum { major: 8, minor: 0 };

/// Every feature of a recent kernel.
fn full() -> Caps {
    Caps {
        cpu_idle: true,
        bfq: true,
        bfq_module: true,
        bfq_devices: vec![DISK.to_string()],
        io_cost: true,
        io_latency: true,
        memsw: true,
        hugetlb_rsvd: true,
        swap_v2: true,
        sched_ext: None,
        io_v2: true,
    }
}

/// Takes a kernel feature away from a capability set.
type Take = fn(&mut Caps);

/// The kernel features taken away one group at a time, by the name the table gives them.
fn features() -> Vec<(&'static str, Take)> {
    vec![
        ("cpu.idle (Linux 5.15)", |c| c.cpu_idle = false),
        ("BFQ", |c| {
            c.bfq = false;
            c.bfq_module = false;
            c.bfq_devices.clear();
        }),
        ("io.cost", |c| c.io_cost = false),
        ("BFQ or io.cost", |c| {
            c.bfq = false;
            c.bfq_module = false;
            c.bfq_devices.clear();
            c.io_cost = false;
        }),
        ("io.latency", |c| c.io_latency = false),
        ("swap accounting", |c| {
            c.memsw = false;
            c.swap_v2 = false;
        }),
        ("no sched_ext scheduler", |c| {
            c.sched_ext = Some("scx".into())
        }),
    ]
}

fn host() -> Host {
    Host {
        memory: 16 << 30,
        cpus: IdSet((0..4).collect()),
        mem_nodes: IdSet([0].into_iter().collect()),
        hugepage_sizes: vec![2 << 20],
        tasks_max: 4_194_304,
        page_size: 4096,
        devices: Default::default(),
    }
}

/// One row's slice: the directive as a plan line, or set on the resolved slice for those
/// that take a device.
fn slice(directive: &str) -> ResolvedSlice {
    let line = match directive {
        "IODeviceWeight"
        | "IODeviceLatencyTargetSec"
        | "IOReadBandwidthMax"
        | "IOWriteBandwidthMax"
        | "IOReadIOPSMax"
        | "IOWriteIOPSMax" => "",
        "CPUWeight=idle" => "CPUWeight = \"idle\"",
        "CPUWeight" => "CPUWeight = 50",
        "CPUQuota" => "CPUQuota = \"50%\"",
        "CPUQuotaPeriodSec" => "CPUQuota = \"50%\"\nCPUQuotaPeriodSec = \"10ms\"",
        "CPUSchedulingSliceSec" => "CPUSchedulingSliceSec = \"1ms\"",
        "AllowedCPUs" => "AllowedCPUs = \"0\"",
        "AllowedMemoryNodes" => "AllowedMemoryNodes = \"0\"",
        "MemorySwapMax" => "MemoryMax = \"1G\"\nMemorySwapMax = 0",
        "IOWeight" => "IOWeight = 50",
        "TasksMax" => "TasksMax = 64",
        "HugetlbMax" => "HugetlbMax = { \"2M\" = \"1G\" }",
        m => return memory(m),
    };
    let mut s = resolve(line);
    let lim = Some(Limit::Bytes(10 << 20));
    let none = IoMax {
        rbps: None,
        wbps: None,
        riops: None,
        wiops: None,
    };
    match directive {
        "IODeviceWeight" => {
            s.io_device_weight.insert(DISK, 50);
        }
        "IODeviceLatencyTargetSec" => {
            s.io_latency.insert(DISK, Some(10_000));
        }
        "IOReadBandwidthMax" => {
            s.io_max.insert(DISK, IoMax { rbps: lim, ..none });
        }
        "IOWriteBandwidthMax" => {
            s.io_max.insert(DISK, IoMax { wbps: lim, ..none });
        }
        "IOReadIOPSMax" => {
            s.io_max.insert(DISK, IoMax { riops: lim, ..none });
        }
        "IOWriteIOPSMax" => {
            s.io_max.insert(DISK, IoMax { wiops: lim, ..none });
        }
        _ => {}
    }
    s
}

fn memory(directive: &str) -> ResolvedSlice {
    resolve(&format!("{directive} = \"1G\""))
}

fn resolve(line: &str) -> ResolvedSlice {
    let p = Plan::parse(&format!("[slice.x]\n{line}\n"), None)
        .unwrap()
        .resolve(&host())
        .unwrap();
    p.slice(&SliceName::parse("x").unwrap()).unwrap().clone()
}

/// The files a slice is given on one version with these capabilities, and the mapping's
/// warnings (each a directive not applied, or applied differently).
fn mapped_all(s: &ResolvedSlice, version: Version, caps: &Caps) -> (Vec<String>, Vec<String>) {
    let mut files = Vec::new();
    let mut warned = Vec::new();
    for c in ["cpu", "cpuset", "memory", "io", "pids", "hugetlb"] {
        let mut m = Mapper {
            slice: s,
            caps,
            inherited_cpuset: Default::default(),
            swappiness: 60,
            page_sizes: vec![2 << 20],
            wants: vec![],
            warnings: vec![],
        };
        m.map(c, version);
        warned.extend(
            m.warnings
                .into_iter()
                .filter(|w| w.severity == Severity::Warning)
                .map(|w| w.message),
        );
        for w in m.wants.into_iter().filter(Want::planned) {
            let f = match w {
                Want::Value { file, .. } | Want::Lines { file, .. } => file,
            };
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    (files, warned)
}

/// [`mapped_all`] for the directive alone: less what a slice with no directives gets (v1's
/// cpuset files, which every v1 cpuset cgroup needs filled), and whether it warned.
fn mapped(s: &ResolvedSlice, version: Version, caps: &Caps) -> (Vec<String>, bool) {
    let (base, base_warned) = mapped_all(&resolve(""), version, caps);
    let (files, warned) = mapped_all(s, version, caps);
    let files = files
        .into_iter()
        .filter(|f| !base.contains(f) || s.uses_cpuset() && f.starts_with("cpuset."))
        .collect();
    (files, warned.iter().any(|w| !base_warned.contains(w)))
}

/// What the table says a directive needs on one version: the feature groups whose absence
/// makes the mapping warn ("BFQ or io.cost" only when neither alone does).
fn needs(s: &ResolvedSlice, version: Version) -> Vec<&'static str> {
    let mut caps = full();
    if version == Version::V1 {
        caps.io_v2 = false;
        caps.io_cost = false;
        caps.io_latency = false;
    }
    let (_, already) = mapped_all(s, version, &caps);
    let mut out: Vec<&str> = Vec::new();
    for (name, take) in features() {
        let mut c = caps.clone();
        take(&mut c);
        if mapped_all(s, version, &c)
            .1
            .iter()
            .any(|w| !already.contains(w))
        {
            out.push(name);
        }
    }
    if out.contains(&"BFQ") || out.contains(&"io.cost") {
        out.retain(|n| *n != "BFQ or io.cost");
    }
    out
}

fn cell(files: &[String], warned: bool) -> String {
    let f: Vec<String> = files.iter().map(|f| format!("`{f}`")).collect();
    match (f.is_empty(), warned) {
        (true, true) => "not applied".into(),
        (true, false) => "—".into(),
        (false, true) => format!("{} (approximated)", f.join(", ")),
        (false, false) => f.join(", "),
    }
}

fn needs_cell(v2: &[&str], v1: &[&str]) -> String {
    match (v2.is_empty(), v1.is_empty()) {
        (true, true) => "—".into(),
        _ if v2 == v1 => v2.join("; "),
        _ => {
            let side = |n: &[&str]| {
                if n.is_empty() {
                    "—".to_string()
                } else {
                    n.join("; ")
                }
            };
            format!("v2: {}; v1: {}", side(v2), side(v1))
        }
    }
}

/// What a container gets on a v2 and a v1 node with every feature.
fn container_cell(s: &ResolvedSlice) -> String {
    let mut parts = Vec::new();
    for (v, name) in [(Version::V2, "v2"), (Version::V1, "v1")] {
        let mut caps = full();
        if v == Version::V1 {
            caps.io_v2 = false;
            caps.io_cost = false;
        }
        let r = container::resources(s, &Node::uniform(v, caps));
        let oci = serde_json::to_value(&r.oci).unwrap();
        let mut got: Vec<String> = Vec::new();
        for (k, val) in oci.as_object().unwrap() {
            match val.as_object() {
                Some(u) => got.extend(u.keys().map(|f| format!("`{f}`"))),
                None => got.push(format!("OCI {k}")),
            }
        }
        let mut files: Vec<&str> = Vec::new();
        for w in &r.writes {
            if !files.contains(&w.file.as_str()) {
                files.push(&w.file);
            }
        }
        for f in files {
            let own = r.writes.iter().any(|w| w.file == f && !w.pod);
            let pod = r.writes.iter().any(|w| w.file == f && w.pod);
            got.push(match (own, pod) {
                (true, true) => format!("`{f}` after creation, and on the pod"),
                (true, false) => format!("`{f}` after creation"),
                _ => format!("`{f}` on the pod"),
            });
        }
        let text = if got.is_empty() {
            "not applied".to_string()
        } else {
            got.join(", ")
        };
        parts.push(format!("{name}: {text}"));
    }
    parts.join("; ")
}

const ROWS: &[&str] = &[
    "CPUWeight",
    "CPUWeight=idle",
    "CPUQuota",
    "CPUQuotaPeriodSec",
    "CPUSchedulingSliceSec",
    "AllowedCPUs",
    "AllowedMemoryNodes",
    "MemoryMin",
    "MemoryLow",
    "MemoryHigh",
    "MemoryMax",
    "MemorySwapMax",
    "IOWeight",
    "IODeviceWeight",
    "IODeviceLatencyTargetSec",
    "IOReadBandwidthMax",
    "IOWriteBandwidthMax",
    "IOReadIOPSMax",
    "IOWriteIOPSMax",
    "TasksMax",
    "HugetlbMax",
];

/// The table, in Markdown.
pub(crate) fn render() -> String {
    let mut out = String::from(
        "| directive | cgroup v2 | cgroup v1 and hybrid | not applied without | a container (NRI) |\n| --- | --- | --- | --- | --- |\n",
    );
    for d in ROWS {
        let s = slice(d);
        let mut v1caps = full();
        v1caps.io_v2 = false;
        v1caps.io_cost = false;
        v1caps.io_latency = false;
        let (f2, w2) = mapped(&s, Version::V2, &full());
        let (f1, w1) = mapped(&s, Version::V1, &v1caps);
        let (n2, n1) = (needs(&s, Version::V2), needs(&s, Version::V1));
        let both = |c: String| {
            if *d == "CPUSchedulingSliceSec" {
                "— (each task's scheduler slice, Linux 6.12)".into()
            } else {
                c
            }
        };
        out.push_str(&format!(
            "| `{d}` | {} | {} | {} | {} |\n",
            both(cell(&f2, w2)),
            both(cell(&f1, w1)),
            needs_cell(&n2, &n1),
            container_cell(&s),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    const BEGIN: &str =
        "<!-- generated by crates/bulkhead-cgroups/src/container/table.rs: do not edit -->\n";
    const END: &str = "<!-- end of the generated table -->";

    #[test]
    fn directive_table_matches_the_docs() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/DIRECTIVES.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let (head, rest) = doc.split_once(BEGIN).expect("the table's start marker");
        let (_, tail) = rest.split_once(END).expect("the table's end marker");
        let table = super::render();
        let want = format!("{head}{BEGIN}{table}{END}{tail}");
        if std::env::var_os("BULKHEAD_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
            return;
        }
        assert!(
            doc == want,
            "docs/DIRECTIVES.md's table differs from the mapping; run BULKHEAD_BLESS=1 cargo test -p bulkhead-cgroups directive_table\n{table}"
        );
    }
}
