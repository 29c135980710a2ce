//! The custom resources (bulkhead.io/v1alpha1, cluster-scoped): `BulkheadPlan`, the plan
//! file's model (slices, huge pages, guard) and a node selector; `BulkheadNode`, one node's
//! report (the plan it runs, conditions, warnings, figures). The CRDs' schemas are generated
//! from these types (`bulkhead-agent crd`, deploy/crds/).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const GROUP: &str = "bulkhead.io";
pub const VERSION: &str = "v1alpha1";
/// The node labels the agent sets.
pub const LABEL_PLAN: &str = "bulkhead.io/plan";
pub const LABEL_REVISION: &str = "bulkhead.io/plan-revision";
/// apiVersion, for server-side apply bodies.
pub const API_VERSION: &str = "bulkhead.io/v1alpha1";

/// A plan for the nodes its selector matches: the same model as /etc/bulkhead/bulkhead.toml.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bulkhead.io",
    version = "v1alpha1",
    kind = "BulkheadPlan",
    plural = "bulkheadplans",
    shortname = "bhplan",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BulkheadPlanSpec {
    /// The labels a node must have (all of them) to run this plan, as a DaemonSet's
    /// nodeSelector; empty selects every node.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Slices by name (`db-server` is the child of `db`, as in the plan file's
    /// `[slice.db-server]`), each a map of systemd directive names to values: a string, an
    /// integer, a boolean, a list, or a table such as `{value: "4%", min: "1200M"}`.
    #[serde(default)]
    #[schemars(schema_with = "slices_schema")]
    pub slices: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
    /// The plan file's `[hugepages]` section: pools, thp, mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "section_schema")]
    pub hugepages: Option<BTreeMap<String, serde_json::Value>>,
    /// The plan file's `[guard]` section: protect, sideloads, probe, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "section_schema")]
    pub guard: Option<BTreeMap<String, serde_json::Value>>,
}

/// One node's report (cluster-scoped, named after the node, written only by that node's
/// agent): the plan it runs and how each plan that selects it went. One small object per
/// node, not an entry per node in the plan: a shared status grows with the fleet, and every
/// agent watching plans would receive every node's writes (docs/FLEET.md, "Scale").
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bulkhead.io",
    version = "v1alpha1",
    kind = "BulkheadNode",
    plural = "bulkheadnodes",
    shortname = "bhnode",
    status = "BulkheadNodeStatus",
    printcolumn = r#"{"name":"Plan","type":"string","jsonPath":".status.plan"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".status.appliedRevision"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Warnings","type":"integer","jsonPath":".status.warningCount"}"#,
    printcolumn = r#"{"name":"Stall%","type":"number","jsonPath":".status.stall.someAvg10","description":"The protected slice's worst pressure stall (some, avg10, percent)"}"#,
    printcolumn = r#"{"name":"Stalled","type":"string","jsonPath":".status.stall.resource","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct BulkheadNodeSpec {}

/// A node's report, written whole by the node's agent (atomic for server-side apply).
// Atomic: the object's managedFields name `status` alone instead of each of its fields
// (smaller objects, less merge work in the API server at every figures round).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct BulkheadNodeStatus {
    /// The plan this node runs (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// metadata.generation of that plan as applied here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<i64>,
    /// One word for `kubectl get bhnode`: Applied, Drifted, Degraded, Pending or None.
    #[serde(default)]
    pub state: String,
    /// How many warnings the plans' reports hold.
    #[serde(default)]
    pub warning_count: u32,
    /// One report per plan that selects this node (more than one is a conflict).
    #[serde(default)]
    #[schemars(schema_with = "plans_schema")]
    pub plans: Vec<PlanReport>,
    /// How much the applied plan's protected slice (its `[guard] protect`) stalls: the
    /// fleet's view of which nodes' databases wait (absent: no guard, or no PSI here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<Stall>,
    /// The pods that stall most on this node, worst first: at most 5, only those whose
    /// tasks waited in the last 10 s (their pod cgroups' pressure, by pod UID).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_stalls: Vec<PodStall>,
}

