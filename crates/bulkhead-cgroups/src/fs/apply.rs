//! `apply` on cgroupfs: which hierarchies a plan needs, what the host cannot honour, and the
//! writes that make each slice's directories hold the plan's values.

use super::map::Mapper;
use super::planner::Planner;
use super::{mark, op::Op, CgroupFs};
use crate::backend::{left_over_note, Changes};
use crate::layout::{Caps, Hierarchy, Version};
use bulkhead_plan::{ResolvedPlan, ResolvedSlice};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::units::IdSet;
use std::fs;
use std::path::Path;

impl CgroupFs {
    pub(super) fn plan_apply_fs(&self, plan: &ResolvedPlan) -> Result<Changes<Op>> {
        let hs = self.hierarchies(
            self.in_use(plan, "cpuset", "cpuset.", ResolvedSlice::uses_cpuset),
            self.in_use(plan, "hugetlb", "hugetlb.", |s| !s.hugetlb_max.is_empty()),
        );
        let mut warnings = self.host_warnings(plan);
        let errors = self.missing_roots(&hs);
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        let mut p = Planner::default();
        let root_sets = self.root_cpusets(plan);
        let host = host_ctx(&self.layout, plan);
        for s in &plan.slices {
            let inherited = inherited_cpuset(plan, s, &root_sets);
            for (h, ctrls) in &hs {
                warnings.extend(self.plan_slice_in(&mut p, plan, &host, s, (h, ctrls), &inherited));
            }
        }
        if !p.errors.is_empty() {
            return Err(Error::Invalid(p.errors));
        }
        // Slices from an earlier apply that the plan no longer has (marked: not ones whose
        // mark this process cannot read).
        for existing in self.slices_on_system() {
            if plan.slice(&existing).is_none() && !self.existing_dirs(&existing).is_empty() {
                warnings.push(left_over_note(&existing));
            }
        }
        let mut c = Changes::new(
            p.ops,
            plan.slices.iter().map(|s| s.name().to_string()).collect(),
        );
        c.warnings = warnings;
        Ok(c)
    }

    /// Whether the plan uses a controller, or a slice of it still has its files (so that
    /// removing the last AllowedCPUs or HugetlbMax resets the limits instead of leaving
    /// them). v1: the slice exists in the controller's hierarchy; v2: the controller's files
    /// are present in the slice.
    fn in_use(
        &self,
        plan: &ResolvedPlan,
        ctrl: &str,
        v2_prefix: &str,
        wants: impl Fn(&ResolvedSlice) -> bool,
    ) -> bool {
        if plan.slices.iter().any(wants) {
            return true;
        }
        let Some(h) = self.layout.hierarchy(ctrl) else {
            return false;
        };
        plan.slices.iter().any(|s| {
            let d = self.dir(h, s.name());
            if !(d.is_dir() && mark::is_ours(&d)) {
                return false;
            }
            match h.version {
                Version::V1 => true,
                Version::V2 => fs::read_dir(&d).is_ok_and(|rd| {
                    rd.filter_map(|e| e.ok())
                        .any(|e| e.file_name().to_string_lossy().starts_with(v2_prefix))
                }),
            }
        })
    }

    /// Warnings about the host: systemd owning the tree, controllers that are not mounted.
    fn host_warnings(&self, plan: &ResolvedPlan) -> Vec<Diagnostic> {
        let mut warnings = Vec::new();
        if bulkhead_sys::host::pid1_is_systemd() {
            warnings.push(
                Diagnostic::warning(
                    "PID 1 is systemd: the cgroupfs backend writes under systemd's cgroup tree, which breaks systemd's single-writer rule; a daemon reload may undo these settings",
                )
                .hint("prefer the systemd backend on this host, or give bulkhead a delegated subtree with --cgroup-root"),
            );
        }
        for s in &plan.slices {
            for (ctrl, what) in unmounted_uses(s) {
                if self.layout.hierarchy(ctrl).is_none() {
                    warnings.push(
                        Diagnostic::warning(format!(
                            "{what} is not applied: the {ctrl} controller is not available on this host"
                        ))
                        .context(format!("[slice.{}]", s.name()))
                        .hint(format!("mount or enable the {ctrl} controller")),
                    );
                }
            }
        }
        warnings
    }

