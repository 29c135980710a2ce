//! The loop around the pure decision: gather the plans and this node's labels (from the
//! watchers' caches), decide, then carry it out on the node (the library) and in the API
//! (status by server-side apply, node labels). Every failure is logged and retried on the
//! next pass; nothing here ends the agent.

use crate::conditions::{condition, find, APPLIED, DEGRADED, DRIFTED};
use crate::convert;
use crate::crd::{BulkheadPlan, NodeStatus, API_VERSION_KIND};
use crate::decide::{self, PlanView};
use crate::machine::Machine;
use crate::state::State;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a write to the API may take: a server that accepts and never answers must not
/// hold up the drift checks.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the slices' figures are written when nothing else changed.
const FIGURES_EVERY: Duration = Duration::from_secs(60);

pub struct Agent {
    pub node: String,
    pub machine: Machine,
    pub plans: Api<BulkheadPlan>,
    pub nodes: Api<Node>,
    /// When this agent last wrote each plan's entry.
    written: HashMap<String, Instant>,
}

pub fn log(msg: impl AsRef<str>) {
    let t = k8s_openapi::jiff::Timestamp::now();
    eprintln!("{t} bulkhead-agent: {}", msg.as_ref());
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn my_entry<'a>(p: &'a BulkheadPlan, node: &str) -> Option<&'a NodeStatus> {
    p.status.as_ref()?.nodes.iter().find(|n| n.node == node)
}

fn view(p: &BulkheadPlan, node: &str) -> PlanView {
    PlanView {
        name: p.name_any(),
        generation: p.metadata.generation.unwrap_or(0),
        created: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        selector: p.spec.node_selector.clone(),
        deleting: p.metadata.deletion_timestamp.is_some(),
        has_entry: my_entry(p, node).is_some(),
    }
}

impl Agent {
    pub fn new(node: String, machine: Machine, client: kube::Client) -> Agent {
        Agent {
            node,
            machine,
            plans: Api::all(client.clone()),
            nodes: Api::all(client),
            written: HashMap::new(),
        }
    }

    fn manager(&self) -> String {
        format!("bulkhead-agent/{}", self.node)
    }

    /// One pass: `plans` and `node` as the watchers last saw them.
    pub async fn pass(&mut self, plans: &[Arc<BulkheadPlan>], node: &Node) {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let views: Vec<PlanView> = plans.iter().map(|p| view(p, &self.node)).collect();
        let state_file = self.machine.state_file();
        let mut state = match State::load(&state_file) {
            Ok(s) => s,
            Err(e) => {
                log(format!("cannot read the state ({e}); starting from none"));
                State::default()
            }
        };
        let d = decide::decide(&labels, &views, state.plan.as_deref());

        // What the previous plan made goes first; until it is gone (a slice with processes
        // is refused), nothing of another plan is applied, so nothing is forgotten.
        let mut removed = true;
        if d.remove_previous {
            let prev = state.plan.clone().unwrap_or_default();
            match self.machine.remove(&state.created) {
                Ok(()) => {
                    log(format!(
                        "plan {prev} no longer applies here: removed slices {:?}",
                        state.created
                    ));
                    state = State::default();
                    self.save(&state);
                }
                Err(e) => {
                    log(format!("cannot remove the slices of plan {prev}: {e}"));
                    removed = false;
                }
            }
        }

        for (loser, winner) in &d.losers {
            if let Some(p) = plans.iter().find(|p| &p.name_any() == loser) {
                let prev = my_entry(p, &self.node).cloned().unwrap_or_default();
                let g = p.metadata.generation;
                let t = now();
                let msg = format!(
                    "node {} is selected by plans {winner} and {loser}; {winner} is applied, nothing of {loser}",
                    self.node
                );
                let entry = NodeStatus {
                    node: self.node.clone(),
                    applied_revision: None,
                    conditions: vec![
                        condition(&prev.conditions, APPLIED, false, "Conflict", &msg, g, &t),
                        condition(&prev.conditions, DEGRADED, true, "Conflict", &msg, g, &t),
                    ],
                    warnings: vec![],
                    slices: vec![],
                };
                self.write(p, entry).await;
            }
        }

        for stale in &d.stale_entries {
            if let Some(p) = plans.iter().find(|p| &p.name_any() == stale) {
                self.clear(p).await;
            }
        }

        let mut applied: Option<(String, i64)> = None;
        if !removed {
            applied = state.plan.clone().zip(state.generation);
        } else if let Some((name, generation)) = &d.target {
            if let Some(p) = plans.iter().find(|p| &p.name_any() == name) {
                applied = self.apply_one(p, *generation, &d.rivals, &mut state).await;
            }
        }
        self.label(node, applied.as_ref().map(|(n, g)| (n.as_str(), *g)))
            .await;
    }

