//! The loop around the pure decision: gather the plans and this node's labels (from the
//! watchers' caches), decide, then carry it out on the node (the library) and in the API
//! (the node's BulkheadNode report, node labels). Every failure is logged and retried on the
//! next pass; nothing here ends the agent.

use crate::conditions::{condition, find, APPLIED, DEGRADED, DRIFTED};
use crate::convert;
use crate::crd::{BulkheadNodeStatus, BulkheadPlan, Condition, PlanReport, SliceFigures, Stall};
use crate::decide::{self, PlanView};
use crate::kubelet::{self, KubeletConfig};
use crate::logging::log;
use crate::machine::{Machine, Pending};
use crate::report::{self, Reporter, WRITE_TIMEOUT};
use crate::state::State;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The reports of one pass, by plan name.
type Reports = BTreeMap<String, PlanReport>;

pub struct Agent {
    pub node: String,
    pub machine: Machine,
    pub nodes: Api<Node>,
    reporter: Reporter,
    /// The kubelet's configuration file (None: not checked).
    kubelet_config: Option<std::path::PathBuf>,
    /// Said in the log that the file is missing.
    kubelet_missing_said: bool,
    /// The node's cgroup version was said (once: it does not change while the node runs).
    cgroups_said: bool,
}

/// The kubelet's configuration as read this pass, and why it could not be read.
struct KubeletView {
    cfg: KubeletConfig,
    problem: Option<String>,
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn view(p: &BulkheadPlan) -> PlanView {
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
    }
}

/// The worst stall of the plan's protected slice (its `[guard] protect`), from its figures.
fn protected_stall(figures: &[SliceFigures], pending: &Pending) -> Option<Stall> {
    let guard = pending.plan.resolved.plan.guard.as_ref()?;
    let name = guard.protect.to_string();
    let f = figures.iter().find(|f| f.name == name)?;
    f.psi.as_ref()?.worst(&f.name)
}

fn previous(last: &BulkheadNodeStatus, plan: &str) -> PlanReport {
    last.plans
        .iter()
        .find(|r| r.plan == plan)
        .cloned()
        .unwrap_or_default()
}

impl Agent {
    /// `figures_every`: how often the slices' figures are written when nothing else changed.
    pub fn new(
        node: String,
        machine: Machine,
        client: kube::Client,
        figures_every: Duration,
        kubelet_config: Option<std::path::PathBuf>,
    ) -> Agent {
        Agent {
            reporter: Reporter::new(client.clone(), node.clone(), figures_every),
            node,
            machine,
            nodes: Api::all(client),
            kubelet_config,
            kubelet_missing_said: false,
            cgroups_said: false,
        }
    }

    /// Read the kubelet's configuration (every pass: the kubelet may be reconfigured). A
    /// missing file is said once in the log (not every distribution writes one); a file that
    /// cannot be read or parsed is a warning in the report.
    fn kubelet(&mut self) -> KubeletView {
        let view = self.kubelet_config();
        if !self.cgroups_said {
            self.cgroups_said = true;
            if let Some(n) = node_cgroups_notice(view.problem.is_none().then_some(&view.cfg)) {
                log(n);
            }
        }
        view
    }

    fn kubelet_config(&mut self) -> KubeletView {
        let none = |problem| KubeletView {
            cfg: KubeletConfig::default(),
            problem,
        };
        let Some(path) = &self.kubelet_config else {
            return none(None);
        };
        if !path.exists() {
            if !self.kubelet_missing_said {
                log(format!(
                    "{}: no kubelet configuration here; plans are checked against the Node object only",
                    path.display()
                ));
                self.kubelet_missing_said = true;
            }
            return none(None);
        }
        self.kubelet_missing_said = false;
        match kubelet::load(path) {
            Ok(cfg) => KubeletView { cfg, problem: None },
            Err(e) => none(Some(format!(
                "{e}; the plan is not checked against the kubelet's configuration"
            ))),
        }
    }

