//! A resolved slice as a container's resources, for the NRI plugin: the OCI fields a runtime
//! sets when it creates the container (runc and crun through NRI), the control files written
//! once the container's cgroup exists (what OCI has no field for), and what this node's
//! kernel cannot apply, each with its reason. Built from the same [`Mapper`] the cgroupfs
//! backend plans slices with, so a directive means the same on a slice and on a container,
//! and a feature the kernel lacks is a finding here exactly as it is for `apply`, never a
//! write that fails.

use crate::fs::map::{fresh_default, Mapper, Want};
use crate::layout::{Caps, Kind, Layout, Version};
use bulkhead_plan::ResolvedSlice;
use bulkhead_sys::error::{Diagnostic, Severity};
use std::collections::BTreeMap;

/// The controllers a container's cgroup takes directives for.
const CONTROLLERS: [&str; 4] = ["cpu", "memory", "io", "pids"];

/// What a node's runtime and kernel offer a container: the cgroup version of each
/// controller as runc sees it (a hybrid host is v1 throughout) and the kernel's
/// capabilities.
#[derive(Debug, Clone)]
pub struct Node {
    pub versions: BTreeMap<&'static str, Version>,
    pub caps: Caps,
}

impl Node {
    /// The node as its layout says: pure v2 is v2; on a v1 or hybrid host runc manages the
    /// v1 hierarchies only (a controller found only on the hybrid's cgroup2 mount is missing).
    pub fn of(layout: &Layout, caps: Caps) -> Node {
        let mut versions = BTreeMap::new();
        for c in CONTROLLERS {
            let v = match layout.kind {
                Kind::Unified => layout.hierarchy(c).map(|_| Version::V2),
                Kind::Legacy | Kind::Hybrid => layout
                    .hierarchy(c)
                    .filter(|h| h.version == Version::V1)
                    .map(|_| Version::V1),
            };
            if let Some(v) = v {
                versions.insert(c, v);
            }
        }
        Node { versions, caps }
    }

    /// Every controller at one version (tests, and a node described by hand).
    pub fn uniform(version: Version, caps: Caps) -> Node {
        Node {
            versions: CONTROLLERS.iter().map(|c| (*c, version)).collect(),
            caps,
        }
    }

    /// Whether runc sees this node as cgroup v2.
    pub fn is_v2(&self) -> bool {
        self.versions.values().any(|v| *v == Version::V2)
    }
}

/// The OCI resources of a container (`linux.resources`), as NRI adjusts them; absent
/// fields stay as the runtime has them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Oci {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_shares: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_period: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<i64>,
    /// cgroup v2 files by name (runc writes them into the container's cgroup; refused on v1).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unified: BTreeMap<String, String>,
}

/// A control file written once the container's cgroup exists.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Write {
    /// The controller by its v2 name (`io` for v1's blkio): the hierarchy it is written in.
    pub controller: String,
    pub file: String,
    pub value: String,
    /// Into the pod's cgroup (the container's parent) instead of the container's.
    pub pod: bool,
}

impl Write {
    /// Whether this value gives its cgroup more than a fresh cgroup of the kernel has (the
    /// NRI plugin writes a pod's own cgroup only with values that do not): a weight above the
    /// file's default (`default 100`, BFQ's 100, a device line's weight alike), or a file
    /// whose direction is not known here set to anything but its default. `cpu.idle=1` lowers
    /// (the group runs only when nothing else wants the CPU); an unreadable value raises.
    pub fn raises(&self) -> bool {
        let value = self.value.trim();
        // A device line (`8:0 50`) is the file without `_device`, for that device.
        let base = self.file.strip_suffix("_device").unwrap_or(&self.file);
        let default = fresh_default(base);
        if base == "cpu.idle" {
            return value != "1" && Some(value) != default;
        }
        if !is_weight(base) {
            return Some(value) != fresh_default(&self.file);
        }
        // The weight is the last word: `default 50`, `8:0 50`, `50`; `8:0 default` clears a
        // device line back to the default.
        let last = |v: &str| v.split_whitespace().last().map(str::to_string);
        match last(value).as_deref() {
            Some("default") => false,
            Some(w) => match (
                w.parse::<u64>(),
                default.and_then(last).and_then(|d| d.parse::<u64>().ok()),
            ) {
                (Ok(w), Some(d)) => w > d,
                _ => true,
            },
            None => true,
        }
    }
}

/// Files whose number is a share against the siblings: more is more.
fn is_weight(file: &str) -> bool {
    matches!(
        file,
        "cpu.weight" | "cpu.shares" | "io.weight" | "io.bfq.weight" | "blkio.bfq.weight"
    )
}

/// One slice as a container gets it.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    pub oci: Oci,
    pub writes: Vec<Write>,
    /// What this node does not apply, and why (warnings), and what it applies differently
    /// (notes).
    pub findings: Vec<Diagnostic>,
}

impl Resources {
    /// The findings that are warnings: directives the node does not apply.
    pub fn unapplied(&self) -> impl Iterator<Item = &Diagnostic> {
        self.findings
            .iter()
            .filter(|d| d.severity != Severity::Note)
    }
}

