//! `bulkhead-agent nri` (`bulkhead nri`): per-pod isolation through NRI, the runtime's plug-in
//! point (containerd 2.x, CRI-O). Pods ask with annotations in the bulkhead.io domain; this
//! module decides what a container gets. The wire protocol is the NRI project's own Go stub
//! (scripts/k8s/nri, `bulkhead-nri-stub`), which `serve` starts and answers one JSON line at a
//! time; the decision is here, with the plan file's parser (one table of directives).
//!
//! Annotations (on the pod; every container of it):
//! - `bulkhead.io/slice: NAME`: the directives of slice NAME of the plan the agent applied on
//!   this node (its state directory), as far as a container's cgroup can hold them.
//! - `bulkhead.io/DIRECTIVE: VALUE` (`bulkhead.io/CPUWeight: idle`, `bulkhead.io/MemoryHigh:
//!   512M`): one directive, parsed and checked as the plan file's `[slice.x]` would; only
//!   directives the operator allowed (`--allow`, the chart's `nri.allow`).
//!
//! Anything else in the domain is refused, naming the annotation; refused means the
//! container's creation fails with that message (an event on the pod), or with
//! `--on-refused log`, a log line and nothing applied to the pod. Pods without bulkhead.io
//! annotations are never even sent here by the stub.

pub mod stub;

use bulkhead::actions::host::Host;
use bulkhead::plan::ResolvedSlice;
use bulkhead::plan::{CpuWeight, Plan};
use bulkhead::units::Limit;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

pub const DOMAIN: &str = "bulkhead.io/";
/// The annotation naming a plan slice.
pub const SLICE: &str = "bulkhead.io/slice";
/// The directives an annotation may set when the operator allows them: those a container's
/// own cgroup can hold through NRI.
pub const MAPPABLE: [&str; 6] = [
    "CPUWeight",
    "CPUQuota",
    "MemoryHigh",
    "MemoryMax",
    "IOWeight",
    "TasksMax",
];
/// At most this many bulkhead.io annotations on one pod, and bytes in one value.
const MAX_ANNOTATIONS: usize = 32;
const MAX_VALUE: usize = 256;

/// The container being created, as the stub sends it.
#[derive(Debug, Clone, Deserialize)]
pub struct Request {
    pub seq: u64,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub pod: String,
    #[serde(default)]
    pub container: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// What the container gets (the stub's `adjust`); absent fields are left as the runtime has
/// them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Adjust {
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
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unified: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjust: Option<Adjust>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRefused {
    Fail,
    Log,
}

/// What the operator allowed and where the node's plan is.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Directives a `bulkhead.io/DIRECTIVE` annotation may set.
    pub allow: BTreeSet<String>,
    /// Slices `bulkhead.io/slice` may name (empty: any slice of the applied plan).
    pub slices: BTreeSet<String>,
    /// The agent's state directory (state.json, plan.toml).
    pub state_dir: PathBuf,
    pub on_refused: OnRefused,
}

/// The node's cgroup version as runc sees it: a hybrid host is v1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cgroups {
    V1,
    V2,
}

impl Cgroups {
    pub fn detect() -> Cgroups {
        if bulkhead::actions::host::pure_v2() {
            Cgroups::V2
        } else {
            Cgroups::V1
        }
    }
}

/// A control file the plugin writes itself once the container's cgroup exists: what the OCI
/// resources have no field for (cpu.idle and the BFQ weight on a v1 node), and the pod's own
/// cgroup for cpu.idle and the IO weight. Those two work between siblings only: a container
/// idle inside its pod competes with nothing, so the pod (the sibling of the other pods of
/// its QoS class) is marked too. The kubelet never writes either file, so nothing fights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The controller by its v2 name (`io` for v1's blkio), as the layout's hierarchies are looked up.
    pub controller: &'static str,
    pub file: &'static str,
    pub value: String,
    /// Into the pod's cgroup (the container's parent) instead of the container's.
    pub pod: bool,
}

/// The decision for one container: the adjustment, the files to write after creation, the
/// lines to log (what could not be honoured here), or the refusal.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    pub adjust: Adjust,
    pub writes: Vec<Write>,
    pub notes: Vec<String>,
}

