//! The agent's reconcile pass against a mock API server (kube-rs controller-rs's way: a
//! tower-test `mock::pair` behind `kube::Client::new`): each test feeds the pass its plans and
//! Node, answers the requests it makes, and checks which requests it made, in which order,
//! with which bodies. The plans here are refused before the node is touched (a kubelet slice,
//! an unknown directive), so no root and no cgroup is needed.

use bulkhead_agent::crd::{BulkheadPlan, BulkheadPlanSpec, LABEL_PLAN, LABEL_REVISION};
use bulkhead_agent::machine::Machine;
use bulkhead_agent::reconcile::Agent;
use bulkhead_testkit::TempDir;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::client::Body;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const NODE: &str = "node-1";
const NODES: &str = "/apis/bulkhead.io/v1alpha1/bulkheadnodes";

/// One request the pass made: method, path with query, and its body as JSON (Null if none).
#[derive(Debug)]
struct Seen {
    method: Method,
    uri: String,
    content_type: String,
    body: Value,
}

impl Seen {
    fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or_default()
    }
}

/// What the API server holds: the node's BulkheadNode report, if any.
struct Server {
    report: Option<Value>,
}

impl Server {
    /// The answer to one request: reads of a missing report are 404, writes echo an object.
    fn answer(&self, seen: &Seen) -> (StatusCode, Value) {
        let report = format!("{NODES}/{NODE}");
        match (&seen.method, seen.path()) {
            (&Method::GET, p) if p == report => match &self.report {
                Some(r) => (StatusCode::OK, r.clone()),
                None => (StatusCode::NOT_FOUND, not_found(NODE)),
            },
            (&Method::PATCH, p) if p == report || p == format!("{report}/status") => {
                (StatusCode::OK, bulkhead_node(None))
            }
            (&Method::PATCH, p) if p == format!("/api/v1/nodes/{NODE}") => (
                StatusCode::OK,
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}),
            ),
            _ => (StatusCode::NOT_FOUND, not_found(seen.path())),
        }
    }
}

fn not_found(what: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "NotFound",
           "code": 404, "message": format!("{what} not found")})
}

fn bulkhead_node(status: Option<Value>) -> Value {
    let mut o = json!({"apiVersion": "bulkhead.io/v1alpha1", "kind": "BulkheadNode",
                       "metadata": {"name": NODE}, "spec": {}});
    if let Some(s) = status {
        o["status"] = s;
    }
    o
}

/// Run one pass of an agent whose client talks to `server`; the requests it made, in order.
async fn pass(server: Server, plans: Vec<BulkheadPlan>, node: Node) -> Vec<Seen> {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let api = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.expect("the request's body");
            let s = Seen {
                method: parts.method,
                uri: parts.uri.to_string(),
                content_type: parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (code, answer) = server.answer(&s);
            let resp = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap();
            send.send_response(resp);
            seen.push(s);
        }
        seen
    });
    let state = TempDir::new("reconcile-test");
    let machine = Machine {
        cgroup_root: "/bulkhead-reconcile-test-never-made".into(),
        backend: Default::default(),
        state_dir: state.0.clone(),
    };
    let client = kube::Client::new(service, "default");
    let mut agent = Agent::new(NODE.into(), machine, client, Duration::from_secs(60), None);
    let plans: Vec<Arc<BulkheadPlan>> = plans.into_iter().map(Arc::new).collect();
    tokio::time::timeout(Duration::from_secs(30), agent.pass(&plans, &node))
        .await
        .expect("the pass ends");
    // The client goes with the agent: the server sees its last request.
    drop(agent);
    api.await.unwrap()
}

fn node(labels: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(NODE.into()),
            uid: Some("uid-1".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A plan selecting every node, with one slice and its directives.
fn plan(name: &str, created: &str, slice: &str, directives: Value) -> BulkheadPlan {
    let directives: BTreeMap<String, Value> = serde_json::from_value(directives).unwrap();
    let mut p = BulkheadPlan::new(
        name,
        BulkheadPlanSpec {
            slices: BTreeMap::from([(slice.to_string(), directives)]),
            ..Default::default()
        },
    );
    p.metadata.generation = Some(2);
    p.metadata.creation_timestamp = Some(Time(created.parse().unwrap()));
    p
}

/// The condition `type_` of `plan`'s entry in a status body.
fn condition<'a>(status: &'a Value, plan: &str, type_: &str) -> &'a Value {
    let entry = status["status"]["plans"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["plan"] == plan))
        .unwrap_or_else(|| panic!("no entry for plan {plan} in {status:#}"));
    entry["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition for {plan} in {entry:#}"))
}

