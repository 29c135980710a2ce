//! This node's `BulkheadNode`: the one object in the API where the agent says what the node
//! runs. Owned by the Node (so it goes with it), written only by this agent with server-side
//! apply, and only when something changed (figures aside, refreshed every `figures_every`).
//! The pure parts (the summary, the bodies, the comparison) are apart from the two calls.

use crate::conditions::{find, APPLIED, DEGRADED, DRIFTED};
use crate::crd::{BulkheadNode, BulkheadNodeStatus, PlanReport, SliceFigures, API_VERSION};
use crate::decide::MAX_LABEL_VALUE;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The field manager of every write.
pub const MANAGER: &str = "bulkhead-agent";

/// The longest a write to the API may take: a server that accepts and never answers must not
/// hold up the drift checks.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The report for these plans' entries; `applied` is the plan the node runs.
pub fn summary(
    reports: BTreeMap<String, PlanReport>,
    applied: Option<(&str, i64)>,
) -> BulkheadNodeStatus {
    let state = state_word(&reports, applied.map(|a| a.0));
    let warning_count = reports.values().map(|r| r.warnings.len()).sum::<usize>();
    let stall = applied
        .and_then(|a| reports.get(a.0))
        .and_then(|r| r.stall.clone());
    BulkheadNodeStatus {
        stall,
        pod_stalls: Vec::new(),
        plan: applied.map(|a| a.0.to_string()),
        applied_revision: applied.map(|a| a.1),
        state: state.into(),
        warning_count: u32::try_from(warning_count).unwrap_or(u32::MAX),
        plans: reports.into_values().collect(),
    }
}

/// One word: the applied plan's worst condition; Degraded when only conflicting plans report.
fn state_word(reports: &BTreeMap<String, PlanReport>, applied: Option<&str>) -> &'static str {
    let is = |r: &PlanReport, t: &str| find(&r.conditions, t).is_some_and(|c| c.status == "True");
    let mine = applied.and_then(|a| reports.get(a));
    match mine {
        Some(r) if is(r, DEGRADED) => "Degraded",
        Some(r) if is(r, DRIFTED) => "Drifted",
        Some(r) if is(r, APPLIED) => "Applied",
        Some(_) => "Pending",
        None if reports.values().any(|r| is(r, DEGRADED)) => "Degraded",
        None if reports.is_empty() => "None",
        None => "Pending",
    }
}

/// Equal but for the figures' values, pressure included (they change all the time).
pub fn same_but_figures(a: &BulkheadNodeStatus, b: &BulkheadNodeStatus) -> bool {
    let strip = |s: &BulkheadNodeStatus| {
        let mut s = s.clone();
        s.stall = None;
        s.pod_stalls.clear();
        for r in &mut s.plans {
            r.stall = None;
            r.slices = r
                .slices
                .iter()
                .map(|f| SliceFigures {
                    name: f.name.clone(),
                    ..Default::default()
                })
                .collect();
        }
        s
    };
    strip(a) == strip(b)
}

/// The object's metadata: owned by the Node, labelled with the plan (when it fits a label).
pub fn meta_body(node: &str, uid: Option<&str>, plan: Option<&str>) -> serde_json::Value {
    let labels: BTreeMap<&str, &str> = plan
        .filter(|p| p.len() <= MAX_LABEL_VALUE)
        .map(|p| (crate::crd::LABEL_PLAN, p))
        .into_iter()
        .collect();
    let owners: Vec<serde_json::Value> = uid
        .map(|u| serde_json::json!({"apiVersion": "v1", "kind": "Node", "name": node, "uid": u}))
        .into_iter()
        .collect();
    serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": "BulkheadNode",
        "metadata": { "name": node, "labels": labels, "ownerReferences": owners },
        "spec": {},
    })
}

/// The status body.
pub fn status_body(node: &str, status: &BulkheadNodeStatus) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": "BulkheadNode",
        "metadata": { "name": node },
        "status": status,
    })
}

pub struct Reporter {
    api: Api<BulkheadNode>,
    node: String,
    figures_every: Duration,
    /// The status in the API as last read or written (None: not read yet).
    last: Option<BulkheadNodeStatus>,
    /// The metadata as last applied: (owner uid, plan label).
    meta: Option<(Option<String>, Option<String>)>,
    written: Option<Instant>,
}

impl Reporter {
    pub fn new(client: kube::Client, node: String, figures_every: Duration) -> Reporter {
        Reporter {
            api: Api::all(client),
            node,
            figures_every,
            last: None,
            meta: None,
            written: None,
        }
    }