    /// One pass: `plans` and `node` as the watchers last saw them.
    pub async fn pass(&mut self, plans: &[Arc<BulkheadPlan>], node: &Node) {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let views: Vec<PlanView> = plans.iter().map(|p| view(p)).collect();
        let last = self.reporter.previous().await;
        let mut state = match State::load(&self.machine.state_file()) {
            Ok(s) => s,
            Err(e) => {
                log(format!("cannot read the state ({e}); starting from none"));
                State::default()
            }
        };
        let d = decide::decide(&labels, &views, state.plan.as_deref());
        let mut reports = Reports::new();

        // What the previous plan made goes first; until it is gone (a slice with processes
        // is refused), nothing of another plan is applied, so nothing is forgotten.
        let removed = !d.remove_previous || self.remove_previous(&mut state, &last, &mut reports);

        for (loser, winner) in &d.losers {
            if let Some(p) = plans.iter().find(|p| &p.name_any() == loser) {
                let r = self.conflict(p, winner, &previous(&last, loser));
                reports.insert(loser.clone(), r);
            }
        }

        let mut applied: Option<(String, i64)> = None;
        if !removed {
            applied = state.plan.clone().zip(state.generation);
        } else if let Some((name, generation)) = &d.target {
            if let Some(p) = plans.iter().find(|p| &p.name_any() == name) {
                let kubelet = self.kubelet();
                let cx = Pass {
                    node,
                    last: &last,
                    rivals: &d.rivals,
                    kubelet: &kubelet,
                };
                applied = self
                    .apply_one(p, *generation, &cx, &mut state, &mut reports)
                    .await;
            }
        }
        let applied = applied.as_ref().map(|(n, g)| (n.as_str(), *g));
        self.label(node, applied).await;
        let mut status = report::summary(reports, applied);
        let kubelet = self.kubelet_config();
        status.pod_stalls = self.machine.pod_stalls(&kubelet.cfg);
        self.reporter.publish(node, status).await;
    }

    /// The chart is being uninstalled: remove what the applied plan made (slices, huge page
    /// settings), the node's plan labels, and say so in the report. Errors are logged.
    pub async fn uninstall(&mut self, node: &Node) -> Result<(), String> {
        let state = State::load(&self.machine.state_file()).unwrap_or_default();
        let res = self
            .machine
            .remove(&state.created)
            .and_then(|()| self.machine.reset_hugepages());
        if let Err(e) = &res {
            log(format!(
                "uninstall: removing what plan {:?} made failed: {e}",
                state.plan
            ));
        } else {
            log(format!(
                "uninstall: removed slices {:?} of plan {:?}; huge page settings as they were",
                state.created, state.plan
            ));
            self.save(&State::default());
        }
        self.label(node, None).await;
        self.reporter
            .publish(node, report::summary(Reports::new(), None))
            .await;
        res
    }

    /// Remove what the previous plan made; false (and its report says why) when it cannot.
    fn remove_previous(
        &mut self,
        state: &mut State,
        last: &BulkheadNodeStatus,
        reports: &mut Reports,
    ) -> bool {
        let prev = state.plan.clone().unwrap_or_default();
        let res = self
            .machine
            .remove(&state.created)
            .and_then(|()| self.machine.reset_hugepages());
        match res {
            Ok(()) => {
                log(format!(
                    "plan {prev} no longer applies here: removed slices {:?}; huge page settings as they were",
                    state.created
                ));
                *state = State::default();
                self.save(state);
                true
            }
            Err(e) => {
                let msg = format!(
                    "plan {prev} no longer applies here, but removing what it made failed: {e}"
                );
                log(&msg);
                let mut r = previous(last, &prev);
                r.plan = prev.clone();
                let t = now();
                let g = state.generation;
                r.conditions = vec![
                    condition(&r.conditions, APPLIED, true, "RemoveFailed", &msg, g, &t),
                    condition(&r.conditions, DEGRADED, true, "RemoveFailed", &msg, g, &t),
                ];
                reports.insert(prev, r);
                false
            }
        }
    }

    /// The report of a plan that selects this node but is not applied here.
    fn conflict(&self, p: &BulkheadPlan, winner: &str, prev: &PlanReport) -> PlanReport {
        let loser = p.name_any();
        let g = p.metadata.generation;
        let t = now();
        let msg = format!(
            "node {} is selected by plans {winner} and {loser}; {winner} is applied, nothing of {loser}",
            self.node
        );
        PlanReport {
            plan: loser,
            applied_revision: None,
            conditions: vec![
                condition(&prev.conditions, APPLIED, false, "Conflict", &msg, g, &t),
                condition(&prev.conditions, DEGRADED, true, "Conflict", &msg, g, &t),
            ],
            warnings: vec![],
            slices: vec![],
            stall: None,
        }
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
        cx: &Pass<'_>,
        state: &mut State,
        reports: &mut Reports,
    ) -> Option<(String, i64)> {
        let a = Attempt::new(p, generation, cx, state, self.node.clone());
        let name = a.name.clone();
        let text = match convert::to_plan(&name, &p.spec) {
            Ok((text, _)) => text,
            Err(e) => {
                let entry = a.failed("InvalidPlan", e.clone());
                if a.prev.conditions != entry.conditions {
                    log(format!("plan {name} generation {generation} refused: {e}"));
                }
                reports.insert(name, entry);
                return a.kept();
            }
        };
        let pending = match self.machine.plan(&text) {
            Ok(x) => x,
            Err(e) => {
                log(format!("plan {name}: cannot plan the apply: {e}"));
                reports.insert(name, a.failed("ApplyFailed", e));
                return a.kept();
            }
        };
        let drifted = self.say_changes(&a, &pending, cx, reports).await;
        let mut sched_warning = None;
        if Machine::has_work(&pending) {
            match self.machine.execute(&pending) {
                Err(e) => {
                    log(format!("plan {name}: apply failed: {e}"));
                    reports.insert(name, a.failed("ApplyFailed", e));
                    return a.kept();
                }
                Ok(w) => sched_warning = w,
            }
        }
        self.remember(state, &a, &pending);
        let entry = self.applied(&a, &pending, cx, sched_warning, drifted);
        reports.insert(name.clone(), entry);
        Some((name, generation))
    }