    fn save(&self, state: &State) {
        if let Err(e) = state.save(&self.machine.state_file()) {
            log(format!("cannot write the state: {e}"));
        }
    }

    /// Apply the target plan (or repair drift); its entry says how it went. Returns the plan
    /// and generation the node now runs, for the labels.
    async fn apply_one(
        &mut self,
        p: &BulkheadPlan,
        generation: i64,
        rivals: &[String],
        state: &mut State,
    ) -> Option<(String, i64)> {
        let name = p.name_any();
        let prev = my_entry(p, &self.node).cloned().unwrap_or_default();
        let g = Some(generation);
        let t = now();
        let same = state.plan.as_deref() == Some(name.as_str());
        // What the node runs of this plan before this pass.
        let running = if same { state.generation } else { None };
        let me = self.node.clone();
        let degraded = |ok_reason: &str, ok_msg: String| {
            if rivals.is_empty() {
                condition(&prev.conditions, DEGRADED, false, ok_reason, ok_msg, g, &t)
            } else {
                let msg = format!(
                    "node {me} is also selected by {}; only {name} is applied",
                    rivals.join(", ")
                );
                condition(&prev.conditions, DEGRADED, true, "Conflict", msg, g, &t)
            }
        };
        let drifted_prev = find(&prev.conditions, DRIFTED).cloned().unwrap_or_else(|| {
            condition(
                &[],
                DRIFTED,
                false,
                "NoDrift",
                "no change made outside the agent",
                g,
                &t,
            )
        });

        let drifted_kept = drifted_prev.clone();
        let failed = |reason: &str, msg: String| NodeStatus {
            node: me.clone(),
            applied_revision: running,
            conditions: vec![
                condition(&prev.conditions, APPLIED, false, reason, &msg, g, &t),
                drifted_kept.clone(),
                condition(&prev.conditions, DEGRADED, true, reason, &msg, g, &t),
            ],
            warnings: vec![],
            slices: vec![],
        };

        let text = match convert::to_plan(&name, &p.spec) {
            Ok((text, _)) => text,
            Err(e) => {
                let entry = failed("InvalidPlan", e.clone());
                if prev.conditions != entry.conditions {
                    log(format!("plan {name} generation {generation} refused: {e}"));
                }
                self.write(p, entry).await;
                return running.map(|r| (name, r));
            }
        };
        let pending = match self.machine.plan(&text) {
            Ok(x) => x,
            Err(e) => {
                log(format!("plan {name}: cannot plan the apply: {e}"));
                self.write(p, failed("ApplyFailed", e)).await;
                return running.map(|r| (name, r));
            }
        };
        let mut drifted = drifted_prev;
        if !pending.changes.is_empty() {
            let drift = running == Some(generation);
            if drift {
                let msg = format!(
                    "{} setting(s) changed outside the agent: {}",
                    pending.changes.len(),
                    pending.changes.join("; ")
                );
                log(format!("plan {name}: drift, re-applying: {msg}"));
                let mut entry = prev.clone();
                entry.node = self.node.clone();
                entry.conditions = vec![
                    condition(&prev.conditions, APPLIED, false, "Drifted", &msg, g, &t),
                    condition(
                        &prev.conditions,
                        DRIFTED,
                        true,
                        "DriftDetected",
                        &msg,
                        g,
                        &t,
                    ),
                    degraded("AsExpected", "the plan applies as written".into()),
                ];
                self.write(p, entry.clone()).await;
                drifted = condition(
                    &entry.conditions,
                    DRIFTED,
                    false,
                    "Repaired",
                    format!("re-applied at {t}: {msg}"),
                    g,
                    &t,
                );
            } else {
                log(format!(
                    "plan {name}: applying generation {generation} ({} change(s))",
                    pending.changes.len()
                ));
            }
        }
        if Machine::has_work(&pending) {
            if let Err(e) = self.machine.execute(&pending) {
                log(format!("plan {name}: apply failed: {e}"));
                self.write(p, failed("ApplyFailed", e)).await;
                return running.map(|r| (name, r));
            }
        }
        if !same {
            state.created.clear();
        }
        state.plan = Some(name.clone());
        state.generation = Some(generation);
        state.add_created(pending.missing.iter().cloned());
        self.save(state);

        let slices: Vec<String> = pending
            .plan
            .resolved
            .slices
            .iter()
            .map(|s| s.name().to_string())
            .collect();
        let ok_msg = if pending.warnings.is_empty() {
            "the plan applies as written".to_string()
        } else {
            format!(
                "{} directive(s) this node cannot honour: see warnings",
                pending.warnings.len()
            )
        };
        let entry = NodeStatus {
            node: self.node.clone(),
            applied_revision: Some(generation),
            conditions: vec![
                condition(
                    &prev.conditions,
                    APPLIED,
                    true,
                    "Applied",
                    format!(
                        "generation {generation} applied to {} slice(s)",
                        slices.len()
                    ),
                    g,
                    &t,
                ),
                drifted,
                degraded("AsExpected", ok_msg),
            ],
            warnings: pending.warnings.clone(),
            slices: self.machine.figures(&slices),
        };
        self.write(p, entry).await;
        Some((name, generation))
    }