    /// The report as the API holds it (read once; conditions keep their transition times
    /// across agent restarts). While the API cannot be read, an empty one.
    pub async fn previous(&mut self) -> BulkheadNodeStatus {
        if self.last.is_none() {
            match tokio::time::timeout(WRITE_TIMEOUT, self.api.get_opt(&self.node)).await {
                Ok(Ok(o)) => self.last = Some(o.and_then(|o| o.status).unwrap_or_default()),
                Ok(Err(e)) => {
                    crate::logging::log(format!("cannot read BulkheadNode {}: {e}", self.node))
                }
                Err(_) => crate::logging::log(format!(
                    "cannot read BulkheadNode {}: no answer",
                    self.node
                )),
            }
        }
        self.last.clone().unwrap_or_default()
    }

    /// Write the report, unless the API has it already.
    pub async fn publish(&mut self, node: &Node, status: BulkheadNodeStatus) {
        let fresh = self
            .written
            .is_some_and(|t| t.elapsed() < self.figures_every);
        let unchanged = self
            .last
            .as_ref()
            .is_some_and(|l| same_but_figures(l, &status));
        let meta = (node.metadata.uid.clone(), status.plan.clone());
        if unchanged && fresh && self.meta.as_ref() == Some(&meta) {
            return;
        }
        if self.meta.as_ref() != Some(&meta) {
            let body = meta_body(&self.node, meta.0.as_deref(), meta.1.as_deref());
            if !self.apply(false, &body).await {
                return;
            }
            self.meta = Some(meta);
        }
        if !(unchanged && fresh) && self.apply(true, &status_body(&self.node, &status)).await {
            self.last = Some(status);
            self.written = Some(Instant::now());
        }
    }

    async fn apply(&self, status: bool, body: &serde_json::Value) -> bool {
        let pp = PatchParams::apply(MANAGER).force();
        let patch = Patch::Apply(body);
        let name = self.node.as_str();
        let what = if status { "status" } else { "metadata" };
        let res = if status {
            tokio::time::timeout(WRITE_TIMEOUT, self.api.patch_status(name, &pp, &patch)).await
        } else {
            tokio::time::timeout(WRITE_TIMEOUT, self.api.patch(name, &pp, &patch)).await
        };
        match res {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                crate::logging::log(format!(
                    "cannot write the {what} of BulkheadNode {name}: {e}"
                ));
                false
            }
            Err(_) => {
                crate::logging::log(format!(
                    "cannot write the {what} of BulkheadNode {name}: no answer in {WRITE_TIMEOUT:?}"
                ));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, PsiData, PsiStats, SlicePsi};

    fn report(plan: &str, conds: &[(&str, &str)], warnings: usize) -> PlanReport {
        PlanReport {
            plan: plan.into(),
            applied_revision: Some(1),
            conditions: conds
                .iter()
                .map(|(t, s)| Condition {
                    type_: t.to_string(),
                    status: s.to_string(),
                    ..Default::default()
                })
                .collect(),
            warnings: vec!["w".into(); warnings],
            slices: vec![],
            stall: None,
        }
    }

    fn psi(cpu: f64, memory: f64, io: f64) -> SlicePsi {
        let stats = |avg10: f64| PsiStats {
            some: PsiData {
                avg10,
                ..Default::default()
            },
            full: Some(PsiData {
                avg10: avg10 / 2.0,
                ..Default::default()
            }),
        };
        SlicePsi {
            cpu: Some(stats(cpu)),
            memory: Some(stats(memory)),
            io: Some(stats(io)),
        }
    }

    #[test]
    fn the_node_shows_the_applied_plans_protected_slice_stall() {
        let worst = psi(1.0, 0.5, 7.5).worst("db-server").unwrap();
        assert_eq!(
            (worst.resource.as_str(), worst.some_avg10, worst.full_avg10),
            ("io", 7.5, Some(3.75))
        );
        assert_eq!(psi(9.0, 0.0, 2.0).worst("x").unwrap().resource, "cpu");
        assert!(SlicePsi::default().worst("x").is_none());
        let mut mine = report("a", &[("Applied", "True")], 0);
        mine.stall = Some(worst.clone());
        let mut other = report("b", &[("Degraded", "True")], 0);
        other.stall = psi(50.0, 0.0, 0.0).worst("elsewhere");
        let s = summary(map(vec![mine, other.clone()]), Some(("a", 1)));
        assert_eq!(s.stall, Some(worst));
        // Written once, as the node's: not again in its plan's report.
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["stall"].is_object(), "{json}");
        assert!(json["plans"][0].get("stall").is_none(), "{json}");
        // Only the applied plan's slice counts: a conflicting plan's is not the node's.
        assert_eq!(summary(map(vec![other]), None).stall, None);
    }

