//! The custom resource `BulkheadPlan` (bulkhead.io/v1alpha1, cluster-scoped): the plan file's
//! model (slices, huge pages, guard) and a node selector, with per-node status. The CRD's
//! schema is generated from these types (`bulkhead-agent crd`, deploy/crd.json).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const GROUP: &str = "bulkhead.io";
pub const VERSION: &str = "v1alpha1";
/// The node labels the agent sets.
pub const LABEL_PLAN: &str = "bulkhead.io/plan";
pub const LABEL_REVISION: &str = "bulkhead.io/plan-revision";
/// apiVersion and kind, for server-side apply bodies.
pub const API_VERSION_KIND: (&str, &str) = ("bulkhead.io/v1alpha1", "BulkheadPlan");

/// A plan for the nodes its selector matches: the same model as /etc/bulkhead/bulkhead.toml.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bulkhead.io",
    version = "v1alpha1",
    kind = "BulkheadPlan",
    plural = "bulkheadplans",
    shortname = "bhplan",
    status = "BulkheadPlanStatus",
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

/// What the agents report, one entry per node (each agent owns its own under server-side
/// apply, field manager `bulkhead-agent/<node>`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkheadPlanStatus {
    #[serde(default)]
    #[schemars(schema_with = "nodes_schema")]
    pub nodes: Vec<NodeStatus>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node's name.
    pub node: String,
    /// metadata.generation of the spec applied on this node (absent: none applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<i64>,
    /// Applied, Drifted, Degraded.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Directives this node cannot honour, as the resolver says.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Key figures of the slices the plan made here.
    #[serde(default)]
    pub slices: Vec<SliceFigures>,
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

fn nodes_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = g.subschema_for::<NodeStatus>();
    schemars::json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["node"],
    })
}

/// The CRD as pretty JSON (kubectl apply -f takes it), as `bulkhead-agent crd` prints it
/// and deploy/crd.json holds it.
pub fn crd_json() -> String {
    use kube::CustomResourceExt;
    let mut s = serde_json::to_string_pretty(&BulkheadPlan::crd()).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// deploy/crd.json is what the code generates.
    #[test]
    fn committed_crd_is_current() {
        let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/crd.json");
        let committed = std::fs::read_to_string(p).expect("deploy/crd.json");
        assert!(
            committed == crd_json(),
            "deploy/crd.json differs from the generated CRD: run `cargo run -p bulkhead-agent -- crd > deploy/crd.json`"
        );
    }

    #[test]
    fn schema_has_list_map_and_status() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(BulkheadPlan::crd()).unwrap();
        let v = &crd["spec"]["versions"][0];
        assert_eq!(v["name"], "v1alpha1");
        assert!(v["subresources"]["status"].is_object());
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "bhplan");
        let nodes = &v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["nodes"];
        assert_eq!(nodes["x-kubernetes-list-type"], "map");
        assert_eq!(nodes["x-kubernetes-list-map-keys"][0], "node");
        assert_eq!(nodes["items"]["required"][0], "node", "{nodes}");
    }
}