    /// Write this node's entry, unless it says what the resource has already (figures
    /// aside, which are refreshed every FIGURES_EVERY).
    async fn write(&mut self, p: &BulkheadPlan, entry: NodeStatus) {
        let name = p.name_any();
        if let Some(cur) = my_entry(p, &self.node) {
            let strip = |e: &NodeStatus| NodeStatus {
                slices: e
                    .slices
                    .iter()
                    .map(|s| crate::crd::SliceFigures {
                        name: s.name.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..e.clone()
            };
            let fresh = self
                .written
                .get(&name)
                .is_some_and(|t| t.elapsed() < FIGURES_EVERY);
            if strip(cur) == strip(&entry) && fresh {
                return;
            }
        }
        let patch = serde_json::json!({
            "apiVersion": API_VERSION_KIND.0,
            "kind": API_VERSION_KIND.1,
            "metadata": { "name": name },
            "status": { "nodes": [entry] },
        });
        self.patch_status(&name, patch).await;
    }

    /// Remove this node's entry: apply a status with none (server-side apply drops what
    /// this manager no longer names).
    async fn clear(&mut self, p: &BulkheadPlan) {
        let name = p.name_any();
        let patch = serde_json::json!({
            "apiVersion": API_VERSION_KIND.0,
            "kind": API_VERSION_KIND.1,
            "metadata": { "name": name },
            "status": { "nodes": [] },
        });
        self.patch_status(&name, patch).await;
    }

    async fn patch_status(&mut self, name: &str, patch: serde_json::Value) {
        let pp = PatchParams::apply(&self.manager()).force();
        let body = Patch::Apply(&patch);
        let call = self.plans.patch_status(name, &pp, &body);
        match tokio::time::timeout(WRITE_TIMEOUT, call).await {
            Ok(Ok(_)) => {
                self.written.insert(name.to_string(), Instant::now());
            }
            Ok(Err(e)) => log(format!("cannot write the status of plan {name}: {e}")),
            Err(_) => log(format!(
                "cannot write the status of plan {name}: no answer in {WRITE_TIMEOUT:?}"
            )),
        }
    }

    /// Set or remove the node's plan labels where they differ.
    async fn label(&self, node: &Node, applied: Option<(&str, i64)>) {
        let have = node.metadata.labels.clone().unwrap_or_default();
        let want = decide::labels_for(applied);
        let diff: BTreeMap<&str, Option<String>> = want
            .into_iter()
            .filter(|(k, v)| have.get(*k) != v.as_ref())
            .collect();
        if diff.is_empty() {
            return;
        }
        let patch = serde_json::json!({ "metadata": { "labels": diff } });
        let pp = PatchParams::default();
        let body = Patch::Merge(&patch);
        let call = self.nodes.patch(&self.node, &pp, &body);
        match tokio::time::timeout(WRITE_TIMEOUT, call).await {
            Ok(Ok(_)) => log(format!("node {} labels: {diff:?}", self.node)),
            Ok(Err(e)) => log(format!("cannot label node {}: {e}", self.node)),
            Err(_) => log(format!(
                "cannot label node {}: no answer in {WRITE_TIMEOUT:?}",
                self.node
            )),
        }
    }
}