/// A pod's worst pressure (PSI "some" of its pod cgroup, CPU, memory or I/O).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodStall {
    /// The pod's UID (its cgroup's name carries no namespace or name).
    pub uid: String,
    /// guaranteed, burstable or besteffort (the kubelet's QoS cgroup it is in); empty
    /// where the kubelet keeps no QoS cgroups.
    pub qos: String,
    /// cpu, memory or io.
    pub resource: String,
    /// Percent over the last 10 s.
    pub some_avg10: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_avg10: Option<f64>,
}

/// The worst of a slice's CPU, memory and I/O pressure (PSI "some": the share of time at
/// least one of its tasks waited for the resource).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Stall {
    pub slice: String,
    /// cpu, memory or io.
    pub resource: String,
    /// Percent over the last 10 s.
    pub some_avg10: f64,
    /// Percent over the last 10 s that all its tasks waited (absent for cpu where the
    /// kernel has no "full" line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_avg10: Option<f64>,
}

/// How one plan went on this node.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// The BulkheadPlan's name.
    pub plan: String,
    /// metadata.generation of the spec applied on this node (absent: none applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<i64>,
    /// Applied, Drifted, Degraded.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// What this node cannot honour or what disagrees with the kubelet, one line each.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Key figures of the slices the plan made here.
    #[serde(default)]
    pub slices: Vec<SliceFigures>,
    /// The plan's protected slice's worst stall, carried to [`BulkheadNodeStatus::stall`]
    /// when this is the applied plan; not written here (the node's report holds it once).
    #[serde(skip)]
    pub stall: Option<Stall>,
}

/// A condition, as Kubernetes' conventions have them.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Applied, Drifted or Degraded.
    #[serde(rename = "type")]
    pub type_: String,
    /// "True", "False" or "Unknown".
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    pub message: String,
    /// RFC 3339; changes only when status changes.
    pub last_transition_time: String,
    /// The generation this condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SliceFigures {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usage_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_current_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Pressure stall information, as the kubelet's summary API gives it per pod (absent
    /// where the slice's hierarchy has none: cgroup v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<SlicePsi>,
}

/// A slice's PSI per resource.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SlicePsi {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<PsiStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<PsiStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<PsiStats>,
}

/// One resource's pressure: "some" and "full" (as in `cpu.pressure`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PsiStats {
    pub some: PsiData,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<PsiData>,
}

/// Stall averages in percent over 10, 60 and 300 s, and the total stall in microseconds.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PsiData {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total: u64,
}

impl SlicePsi {
    /// The resource whose "some" avg10 is highest, as a [`Stall`] of `slice`.
    pub fn worst(&self, slice: &str) -> Option<Stall> {
        [
            ("cpu", &self.cpu),
            ("memory", &self.memory),
            ("io", &self.io),
        ]
        .into_iter()
        .filter_map(|(r, s)| s.as_ref().map(|s| (r, s)))
        .max_by(|a, b| a.1.some.avg10.total_cmp(&b.1.some.avg10))
        .map(|(r, s)| Stall {
            slice: slice.to_string(),
            resource: r.to_string(),
            some_avg10: s.some.avg10,
            full_avg10: s.full.as_ref().map(|f| f.avg10),
        })
    }
}

/// A cgroup's pressure as `bulkhead status` reads it, in the report's form.
impl From<&bulkhead::actions::status::Psi> for SlicePsi {
    fn from(p: &bulkhead::actions::status::Psi) -> SlicePsi {
        SlicePsi {
            cpu: p.cpu.as_ref().map(PsiStats::from),
            memory: p.memory.as_ref().map(PsiStats::from),
            io: p.io.as_ref().map(PsiStats::from),
        }
    }
}

impl From<&bulkhead::actions::status::Pressure> for PsiStats {
    fn from(p: &bulkhead::actions::status::Pressure) -> PsiStats {
        let data = |a: &bulkhead::actions::status::Avg| PsiData {
            avg10: a.avg10,
            avg60: a.avg60,
            avg300: a.avg300,
            total: a.total_us,
        };
        PsiStats {
            some: data(&p.some),
            full: p.full.as_ref().map(data),
        }
    }
}