/// Files whose value counts between siblings only (an idle container inside its pod competes
/// with nothing): written on the pod's cgroup too, the sibling of the other pods.
fn between_siblings(file: &str) -> bool {
    matches!(
        file,
        "cpu.idle" | "io.weight" | "io.bfq.weight" | "blkio.bfq.weight" | "blkio.bfq.weight_device"
    )
}

/// A value OCI has a field for, set there; false for any other file.
fn oci_field(oci: &mut Oci, file: &str, value: &str) -> bool {
    let num = |v: &str| match v {
        "max" | "-1" => Some(-1),
        v => v.parse::<i64>().ok(),
    };
    match file {
        "cpu.shares" => oci.cpu_shares = value.parse().ok(),
        "cpu.cfs_quota_us" => oci.cpu_quota = num(value),
        "cpu.cfs_period_us" => oci.cpu_period = num(value),
        "cpu.max" => {
            let mut it = value.split_whitespace();
            oci.cpu_quota = it.next().and_then(num);
            oci.cpu_period = it.next().and_then(num);
        }
        "memory.max" | "memory.limit_in_bytes" => oci.memory_limit = num(value),
        "pids.max" => oci.pids_limit = num(value),
        _ => return false,
    }
    true
}

/// The directives a container's cgroup cannot hold at all, whatever the kernel.
fn not_for_containers(s: &ResolvedSlice) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    if s.uses_cpuset() {
        out.push((
            "AllowedCPUs/AllowedMemoryNodes",
            "a container's cpuset belongs to the kubelet's CPU manager",
        ));
    }
    if !s.hugetlb_max.is_empty() {
        out.push((
            "HugetlbMax",
            "a container's huge page limits come from its pod's hugepages-* resources",
        ));
    }
    if s.sched_slice_ns.is_some() {
        out.push((
            "CPUSchedulingSliceSec",
            "it is set on a slice's tasks by bulkhead, not in a cgroup",
        ));
    }
    out
}

/// A resolved slice as a container on `node` takes it.
pub fn resources(s: &ResolvedSlice, node: &Node) -> Resources {
    let mut r = Resources::default();
    for (directive, why) in not_for_containers(s) {
        r.findings.push(
            Diagnostic::warning(format!("{directive} is not applied to a container: {why}"))
                .context(format!("[slice.{}]", s.name())),
        );
    }
    for c in CONTROLLERS {
        let Some(&version) = node.versions.get(c) else {
            if uses(s, c) {
                r.findings.push(
                    Diagnostic::warning(format!(
                        "the {c} directives are not applied: the node's runtime has no {c} controller it manages"
                    ))
                    .context(format!("[slice.{}]", s.name())),
                );
            }
            continue;
        };
        let mut m = Mapper {
            slice: s,
            caps: &node.caps,
            inherited_cpuset: Default::default(),
            swappiness: 60,
            page_sizes: Vec::new(),
            wants: Vec::new(),
            warnings: Vec::new(),
        };
        m.map(c, version);
        r.findings.append(&mut m.warnings);
        for w in m.wants.into_iter().filter(Want::planned) {
            place(&mut r, c, version, w);
        }
    }
    r
}

/// Whether the slice sets anything of a controller.
fn uses(s: &ResolvedSlice, controller: &str) -> bool {
    match controller {
        "cpu" => s.cpu_weight.is_some() || s.cpu_max.is_some(),
        "memory" => {
            s.memory_max.is_some()
                || s.memory_high.is_some()
                || s.memory_low.is_some()
                || s.memory_min.is_some()
                || s.memory_swap_max.is_some()
        }
        "io" => {
            s.io_weight.is_some()
                || !s.io_max.is_empty()
                || !s.io_device_weight.is_empty()
                || !s.io_latency.is_empty()
        }
        "pids" => s.tasks_max.is_some(),
        _ => false,
    }
}

/// One planned file: an OCI field, a unified key (v2) or a write after creation (v1, and
/// v2 files of several lines, which take one line per write); on the pod too where the value
/// counts between siblings.
fn place(r: &mut Resources, controller: &str, version: Version, w: Want) {
    let (file, lines): (String, Vec<String>) = match w {
        Want::Value {
            file,
            value,
            before,
            ..
        } => {
            // The runtime orders what it sets through OCI (runc opens v1's memory+swap
            // limit first itself); a file written here gets its `before` first.
            if oci_field(&mut r.oci, &file, &value) {
                return;
            }
            if let Some((bfile, bvalue)) = before {
                r.writes.push(Write {
                    controller: controller.into(),
                    file: bfile,
                    value: bvalue,
                    pod: false,
                });
            }
            (file, vec![value])
        }
        Want::Lines { file, lines, .. } => {
            let lines = lines.iter().map(|(k, v)| format!("{k} {v}")).collect();
            (file, lines)
        }
    };
    let write = |pod: bool| -> Vec<Write> {
        lines
            .iter()
            .map(|l| Write {
                controller: controller.into(),
                file: file.clone(),
                value: l.clone(),
                pod,
            })
            .collect()
    };
    let pod = if between_siblings(&file) {
        write(true)
    } else {
        Vec::new()
    };
    if version == Version::V2 && lines.len() == 1 {
        r.oci.unified.insert(file.clone(), lines[0].clone());
    } else {
        r.writes.extend(write(false));
    }
    r.writes.extend(pod);
}

#[cfg(test)]
mod table;
#[cfg(test)]
mod tests;
