//! `bulkhead-agent nri` (`bulkhead nri`): per-pod isolation through NRI, the runtime's plug-in
//! point (containerd 2.x, CRI-O). Pods ask with annotations in the bulkhead.io domain; this
//! module decides what a container gets. The wire protocol is the NRI project's own Go stub
//! (scripts/k8s/nri, `bulkhead-nri-stub`), which `serve` starts and answers one JSON line at a
//! time; the decision is here, with the plan file's parser (one table of directives).
//!
//! Annotations (on the pod; every container of it), from the namespaces the operator lists
//! (`--namespace`, the chart's `nri.namespaces`; none by default, `*` for every namespace: a
//! namespace is Kubernetes' unit of trust, its pod authors one tenant):
//! - `bulkhead.io/slice: NAME`: the directives of slice NAME of the plan the agent applied on
//!   this node (its state directory), as far as a container's cgroup can hold them; only
//!   slices the operator listed (`--slice`, the chart's `nri.slices`; none by default).
//! - `bulkhead.io/DIRECTIVE: VALUE` (`bulkhead.io/CPUWeight: idle`, `bulkhead.io/MemoryHigh:
//!   512M`): one directive, parsed and checked as the plan file's `[slice.x]` would; only
//!   directives the operator allowed (`--allow`, the chart's `nri.allow`; none by default).
//!
//! A pod's own cgroup (the sibling of the other pods) is written only with values that do not
//! raise it above a fresh cgroup's (`Write::raises`, the library's answer): marking it idle
//! or giving it a lower I/O weight, never a higher one. A higher value is set on the
//! container alone (where it counts only against the pod's other containers) and said.
//!
//! What a container's cgroup takes of a slice, on this node's layout and kernel, is decided by
//! the library's one mapping (`bulkhead::actions::container`, the mapping `apply` uses): a
//! directive the kernel cannot apply (IOWeight without BFQ or io.cost, MemoryHigh on v1) is a
//! finding with its reason, never a write that fails.
//!
//! Anything else in the domain is refused, naming the annotation. By default
//! (`--on-refused log`) a refused annotation or a directive the node does not apply is
//! logged and reported on the pod as a Warning event (`kubectl describe pod`), and the
//! container starts with what does apply; with `--on-refused fail` (the operator's explicit
//! choice: fail closed) the container's creation fails with that message instead. Pods
//! without bulkhead.io annotations are never even sent here by the stub.

pub mod events;
pub mod stub;

use bulkhead::actions::container::{self, Node};
use bulkhead::actions::host::Host;
use bulkhead::plan::{Plan, ResolvedSlice};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

pub const DOMAIN: &str = "bulkhead.io/";
/// The annotation naming a plan slice.
pub const SLICE: &str = "bulkhead.io/slice";
/// In `--namespace`: every namespace.
pub const ANY_NAMESPACE: &str = "*";
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
    /// The pod's UID (its events name it).
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub container: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// What the container gets (the stub's `adjust`): the OCI resources the library's mapping
/// decided; absent fields are left as the runtime has them.
pub type Adjust = container::Oci;

/// A control file written once the container's cgroup exists (the library's mapping names
/// it: what OCI has no field for, and the pod's own cgroup for values that count between
/// siblings).
pub use container::Write;

#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjust: Option<Adjust>,
}

/// What a refused annotation, or a directive this node does not apply, does to the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRefused {
    /// Fail its creation (fail closed: the operator's explicit choice).
    Fail,
    /// Start it with what applies, log and report the rest on the pod (the default).
    Log,
}

/// What the operator allowed and where the node's plan is.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Directives a `bulkhead.io/DIRECTIVE` annotation may set.
    pub allow: BTreeSet<String>,
    /// Slices `bulkhead.io/slice` may name (empty: none).
    pub slices: BTreeSet<String>,
    /// Namespaces whose pods may use bulkhead.io annotations at all (empty: none;
    /// `ANY_NAMESPACE`: every namespace).
    pub namespaces: BTreeSet<String>,
    /// The agent's state directory (state.json, plan.toml).
    pub state_dir: PathBuf,
    pub on_refused: OnRefused,
}

/// The decision for one container: the adjustment, the files to write after creation, what
/// this node does not apply (logged and reported on the pod) and how it applies the rest
/// differently (logged), or the refusal.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    pub adjust: Adjust,
    pub writes: Vec<Write>,
    /// Directives this node does not apply, each with its reason.
    pub unapplied: Vec<String>,
    /// How it applies some differently (v1 weights cover reads and direct I/O only, ...).
    pub notes: Vec<String>,
}

impl Policy {
    /// Check the allow-list against what a container can hold, and the slice and namespace
    /// lists' names.
    pub fn validate(&self) -> Result<(), String> {
        for d in &self.allow {
            if !MAPPABLE.contains(&d.as_str()) {
                return Err(format!(
                    "--allow {d}: not a directive a container's cgroup can take through NRI (one of {})",
                    MAPPABLE.join(", ")
                ));
            }
        }
        for s in &self.slices {
            if bulkhead::plan::SliceName::parse(s).is_err() {
                return Err(format!(
                    "--slice {s:?}: not a slice name (list the slices pods may take by name; there is no wildcard)"
                ));
            }
        }
        for n in &self.namespaces {
            if n != ANY_NAMESPACE && !namespace_name(n) {
                return Err(format!(
                    "--namespace {n:?}: not a namespace name (lowercase letters, digits and '-', at most 63), nor {ANY_NAMESPACE:?} for every namespace"
                ));
            }
        }
        Ok(())
    }