fn any_value() -> serde_json::Value {
    serde_json::json!({ "x-kubernetes-preserve-unknown-fields": true })
}

fn slices_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "description": "Slices by name, each a map of directive names to values (see the plan file).",
        "additionalProperties": {
            "type": "object",
            "additionalProperties": any_value(),
        },
    })
}

fn section_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "additionalProperties": any_value(),
    })
}

fn plans_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = g.subschema_for::<PlanReport>();
    schemars::json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["plan"],
    })
}

/// Each CRD as pretty JSON, with the file name the chart's crds/ directory gives it.
pub fn crd_files() -> Vec<(String, String)> {
    use kube::CustomResourceExt;
    [BulkheadPlan::crd(), BulkheadNode::crd()]
        .into_iter()
        .map(|c| {
            let name = format!("{}.json", c.metadata.name.clone().unwrap_or_default());
            let mut s = serde_json::to_string_pretty(&c).unwrap_or_default();
            s.push('\n');
            (name, s)
        })
        .collect()
}

/// Both CRDs as one `List` (kubectl apply -f takes it), as `bulkhead-agent crd` prints it and
/// deploy/crd.json holds it.
pub fn crd_json() -> String {
    use kube::CustomResourceExt;
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [BulkheadPlan::crd(), BulkheadNode::crd()],
    });
    let mut s = serde_json::to_string_pretty(&list).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");

    /// deploy/crd.json and the chart's crds/ are what the code generates.
    #[test]
    fn committed_crds_are_current() {
        let regen = "run `cargo run -p bulkhead-agent -- crd > deploy/crd.json` and `cargo run -p bulkhead-agent -- crd --dir deploy/helm/bulkhead/crds`";
        let committed =
            std::fs::read_to_string(format!("{DEPLOY}/crd.json")).expect("deploy/crd.json");
        assert!(
            committed == crd_json(),
            "deploy/crd.json differs from the generated CRDs: {regen}"
        );
        for (name, text) in crd_files() {
            let p = format!("{DEPLOY}/helm/bulkhead/crds/{name}");
            let committed = std::fs::read_to_string(&p).unwrap_or_default();
            assert!(
                committed == text,
                "{p} differs from the generated CRD: {regen}"
            );
        }
    }

    #[test]
    fn schemas_are_cluster_scoped_with_status() {
        use kube::CustomResourceExt;
        let plan = serde_json::to_value(BulkheadPlan::crd()).unwrap();
        let v = &plan["spec"]["versions"][0];
        assert_eq!(v["name"], "v1alpha1");
        assert_eq!(plan["spec"]["scope"], "Cluster");
        assert_eq!(plan["spec"]["names"]["shortNames"][0], "bhplan");
        assert!(v["schema"]["openAPIV3Schema"]["properties"]["status"].is_null());

        let node = serde_json::to_value(BulkheadNode::crd()).unwrap();
        let v = &node["spec"]["versions"][0];
        assert_eq!(node["spec"]["scope"], "Cluster");
        assert_eq!(node["spec"]["names"]["shortNames"][0], "bhnode");
        assert!(v["subresources"]["status"].is_object());
        let status = &v["schema"]["openAPIV3Schema"]["properties"]["status"];
        assert_eq!(status["x-kubernetes-map-type"], "atomic", "{status}");
        let plans = &status["properties"]["plans"];
        assert_eq!(plans["x-kubernetes-list-type"], "map");
        assert_eq!(plans["x-kubernetes-list-map-keys"][0], "plan");
        assert_eq!(plans["items"]["required"][0], "plan", "{plans}");
        let cols = v["additionalPrinterColumns"].as_array().unwrap();
        let names: Vec<&str> = cols.iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(
            names,
            ["Plan", "Revision", "State", "Warnings", "Stall%", "Stalled", "Age"]
        );
    }
}