    fn missing_roots(&self, hs: &[(&Hierarchy, Vec<&'static str>)]) -> Vec<Diagnostic> {
        hs.iter()
            .map(|(h, _)| (h, h.mount.join(&self.root)))
            .filter(|(_, root)| !root.is_dir())
            .map(|(h, root)| {
                Diagnostic::error(format!(
                    "the cgroup root does not exist in the {} hierarchy",
                    h.label()
                ))
                .at(root.display().to_string())
                .hint("create it first, or leave out --cgroup-root")
            })
            .collect()
    }

    /// The cgroup root's cpus and mems (v1 slices must hold lists; the plan may leave them open).
    pub(super) fn root_cpusets(&self, plan: &ResolvedPlan) -> (IdSet, IdSet) {
        let root = self
            .layout
            .hierarchy("cpuset")
            .map(|h| h.mount.join(&self.root));
        let read = |f: &str| root.as_ref().and_then(|r| read_idset(&r.join(f)));
        (
            read("cpuset.cpus").unwrap_or_else(|| plan.host.cpus.clone()),
            read("cpuset.mems").unwrap_or_else(|| plan.host.mem_nodes.clone()),
        )
    }

    /// Plan one slice in one hierarchy; returns the mapping's warnings.
    fn plan_slice_in(
        &self,
        p: &mut Planner,
        plan: &ResolvedPlan,
        host: &HostCtx,
        s: &ResolvedSlice,
        (h, ctrls): (&Hierarchy, &[&'static str]),
        inherited: &(IdSet, IdSet),
    ) -> Vec<Diagnostic> {
        let name = s.name();
        let dir = self.dir(h, name);
        if !dir.is_dir() {
            p.mkdir(&dir);
        } else if mark::owner(&dir) == mark::Owner::Unknown {
            p.errors
                .push(mark::cannot_tell(name.as_str(), &dir, "adopt"));
            return vec![];
        } else if !mark::is_ours(&dir) {
            p.errors.push(
                Diagnostic::error(format!(
                    "slice '{name}' exists but was not created by bulkhead; refusing to adopt it"
                ))
                .at(dir.display().to_string())
                .hint(
                    "rename the slice in the plan, or remove that cgroup yourself if it is unused",
                ),
            );
            return vec![];
        }
        if h.version == Version::V2 {
            if let Some(parent) = dir.parent() {
                for c in ctrls {
                    p.enable_down_to(&h.mount, parent, c);
                }
            }
        }
        let m = map_slice(plan, host, s, inherited, (h, ctrls));
        for w in m.wants {
            p.want(&dir, w);
        }
        m.warnings
    }
}

/// A slice's directives mapped to the control files of one hierarchy's controllers.
pub(super) fn map_slice<'a>(
    plan: &ResolvedPlan,
    host: &'a HostCtx,
    s: &'a ResolvedSlice,
    inherited: &(IdSet, IdSet),
    (h, ctrls): (&Hierarchy, &[&'static str]),
) -> Mapper<'a> {
    let mut m = Mapper {
        slice: s,
        caps: &host.caps,
        inherited_cpuset: inherited.clone(),
        swappiness: host.swappiness,
        page_sizes: plan.host.hugepage_sizes.clone(),
        wants: vec![],
        warnings: vec![],
    };
    for c in ctrls {
        m.map(c, h.version);
    }
    m
}

/// What the mapping needs to know about the kernel, read once per apply.
pub(super) struct HostCtx {
    pub(super) caps: Caps,
    pub(super) swappiness: u32,
}

pub(super) fn host_ctx(layout: &crate::layout::Layout, plan: &ResolvedPlan) -> HostCtx {
    let mut caps = layout.caps();
    // The plan turns io.cost on for its disks: io.weight takes effect there.
    caps.io_cost |= plan.iocost.is_some();
    HostCtx {
        caps,
        swappiness: swappiness(),
    }
}

/// The controllers a slice's directives need, with the directives' names.
fn unmounted_uses(s: &ResolvedSlice) -> Vec<(&'static str, &'static str)> {
    let memory = s.memory_max.is_some()
        || s.memory_high.is_some()
        || s.memory_low.is_some()
        || s.memory_min.is_some()
        || s.memory_swap_max.is_some();
    let io = s.io_weight.is_some() || !s.io_max.is_empty() || !s.io_device_weight.is_empty();
    [
        (
            "cpu",
            s.cpu_weight.is_some() || s.cpu_max.is_some(),
            "CPUWeight/CPUQuota",
        ),
        ("cpuset", s.uses_cpuset(), "AllowedCPUs/AllowedMemoryNodes"),
        ("memory", memory, "Memory*"),
        ("io", io, "IO*"),
        ("pids", s.tasks_max.is_some(), "TasksMax"),
        ("hugetlb", !s.hugetlb_max.is_empty(), "HugetlbMax"),
    ]
    .into_iter()
    .filter(|(_, used, _)| *used)
    .map(|(c, _, w)| (c, w))
    .collect()
}

/// The cpus and mems a slice holds on v1 when the plan leaves them open: the nearest
/// ancestor's, else the root's.
pub(super) fn inherited_cpuset(
    plan: &ResolvedPlan,
    s: &ResolvedSlice,
    root: &(IdSet, IdSet),
) -> (IdSet, IdSet) {
    let ancestors: Vec<&ResolvedSlice> = s
        .name()
        .lineage()
        .iter()
        .rev()
        .skip(1)
        .filter_map(|a| plan.slice(a))
        .collect();
    let cpus = ancestors
        .iter()
        .find_map(|a| a.allowed_cpus.clone())
        .unwrap_or_else(|| root.0.clone());
    let mems = ancestors
        .iter()
        .find_map(|a| a.allowed_mems.clone())
        .unwrap_or_else(|| root.1.clone());
    (cpus, mems)
}

/// vm.swappiness, the v1 default for memory.swappiness.
fn swappiness() -> u32 {
    fs::read_to_string("/proc/sys/vm/swappiness")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(60)
}

fn read_idset(path: &Path) -> Option<IdSet> {
    IdSet::parse(fs::read_to_string(path).ok()?.trim()).ok()
}