    /// Whether pods of `namespace` may use bulkhead.io annotations.
    pub fn namespace_allowed(&self, namespace: &str) -> bool {
        self.namespaces.contains(ANY_NAMESPACE) || self.namespaces.contains(namespace)
    }

    /// The namespaces, for the log: `every namespace`, `none`, or the list.
    pub fn namespaces_text(&self) -> String {
        if self.namespaces.contains(ANY_NAMESPACE) {
            "every namespace".into()
        } else {
            list(&self.namespaces)
        }
    }

    /// Decide for one pod's annotations (only those in the bulkhead.io domain are looked at),
    /// the pod being in `namespace`.
    pub fn decide(
        &self,
        namespace: &str,
        annotations: &BTreeMap<String, String>,
        node: &Node,
        host: &Host,
    ) -> Result<Decision, String> {
        let ours: Vec<(&String, &String)> = annotations
            .iter()
            .filter(|(k, _)| k.starts_with(DOMAIN))
            .collect();
        if ours.is_empty() {
            return Ok(Decision::default());
        }
        if !self.namespace_allowed(namespace) {
            let keys: Vec<&str> = ours.iter().map(|(k, _)| k.as_str()).collect();
            return Err(format!(
                "refused: {}: pods of namespace {namespace:?} may not use bulkhead.io annotations on this node (the operator allows namespaces: {}; nri.namespaces in the chart, --namespace)",
                keys.join(", "),
                self.namespaces_text()
            ));
        }
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
                match self.slice_refused(v) {
                    Some(why) => refused.push(why),
                    None => role = Some(v.clone()),
                }
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
            take(&s, node, &mut d);
        }
        if toml.lines().count() > 1 {
            let plan = Plan::parse(&toml, Some(std::path::Path::new("pod annotations")))
                .map_err(|e| annotation_error(&e))?;
            let r = plan.resolve(host).map_err(|e| annotation_error(&e))?;
            if let Some(s) = r.slices.iter().find(|s| s.name().as_str() == "pod") {
                take(s, node, &mut d);
            }
        }
        if self.on_refused == OnRefused::Fail && !d.unapplied.is_empty() {
            return Err(format!(
                "refused: not applied on this node: {}",
                d.unapplied.join("; ")
            ));
        }
        Ok(d)
    }

    /// Why `bulkhead.io/slice: name` is refused, if it is: only slices the operator listed.
    fn slice_refused(&self, name: &str) -> Option<String> {
        if self.slices.is_empty() {
            Some(format!(
                "{SLICE}={name}: no slice may be taken on this node (the operator lists the slices pods may take: nri.slices in the chart, --slice)"
            ))
        } else if !self.slices.contains(name) {
            Some(format!(
                "{SLICE}={name}: not a slice pods may take (allowed: {}; nri.slices in the chart, --slice)",
                list(&self.slices)
            ))
        } else {
            None
        }
    }

    /// Slice `name` of the plan the agent applied on this node (one `slice_refused` let
    /// through).
    fn plan_slice(&self, name: &str, host: &Host) -> Result<ResolvedSlice, String> {
        if let Some(why) = self.slice_refused(name) {
            return Err(format!("refused: {why}"));
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

/// A Kubernetes namespace's name (an RFC 1123 label).
fn namespace_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 63
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !n.starts_with('-')
        && !n.ends_with('-')
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

/// What of a resolved slice a container's cgroup takes on this node (the library's mapping),
/// added to the decision; what it does not take is said with its reason. A write on the
/// pod's own cgroup that would raise it above a fresh cgroup's value is left out (the
/// container keeps its own copy of the value) and said in the notes.
fn take(s: &ResolvedSlice, node: &Node, d: &mut Decision) {
    let mut r = container::resources(s, node);
    let from = if s.name().as_str() == "pod" {
        String::new()
    } else {
        format!("{SLICE}={}: ", s.name())
    };
    for f in &r.findings {
        let text = format!("{from}{}", f.message);
        if f.severity == bulkhead::error::Severity::Note {
            d.notes.push(text);
        } else {
            d.unapplied.push(text);
        }
    }
    for w in r.writes.iter().filter(|w| w.pod && w.raises()) {
        d.notes.push(format!(
            "{from}{}={}: set on the container only, not on its pod: a pod's own cgroup is never given more than a new cgroup has (only values at or below the default, such as an idle mark or a lower weight)",
            w.file, w.value
        ));
    }
    r.writes.retain(|w| !(w.pod && w.raises()));
    merge(&mut d.adjust, r.oci);
    d.writes.extend(r.writes);
}

/// A later adjustment (the pod's own annotations) over an earlier one (its slice).
fn merge(into: &mut Adjust, from: Adjust) {
    into.cpu_shares = from.cpu_shares.or(into.cpu_shares);
    into.cpu_quota = from.cpu_quota.or(into.cpu_quota);
    into.cpu_period = from.cpu_period.or(into.cpu_period);
    into.memory_limit = from.memory_limit.or(into.memory_limit);
    into.pids_limit = from.pids_limit.or(into.pids_limit);
    into.unified.extend(from.unified);
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