/// The requests as `METHOD path` lines.
fn lines(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .map(|s| format!("{} {}", s.method, s.path()))
        .collect()
}

#[tokio::test]
async fn a_refused_plan_is_reported_and_the_node_is_left_alone() {
    let bad = plan(
        "redis",
        "2026-01-01T00:00:00Z",
        "kubepods",
        json!({"CPUWeight": 100}),
    );
    let seen = pass(Server { report: None }, vec![bad], node(&[])).await;
    // Read the report once, then write its metadata and its status; the Node has no plan
    // labels and gets none (nothing is applied).
    assert_eq!(
        lines(&seen),
        [
            format!("GET {NODES}/{NODE}"),
            format!("PATCH {NODES}/{NODE}"),
            format!("PATCH {NODES}/{NODE}/status"),
        ]
    );
    for write in &seen[1..] {
        assert_eq!(write.content_type, "application/apply-patch+yaml");
        assert!(
            write.uri.contains("fieldManager=bulkhead-agent") && write.uri.contains("force=true"),
            "{}",
            write.uri
        );
    }
    let meta = &seen[1].body;
    assert_eq!(meta["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(meta["metadata"]["labels"], json!({}));
    let status = &seen[2].body;
    assert_eq!(status["status"]["plan"], Value::Null);
    let applied = condition(status, "redis", "Applied");
    assert_eq!(applied["status"], "False");
    assert_eq!(applied["reason"], "InvalidPlan");
    let msg = applied["message"].as_str().unwrap();
    assert!(
        msg.contains("kubepods.slice belongs to the kubelet"),
        "{msg}"
    );
    assert_eq!(condition(status, "redis", "Degraded")["status"], "True");
}

#[tokio::test]
async fn of_two_plans_the_older_is_the_target_and_the_other_says_conflict() {
    let older = plan(
        "older",
        "2026-01-01T00:00:00Z",
        "db",
        json!({"NoSuchDirective": 1}),
    );
    let newer = plan(
        "newer",
        "2026-02-01T00:00:00Z",
        "db",
        json!({"CPUWeight": 100}),
    );
    let seen = pass(Server { report: None }, vec![newer, older], node(&[])).await;
    let status = &seen
        .iter()
        .find(|s| s.path().ends_with("/status"))
        .expect("a status write")
        .body;
    let loser = condition(status, "newer", "Applied");
    assert_eq!(loser["status"], "False");
    assert_eq!(loser["reason"], "Conflict");
    assert_eq!(
        loser["message"],
        format!(
            "node {NODE} is selected by plans older and newer; older is applied, nothing of newer"
        )
    );
    assert_eq!(condition(status, "newer", "Degraded")["reason"], "Conflict");
    // The target is refused by the parser: its own entry says so, not the conflict.
    let target = condition(status, "older", "Applied");
    assert_eq!(target["reason"], "InvalidPlan");
    assert!(
        target["message"]
            .as_str()
            .unwrap()
            .contains("NoSuchDirective"),
        "{target:#}"
    );
}

#[tokio::test]
async fn labels_of_a_plan_no_longer_applied_are_removed_and_the_report_kept_up() {
    // The API holds an older report (the agent restarted): its conditions are the previous
    // ones; the Node still carries the labels of a plan that is gone.
    let earlier = json!({"plan": "gone", "state": "Applied", "plans": []});
    let server = Server {
        report: Some(bulkhead_node(Some(earlier))),
    };
    let seen = pass(
        server,
        vec![],
        node(&[(LABEL_PLAN, "gone"), (LABEL_REVISION, "3")]),
    )
    .await;
    assert_eq!(
        lines(&seen),
        [
            format!("GET {NODES}/{NODE}"),
            format!("PATCH /api/v1/nodes/{NODE}"),
            format!("PATCH {NODES}/{NODE}"),
            format!("PATCH {NODES}/{NODE}/status"),
        ]
    );
    let labels = &seen[1];
    assert_eq!(labels.content_type, "application/merge-patch+json");
    assert_eq!(
        labels.body,
        json!({"metadata": {"labels": {LABEL_PLAN: null, LABEL_REVISION: null}}})
    );
    let status = &seen[3].body;
    assert_eq!(status["status"]["plan"], Value::Null);
    assert_eq!(status["status"]["plans"], json!([]));
}