    #[test]
    fn pressure_alone_is_no_change() {
        let mut r = report("a", &[("Applied", "True")], 0);
        r.slices = vec![SliceFigures {
            name: "db-server".into(),
            psi: Some(psi(1.0, 1.0, 1.0)),
            ..Default::default()
        }];
        r.stall = r.slices[0].psi.as_ref().unwrap().worst("db-server");
        let a = summary(map(vec![r.clone()]), Some(("a", 1)));
        r.slices[0].psi = Some(psi(2.0, 3.0, 40.0));
        r.stall = r.slices[0].psi.as_ref().unwrap().worst("db-server");
        let mut b = summary(map(vec![r]), Some(("a", 1)));
        assert_ne!(a, b);
        assert!(same_but_figures(&a, &b));
        // Pods that stall come and go with the figures.
        b.pod_stalls = vec![crate::crd::PodStall {
            uid: "u".into(),
            qos: "burstable".into(),
            resource: "cpu".into(),
            some_avg10: 9.0,
            full_avg10: None,
        }];
        assert!(same_but_figures(&a, &b));
    }

    fn map(rs: Vec<PlanReport>) -> BTreeMap<String, PlanReport> {
        rs.into_iter().map(|r| (r.plan.clone(), r)).collect()
    }

    #[test]
    fn the_state_word_is_the_worst_condition_of_the_applied_plan() {
        let ok = report(
            "a",
            &[
                ("Applied", "True"),
                ("Drifted", "False"),
                ("Degraded", "False"),
            ],
            2,
        );
        let s = summary(map(vec![ok.clone()]), Some(("a", 3)));
        assert_eq!(
            (s.state.as_str(), s.applied_revision, s.warning_count),
            ("Applied", Some(3), 2)
        );
        let drift = report(
            "a",
            &[
                ("Applied", "False"),
                ("Drifted", "True"),
                ("Degraded", "False"),
            ],
            0,
        );
        assert_eq!(summary(map(vec![drift]), Some(("a", 3))).state, "Drifted");
        let bad = report("a", &[("Applied", "False"), ("Degraded", "True")], 0);
        assert_eq!(
            summary(map(vec![bad.clone()]), Some(("a", 3))).state,
            "Degraded"
        );
        // A conflict only: no plan runs, yet the node is Degraded.
        let lost = report("b", &[("Degraded", "True")], 0);
        let s = summary(map(vec![ok, lost.clone()]), Some(("a", 3)));
        assert_eq!((s.state.as_str(), s.plans.len()), ("Applied", 2));
        assert_eq!(summary(map(vec![lost]), None).state, "Degraded");
        assert_eq!(summary(BTreeMap::new(), None).state, "None");
        assert_eq!(
            summary(map(vec![report("a", &[], 0)]), Some(("a", 1))).state,
            "Pending"
        );
    }

    #[test]
    fn figures_alone_are_no_change() {
        let mut a = summary(
            map(vec![report("a", &[("Applied", "True")], 0)]),
            Some(("a", 1)),
        );
        a.plans[0].slices = vec![SliceFigures {
            name: "db".into(),
            cpu_usage_seconds: Some(1.0),
            ..Default::default()
        }];
        let mut b = a.clone();
        b.plans[0].slices[0].cpu_usage_seconds = Some(2.0);
        assert!(same_but_figures(&a, &b));
        b.plans[0].slices[0].name = "other".into();
        assert!(!same_but_figures(&a, &b));
    }

    #[test]
    fn metadata_is_owned_by_the_node_and_labelled_with_a_short_plan_name() {
        let m = meta_body("n1", Some("u-1"), Some("redis"));
        assert_eq!(m["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(m["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(m["metadata"]["labels"][crate::crd::LABEL_PLAN], "redis");
        let long = "p".repeat(MAX_LABEL_VALUE + 1);
        let m = meta_body("n1", None, Some(&long));
        assert!(m["metadata"]["labels"].as_object().unwrap().is_empty());
        assert!(m["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .is_empty());
    }
}