    /// Log the changes the apply will make. Changes to the generation the node already runs
    /// were made outside the agent: published as Drifted=True before the repair, so a watcher
    /// sees Drifted=True, then Repaired. Returns the Drifted condition the entry will carry.
    async fn say_changes(
        &mut self,
        a: &Attempt<'_>,
        pending: &Pending,
        cx: &Pass<'_>,
        reports: &Reports,
    ) -> Condition {
        let name = &a.name;
        if pending.changes.is_empty() {
            return a.drifted_prev.clone();
        }
        if a.running != Some(a.generation) {
            log(format!(
                "plan {name}: applying generation {} ({} change(s))",
                a.generation,
                pending.changes.len()
            ));
            return a.drifted_prev.clone();
        }
        let msg = format!(
            "{} setting(s) changed outside the agent: {}",
            pending.changes.len(),
            pending.changes.join("; ")
        );
        log(format!("plan {name}: drift, re-applying: {msg}"));
        let entry = a.drifting(&msg);
        let mut now_reports = reports.clone();
        now_reports.insert(name.clone(), entry.clone());
        let summary = report::summary(now_reports, a.running.map(|r| (name.as_str(), r)));
        self.reporter.publish(cx.node, summary).await;
        a.repaired(&entry, &msg)
    }

    /// The node runs this generation of the plan now, with what the apply made.
    fn remember(&self, state: &mut State, a: &Attempt<'_>, pending: &Pending) {
        if !a.same {
            state.created.clear();
        }
        state.plan = Some(a.name.clone());
        state.generation = Some(a.generation);
        state.add_created(pending.missing.iter().cloned());
        self.save(state);
    }

    /// The entry of an applied plan: its warnings (what this node cannot honour, what
    /// disagrees with the kubelet) and its slices' figures.
    fn applied(
        &self,
        a: &Attempt<'_>,
        pending: &Pending,
        cx: &Pass<'_>,
        sched_warning: Option<String>,
        drifted: Condition,
    ) -> PlanReport {
        let slices: Vec<String> = pending
            .plan
            .resolved
            .slices
            .iter()
            .map(|s| s.name().to_string())
            .collect();
        let mut warnings = pending.warnings.clone();
        warnings.extend(sched_warning);
        warnings.extend(cx.kubelet.problem.clone());
        let from_kubelet = self
            .machine
            .kubelet_warnings(&cx.kubelet.cfg, pending, cx.node);
        warnings.extend(from_kubelet.iter().cloned());
        let cannot =
            warnings.len() - from_kubelet.len() - usize::from(cx.kubelet.problem.is_some());
        let (g, t, generation) = (a.g(), &a.t, a.generation);
        let figures = self.machine.figures(&slices);
        PlanReport {
            plan: a.name.clone(),
            applied_revision: Some(generation),
            conditions: vec![
                condition(
                    &a.prev.conditions,
                    APPLIED,
                    true,
                    "Applied",
                    format!(
                        "generation {generation} applied to {} slice(s)",
                        slices.len()
                    ),
                    g,
                    t,
                ),
                drifted,
                a.degraded("AsExpected", ok_message(cannot, from_kubelet.len())),
            ],
            warnings,
            stall: protected_stall(&figures, pending),
            slices: figures,
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

/// What `apply_one` needs of the pass.
struct Pass<'a> {
    node: &'a Node,
    last: &'a BulkheadNodeStatus,
    rivals: &'a [String],
    kubelet: &'a KubeletView,
}

/// One plan's apply in one pass: what its report entry is made from.
struct Attempt<'a> {
    name: String,
    generation: i64,
    prev: PlanReport,
    /// The node runs this plan now (perhaps another generation).
    same: bool,
    /// What the node runs of this plan before this pass.
    running: Option<i64>,
    /// Other plans that select this node.
    rivals: &'a [String],
    node: String,
    t: String,
    /// The Drifted condition as it was (NoDrift when there was none).
    drifted_prev: Condition,
}

impl<'a> Attempt<'a> {
    fn new(
        p: &BulkheadPlan,
        generation: i64,
        cx: &Pass<'a>,
        state: &State,
        node: String,
    ) -> Attempt<'a> {
        let name = p.name_any();
        let prev = previous(cx.last, &name);
        let t = now();
        let same = state.plan.as_deref() == Some(name.as_str());
        let drifted_prev = find(&prev.conditions, DRIFTED).cloned().unwrap_or_else(|| {
            condition(
                &[],
                DRIFTED,
                false,
                "NoDrift",
                "no change made outside the agent",
                Some(generation),
                &t,
            )
        });
        Attempt {
            running: if same { state.generation } else { None },
            name,
            generation,
            prev,
            same,
            rivals: cx.rivals,
            node,
            t,
            drifted_prev,
        }
    }