impl Policy {
    /// Check the allow-list against what a container can hold.
    pub fn validate(&self) -> Result<(), String> {
        for d in &self.allow {
            if !MAPPABLE.contains(&d.as_str()) {
                return Err(format!(
                    "--allow {d}: not a directive a container's cgroup can take through NRI (one of {})",
                    MAPPABLE.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Decide for one pod's annotations (only those in the bulkhead.io domain are looked at).
    pub fn decide(
        &self,
        annotations: &BTreeMap<String, String>,
        cg: Cgroups,
        host: &Host,
    ) -> Result<Decision, String> {
        let ours: Vec<(&String, &String)> = annotations
            .iter()
            .filter(|(k, _)| k.starts_with(DOMAIN))
            .collect();
        if ours.len() > MAX_ANNOTATIONS {
            return Err(format!(
                "{} bulkhead.io annotations; at most {MAX_ANNOTATIONS}",
                ours.len()
            ));
        }
        let mut refused = vec![];
        let mut toml = String::from("[slice.pod]\n");
        let mut role = None;
        for (k, v) in ours {
            let key = &k[DOMAIN.len()..];
            if v.len() > MAX_VALUE {
                refused.push(format!("{k}: value longer than {MAX_VALUE} bytes"));
            } else if k == SLICE {
                role = Some(v.clone());
            } else if self.allow.contains(key) {
                toml.push_str(&format!("{key} = {}\n", toml_value(v)));
            } else if MAPPABLE.contains(&key) || bulkhead::plan::directive_names().contains(&key) {
                refused.push(format!(
                    "{k}: not allowed on this node (the operator allows {})",
                    list(&self.allow)
                ));
            } else {
                refused.push(format!(
                    "{k}: unknown (bulkhead.io/slice or an allowed directive: {})",
                    list(&self.allow)
                ));
            }
        }
        if !refused.is_empty() {
            return Err(format!("refused: {}", refused.join("; ")));
        }
        let mut d = Decision::default();
        if let Some(name) = role {
            let s = self.plan_slice(&name, host)?;
            map(&s, cg, &mut d);
        }
        if toml.lines().count() > 1 {
            let plan = Plan::parse(&toml, Some(std::path::Path::new("pod annotations")))
                .map_err(|e| annotation_error(&e))?;
            let r = plan.resolve(host).map_err(|e| annotation_error(&e))?;
            if let Some(s) = r.slices.iter().find(|s| s.name().as_str() == "pod") {
                map(s, cg, &mut d);
            }
        }
        Ok(d)
    }

    /// Slice `name` of the plan the agent applied on this node.
    fn plan_slice(&self, name: &str, host: &Host) -> Result<ResolvedSlice, String> {
        if !self.slices.is_empty() && !self.slices.contains(name) {
            return Err(format!(
                "refused: {SLICE}={name}: not a slice pods may take (allowed: {})",
                list(&self.slices)
            ));
        }
        let state = crate::state::State::load(&self.state_dir.join("state.json"))?;
        let Some(plan_name) = state.plan else {
            return Err(format!(
                "refused: {SLICE}={name}: no plan is applied on this node"
            ));
        };
        let file = self.state_dir.join("plan.toml");
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let plan = Plan::parse(&text, Some(&file)).map_err(|e| annotation_error(&e))?;
        let r = plan.resolve(host).map_err(|e| annotation_error(&e))?;
        r.slices
            .into_iter()
            .find(|s| !s.implicit && s.name().as_str() == name)
            .ok_or_else(|| format!("refused: {SLICE}={name}: plan {plan_name} has no slice {name}"))
    }
}

fn list(s: &BTreeSet<String>) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// An annotation's value as a TOML value: a whole number stays a number (CPUWeight = 50),
/// anything else is a string, escaped.
fn toml_value(v: &str) -> String {
    if !v.is_empty() && v.len() < 19 && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.to_string();
    }
    let mut s = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if c.is_control() => s.push_str(&format!("\\u{:04x}", c as u32)),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

fn annotation_error(e: &bulkhead::Error) -> String {
    format!("refused: {}", crate::machine::error_text(e))
}

fn limit_i64(l: Limit) -> i64 {
    match l {
        Limit::Bytes(b) => i64::try_from(b).unwrap_or(i64::MAX),
        Limit::Infinity => -1,
    }
}

/// What of a resolved slice a container's cgroup takes, on this node's cgroup version. What
/// it cannot take is a note (logged), as the agent warns for a slice.
fn map(s: &ResolvedSlice, cg: Cgroups, d: &mut Decision) {
    let (a, notes) = (&mut d.adjust, &mut d.notes);
    let write = |controller, file, value: String, pod| Write {
        controller,
        file,
        value,
        pod,
    };
    match (s.cpu_weight, cg) {
        (Some(CpuWeight::Weight(w)), Cgroups::V2) => {
            a.unified.insert("cpu.weight".into(), w.to_string());
        }
        (Some(CpuWeight::Weight(w)), Cgroups::V1) => {
            a.cpu_shares = Some(bulkhead::plan::convert::weight_to_shares(w));
        }
        (Some(CpuWeight::Idle), cg) => {
            if cg == Cgroups::V2 {
                a.unified.insert("cpu.idle".into(), "1".into());
            } else {
                // The v1 cpu controller has cpu.idle too (Linux 5.15), but OCI has no field
                // for it and runc refuses unified keys on v1: written after creation.
                d.writes.push(write("cpu", "cpu.idle", "1".into(), false));
            }
            d.writes.push(write("cpu", "cpu.idle", "1".into(), true));
        }
        (None, _) => {}
    }
    if let Some(m) = s.cpu_max {
        a.cpu_quota = Some(i64::try_from(m.quota_us).unwrap_or(i64::MAX));
        a.cpu_period = Some(i64::try_from(m.period_us).unwrap_or(i64::MAX));
    }
    if let Some(m) = s.memory_max {
        a.memory_limit = Some(limit_i64(m));
    }
    match (s.memory_high, cg) {
        (Some(h), Cgroups::V2) => {
            let v = h.bytes().map_or("max".to_string(), |b| b.to_string());
            a.unified.insert("memory.high".into(), v);
        }
        (Some(_), Cgroups::V1) => {
            notes.push("MemoryHigh: memory.high needs cgroup v2; not set on this node".into())
        }
        (None, _) => {}
    }
    match (s.io_weight, cg) {
        (Some(w), Cgroups::V2) => {
            let v = format!("default {w}");
            a.unified.insert("io.weight".into(), v.clone());
            d.writes.push(write("io", "io.weight", v, true));
        }
        (Some(w), Cgroups::V1) => {
            let bfq = bulkhead::plan::convert::io_weight_to_bfq(w).to_string();
            d.writes
                .push(write("io", "blkio.bfq.weight", bfq.clone(), false));
            d.writes.push(write("io", "blkio.bfq.weight", bfq, true));
        }
        (None, _) => {}
    }
    if let Some(t) = s.tasks_max {
        a.pids_limit = Some(limit_i64(t));
    }
}

/// The directory of a container's cgroup under a hierarchy's mount, from the runtime's
/// cgroups path: cgroupfs form (`/kubepods/burstable/pod1/abc`) or systemd form
/// (`kubepods-burstable-pod1.slice:cri-containerd:abc`). None for anything else (`..`,
/// empty parts, odd characters): the path comes from the runtime, but is checked all the same.
pub fn cgroup_dir(cgroups_path: &str) -> Option<PathBuf> {
    let ok = |c: &str| {
        !c.is_empty()
            && c != "."
            && c != ".."
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:@".contains(&b))
    };
    let rel: Vec<String> = if let Some(p) = cgroups_path.strip_prefix('/') {
        p.split('/').map(str::to_string).collect()
    } else {
        let mut parts = cgroups_path.splitn(3, ':');
        let (slice, prefix, name) = (parts.next()?, parts.next()?, parts.next()?);
        let stem = slice.strip_suffix(".slice")?;
        let mut v = vec![];
        let mut acc = String::new();
        for (i, part) in stem.split('-').enumerate() {
            if i > 0 {
                acc.push('-');
            }
            acc.push_str(part);
            v.push(format!("{acc}.slice"));
        }
        v.push(format!("{prefix}-{name}.scope"));
        v
    };
    (rel.len() < 32 && rel.iter().all(|c| ok(c))).then(|| rel.iter().collect())
}

#[cfg(test)]
mod tests;
