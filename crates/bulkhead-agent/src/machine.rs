//! The node side: the library's own operations (`bulkhead apply`'s plan and execute, and
//! `destroy`) on the plan text a resource gives, and the slices' figures from its status
//! reading. Errors come back as one line of text, for a condition's message.

use crate::crd::{PodStall, SliceFigures, SlicePsi};
use crate::kubelet::{self, KubeletConfig, NodeFacts, PlanFacts};
use crate::pods;
use bulkhead::actions::{apply, destroy, host, hugepages, status, Context};
use bulkhead::error::{Error, Severity};
use bulkhead::plan::SliceName;
use bulkhead::Choice;
use std::path::PathBuf;

/// Where and how this node's slices are made.
#[derive(Debug, Clone)]
pub struct Machine {
    pub cgroup_root: String,
    pub backend: Choice,
    /// Holds plan.toml (the plan applied last, as the plan file) and state.json.
    pub state_dir: PathBuf,
}

/// A planned apply and what it says.
pub struct Pending {
    pub plan: apply::ApplyPlan,
    /// Every change to slices and huge pages, one line each (empty: the node is as the plan
    /// says). Scheduler slices (CPUSchedulingSliceSec) are not in it: they are set again on
    /// the slices' tasks at every pass (tasks come and go), which is no drift.
    pub changes: Vec<String>,
    /// Directives this node cannot honour (the resolver's and the backend's warnings).
    pub warnings: Vec<String>,
    /// The plan's slices that do not exist yet, parents first.
    pub missing: Vec<String>,
}

pub fn error_text(e: &Error) -> String {
    e.diagnostics()
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

impl Machine {
    pub fn state_file(&self) -> PathBuf {
        self.state_dir.join("state.json")
    }

    fn context(&self, config: Option<PathBuf>) -> Context {
        Context {
            config,
            cgroup_root: self.cgroup_root.clone(),
            backend: self.backend,
        }
    }

    /// Plan an apply of `text` (plan-file TOML), changing nothing on the node.
    pub fn plan(&self, text: &str) -> Result<Pending, String> {
        let file = self.state_dir.join("plan.toml");
        std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
        let cx = self.context(Some(file));
        let plan = apply::plan(&cx, apply::ApplyRequest::default()).map_err(|e| error_text(&e))?;
        let mut changes: Vec<String> = plan.changes.ops.iter().map(|o| o.to_string()).collect();
        if let Some(h) = &plan.hugepages {
            changes.extend(h.ops.iter().map(|o| format!("{o:?}")));
        }
        let warnings = plan
            .notes
            .iter()
            .filter(|d| d.severity == Severity::Warning)
            .map(|d| d.to_string())
            .collect();
        let missing = plan
            .missing_slices()
            .iter()
            .map(|n| n.to_string())
            .collect();
        Ok(Pending {
            plan,
            changes,
            warnings,
            missing,
        })
    }

    /// Whether executing has anything to do: changes, or scheduler slices to set on the
    /// slices' tasks (every pass: tasks come and go, and the record alone does not say
    /// whether a task that arrived has its slice).
    pub fn has_work(p: &Pending) -> bool {
        !p.changes.is_empty()
            || !p.plan.sched.is_empty()
            || p.plan
                .resolved
                .slices
                .iter()
                .any(|s| s.sched_slice_ns.is_some())
    }

    /// Carry a planned apply out. Ok(Some(warning)) when threads refused their scheduler
    /// slice (CPUSchedulingSliceSec): tasks of other users need CAP_SYS_NICE, and only a
    /// process in the host's PID namespace sees the slices' tasks at all.
    pub fn execute(&self, p: &Pending) -> Result<Option<String>, String> {
        let report = p.plan.execute().map_err(|e| error_text(&e))?;
        let s = report.sched;
        Ok((s.failed > 0).then(|| {
            format!(
                "CPUSchedulingSliceSec: {} of {} thread(s) refused their scheduler slice ({}); the agent needs CAP_SYS_NICE for other users' tasks",
                s.failed,
                s.failed + s.threads,
                s.error.unwrap_or_default()
            )
        }))
    }

    /// Remove these slices (children first; a slice with processes in it is refused).
    pub fn remove(&self, slices: &[String]) -> Result<(), String> {
        if slices.is_empty() {
            return Ok(());
        }
        let cx = self.context(None);
        let d = destroy::plan(&cx, &destroy::Which::Named(slices.to_vec()), false)
            .map_err(|e| error_text(&e))?;
        d.execute().map(|_| ()).map_err(|e| error_text(&e))
    }

    /// Where the kubelet's configuration and the planned apply disagree (kubelet::check),
    /// with the node's advertised resources from its Node object.
    pub fn kubelet_warnings(
        &self,
        cfg: &KubeletConfig,
        p: &Pending,
        node: &k8s_openapi::api::core::v1::Node,
    ) -> Vec<String> {
        let nf = NodeFacts::from_node(node);
        let pf = PlanFacts::from_plan(&p.plan.resolved.plan, &self.cgroup_root, nf.memory);
        // The reserved cgroups need memory and cpu: look in the memory hierarchy.
        let mount = host::controller_mount("memory");
        let exists = |path: &str| {
            mount
                .as_deref()
                .is_some_and(|m| kubelet::cgroup_dir_exists(m, path))
        };
        kubelet::check(cfg, &pf, &nf, &exists)
    }

    /// Put back the huge page settings the agent's applies changed (pool sizes, THP,
    /// hugetlbfs mounts), from the record they kept (`BULKHEAD_HUGEPAGES_STATE`, which the
    /// agent points into its state directory). Nothing recorded: nothing to do.
    pub fn reset_hugepages(&self) -> Result<(), String> {
        hugepages::reset().map(|_| ()).map_err(|e| error_text(&e))
    }

    /// CPU time, memory, processes and pressure of these slices, as `bulkhead status` reads
    /// them.
    pub fn figures(&self, slices: &[String]) -> Vec<SliceFigures> {
        let names: Vec<SliceName> = slices
            .iter()
            .filter_map(|s| SliceName::parse(s).ok())
            .collect();
        status::slices_now(&self.context(None), &names)
            .into_iter()
            .map(|st| SliceFigures {
                name: st.name,
                cpu_usage_seconds: st.cpu_usage_us.map(|us| us as f64 / 1e6),
                memory_current_bytes: st.memory_current,
                processes: Some(st.processes as u64),
                psi: st.psi.as_ref().map(SlicePsi::from),
            })
            .collect()
    }

    /// The pods that stall most on this node (see [`crate::pods`]); none without cgroup2.
    pub fn pod_stalls(&self, cfg: &KubeletConfig) -> Vec<PodStall> {
        host::unified_mount().map_or_else(Vec::new, |m| pods::stalls(&m, cfg))
    }
}