    fn g(&self) -> Option<i64> {
        Some(self.generation)
    }

    /// Degraded: false with the given reason, unless other plans select this node too.
    fn degraded(&self, ok_reason: &str, ok_msg: String) -> Condition {
        let (prev, g, t) = (&self.prev.conditions, self.g(), &self.t);
        if self.rivals.is_empty() {
            condition(prev, DEGRADED, false, ok_reason, ok_msg, g, t)
        } else {
            let msg = format!(
                "node {} is also selected by {}; only {} is applied",
                self.node,
                self.rivals.join(", "),
                self.name
            );
            condition(prev, DEGRADED, true, "Conflict", msg, g, t)
        }
    }

    /// The entry of a plan that could not be applied: the node keeps what it ran.
    fn failed(&self, reason: &str, msg: String) -> PlanReport {
        let (prev, g, t) = (&self.prev.conditions, self.g(), &self.t);
        PlanReport {
            plan: self.name.clone(),
            applied_revision: self.running,
            conditions: vec![
                condition(prev, APPLIED, false, reason, &msg, g, t),
                self.drifted_prev.clone(),
                condition(prev, DEGRADED, true, reason, &msg, g, t),
            ],
            warnings: vec![],
            slices: vec![],
            stall: None,
        }
    }

    /// What the node runs of this plan after a failure: what it ran before.
    fn kept(&self) -> Option<(String, i64)> {
        self.running.map(|r| (self.name.clone(), r))
    }

    /// The entry said before a drift is repaired.
    fn drifting(&self, msg: &str) -> PlanReport {
        let (prev, g, t) = (&self.prev.conditions, self.g(), &self.t);
        let mut entry = self.prev.clone();
        entry.plan = self.name.clone();
        entry.conditions = vec![
            condition(prev, APPLIED, false, "Drifted", msg, g, t),
            condition(prev, DRIFTED, true, "DriftDetected", msg, g, t),
            self.degraded("AsExpected", "the plan applies as written".into()),
        ];
        entry
    }

    /// Drifted once the drift said in `entry` is repaired.
    fn repaired(&self, entry: &PlanReport, msg: &str) -> Condition {
        let t = &self.t;
        condition(
            &entry.conditions,
            DRIFTED,
            false,
            "Repaired",
            format!("re-applied at {t}: {msg}"),
            self.g(),
            t,
        )
    }
}

/// What Kubernetes 1.35+ makes of this node's cgroups, where they are not pure v2.
fn node_cgroups_notice(cfg: Option<&KubeletConfig>) -> Option<String> {
    kubelet::cgroup_v1_notice(bulkhead::actions::host::cgroup_version()?, cfg)
}

/// Degraded's message of an applied plan: what this node cannot honour (`cannot`) and what
/// disagrees with the kubelet (`kubelet`), counted.
fn ok_message(cannot: usize, kubelet: usize) -> String {
    match (cannot, kubelet) {
        (0, 0) => "the plan applies as written".to_string(),
        (n, 0) => format!("{n} directive(s) this node cannot honour: see warnings"),
        (0, k) => format!("{k} disagreement(s) with the kubelet: see warnings"),
        (n, k) => format!(
            "{n} directive(s) this node cannot honour and {k} disagreement(s) with the kubelet: see warnings"
        ),
    }
}
