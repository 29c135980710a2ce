//! The backend for this host: `--backend auto|systemd|cgroupfs`, and [`Chosen`], which is
//! itself a [`Backend`] so callers never match on which one it is.

use crate::backend::{ApplyOptions, Backend, Changes, Joiner, Outcome, PlaceError, Placement};
use crate::fs::{self, CgroupFs};
use crate::layout::Layout;
use crate::systemd::{self, Systemd};
use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::fmt;

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Choice {
    /// systemd when PID 1 is systemd and answers on D-Bus, else cgroupfs.
    #[default]
    Auto,
    Systemd,
    Cgroupfs,
}

impl Choice {
    pub fn name(self) -> &'static str {
        match self {
            Choice::Auto => "auto",
            Choice::Systemd => "systemd",
            Choice::Cgroupfs => "cgroupfs",
        }
    }

    pub fn parse(s: &str) -> Option<Choice> {
        match s {
            "auto" => Some(Choice::Auto),
            "systemd" => Some(Choice::Systemd),
            "cgroupfs" => Some(Choice::Cgroupfs),
            _ => None,
        }
    }
}

/// The backend chosen for this host.
pub enum Chosen {
    Systemd(Box<Systemd>),
    Cgroupfs(CgroupFs),
}

/// An operation of the chosen backend. In JSON a cgroupfs operation is tagged by its kind
/// (`"op": "mkdir"`), a systemd one `"op": "systemd"` with the call's own fields.
#[derive(Debug)]
pub enum ChosenOp {
    Cgroupfs(fs::Op),
    Systemd(systemd::Call),
}

impl serde::Serialize for ChosenOp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Tagged<'a> {
            op: &'static str,
            #[serde(flatten)]
            call: &'a systemd::Call,
        }
        match self {
            ChosenOp::Cgroupfs(o) => o.serialize(s),
            ChosenOp::Systemd(call) => Tagged {
                op: "systemd",
                call,
            }
            .serialize(s),
        }
    }
}

impl fmt::Display for ChosenOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChosenOp::Cgroupfs(o) => o.fmt(f),
            ChosenOp::Systemd(c) => c.fmt(f),
        }
    }
}

/// Pick the backend: `auto` is systemd when PID 1 is systemd and its D-Bus API answers (and no
/// --cgroup-root was given: a delegated subtree is written directly), cgroupfs otherwise.
pub fn choose(choice: Choice, layout: Layout, cgroup_root: &str) -> Result<Chosen> {
    let default_root = cgroup_root.trim_matches('/').is_empty();
    match choice {
        Choice::Cgroupfs => Ok(Chosen::Cgroupfs(CgroupFs::new(layout, cgroup_root)?)),
        Choice::Systemd => {
            if !default_root {
                return Err(Error::invalid(
                    Diagnostic::error(format!(
                        "--cgroup-root {cgroup_root} cannot be used with the systemd backend: systemd places slices itself"
                    ))
                    .hint("leave out --cgroup-root, or use --backend cgroupfs for a delegated subtree"),
                ));
            }
            Ok(Chosen::Systemd(Box::new(Systemd::connect(layout)?)))
        }
        Choice::Auto => {
            if default_root && bulkhead_sys::host::pid1_is_systemd() {
                if let Ok(s) = Systemd::connect(layout.clone()) {
                    return Ok(Chosen::Systemd(Box::new(s)));
                }
            }
            Ok(Chosen::Cgroupfs(CgroupFs::new(layout, cgroup_root)?))
        }
    }
}

/// Detect this machine's layout and choose.
pub fn choose_here(choice: Choice, cgroup_root: &str) -> Result<Chosen> {
    let layout = Layout::detect()
        .map_err(|e| Error::failed(format!("cannot read /proc/self/mountinfo: {e}")))?;
    choose(choice, layout, cgroup_root)
}

impl Chosen {
    /// The cgroupfs view used to read slices (status, counters), whoever writes them.
    pub fn reader(&self) -> &CgroupFs {
        match self {
            Chosen::Systemd(s) => &s.reader,
            Chosen::Cgroupfs(c) => c,
        }
    }

    /// Probe the kernel's capabilities once and keep them (a long-running caller plans many
    /// times).
    pub fn keep_caps(&mut self) {
        let fs = match self {
            Chosen::Systemd(s) => &mut s.reader,
            Chosen::Cgroupfs(c) => c,
        };
        fs.layout.caps = Some(fs.layout.caps());
    }

    /// The placement side alone (what `run` and `spawn` take).
    pub fn placement(&self) -> &dyn Placement {
        match self {
            Chosen::Systemd(s) => s.as_ref(),
            Chosen::Cgroupfs(c) => c,
        }
    }

    /// The operations that give a slice `t` on top of its plan (with
    /// [`Throttle::none`](crate::Throttle::none): that put the plan back). Through systemd on
    /// a host where systemd cannot freeze, the freeze is a cgroup.freeze write.
    pub fn plan_throttle(
        &self,
        plan: &bulkhead_plan::ResolvedSlice,
        t: &crate::Throttle,
        disks: &[bulkhead_sys::host::DevNum],
    ) -> Result<Vec<ChosenOp>> {
        match self {
            Chosen::Cgroupfs(c) => Ok(c
                .plan_throttle(plan, t, disks)?
                .into_iter()
                .map(ChosenOp::Cgroupfs)
                .collect()),
            Chosen::Systemd(s) => {
                let mut ops: Vec<ChosenOp> = s
                    .plan_throttle(plan, t, disks)?
                    .into_iter()
                    .map(ChosenOp::Systemd)
                    .collect();
                if !s.can_freeze() {
                    let fs = s.reader.plan_freeze(plan.name(), t.frozen, false)?;
                    ops.extend(fs.into_iter().map(ChosenOp::Cgroupfs));
                }
                Ok(ops)
            }
        }
    }

    /// Whether the guard can give a slice idle scheduling (the throttle's `idle`), as each
    /// backend says.
    pub fn can_idle(&self) -> bool {
        match self {
            Chosen::Systemd(s) => s.can_idle(),
            Chosen::Cgroupfs(c) => c.can_idle(),
        }
    }

    /// Carry out throttle operations in order, each by its own backend.
    pub fn execute_throttle(&self, ops: &[ChosenOp]) -> Result<Outcome> {
        let mut out = Outcome::default();
        for op in ops {
            let o = match (self, op) {
                (Chosen::Systemd(s), ChosenOp::Systemd(c)) => s.execute_calls(&[c])?,
                (_, ChosenOp::Cgroupfs(o)) => fs::op::execute(&[o])?,
                (Chosen::Cgroupfs(_), ChosenOp::Systemd(c)) => {
                    return Err(Error::failed(format!(
                        "`{c}` needs the systemd backend; nothing more was changed"
                    )))
                }
            };
            out.done += o.done;
            out.skipped += o.skipped;
        }
        Ok(out)
    }

    /// The `layout` line of `status`: systemd's version and bus, or the cgroup layout.
    pub fn layout_line(&self) -> String {
        match self {
            Chosen::Systemd(s) => format!(
                "systemd {} via {}; {}",
                s.bus.version_text,
                s.bus.via,
                s.reader.layout.describe()
            ),
            Chosen::Cgroupfs(c) => c.layout.describe(),
        }
    }
}

impl Placement for Chosen {
    fn name(&self) -> &'static str {
        self.placement().name()
    }
    fn slices(&self) -> Vec<SliceName> {
        self.placement().slices()
    }
    fn slice_exists(&self, slice: &SliceName) -> bool {
        self.placement().slice_exists(slice)
    }
    fn unverified(&self) -> Option<String> {
        self.placement().unverified()
    }
    fn join(&self, slice: &SliceName, who: &Joiner) -> std::result::Result<(), PlaceError> {
        self.placement().join(slice, who)
    }
    fn cgroup2_dir(&self, slice: &SliceName) -> Option<std::path::PathBuf> {
        self.placement().cgroup2_dir(slice)
    }
    fn move_pid(&self, slice: &SliceName, pid: i32) -> std::result::Result<(), String> {
        self.placement().move_pid(slice, pid)
    }
    fn move_pid_out(&self, pid: i32) -> std::result::Result<(), String> {
        self.placement().move_pid_out(pid)
    }
    fn attaches_services(&self) -> bool {
        self.placement().attaches_services()
    }
    fn join_delegates(&self) -> bool {
        self.placement().join_delegates()
    }
    fn move_held(
        &self,
        slice: &SliceName,
        pid: i32,
        still_same: &dyn Fn() -> bool,
    ) -> std::result::Result<(), String> {
        self.placement().move_held(slice, pid, still_same)
    }
}

impl Backend for Chosen {
    type Op = ChosenOp;

    fn describe(&self) -> String {
        match self {
            Chosen::Systemd(s) => s.describe(),
            Chosen::Cgroupfs(c) => c.describe(),
        }
    }

    fn plan_apply(&self, plan: &ResolvedPlan, how: ApplyOptions) -> Result<Changes<ChosenOp>> {
        Ok(match self {
            Chosen::Systemd(s) => s.plan_apply(plan, how)?.map(ChosenOp::Systemd),
            Chosen::Cgroupfs(c) => c.plan_apply(plan, how)?.map(ChosenOp::Cgroupfs),
        })
    }

    fn plan_destroy(&self, slices: &[SliceName], kill: bool) -> Result<Changes<ChosenOp>> {
        Ok(match self {
            Chosen::Systemd(s) => s.plan_destroy(slices, kill)?.map(ChosenOp::Systemd),
            Chosen::Cgroupfs(c) => c.plan_destroy(slices, kill)?.map(ChosenOp::Cgroupfs),
        })
    }

    fn execute(&self, changes: &Changes<ChosenOp>) -> Result<Outcome> {
        match self {
            Chosen::Systemd(s) => s.execute_calls(&own(&changes.ops, |o| match o {
                ChosenOp::Systemd(c) => Some(c),
                ChosenOp::Cgroupfs(_) => None,
            })?),
            Chosen::Cgroupfs(_) => fs::op::execute(&own(&changes.ops, |o| match o {
                ChosenOp::Cgroupfs(op) => Some(op),
                ChosenOp::Systemd(_) => None,
            })?),
        }
    }
}

/// The operations as this backend's own; changes planned by the other backend are refused
/// before anything is done.
fn own<'a, T>(
    ops: &'a [ChosenOp],
    pick: impl Fn(&'a ChosenOp) -> Option<&'a T>,
) -> Result<Vec<&'a T>> {
    ops.iter()
        .map(|o| {
            pick(o).ok_or_else(|| {
                Error::failed(format!(
                    "`{o}` was planned for the other backend; nothing was changed"
                ))
                .with_hint("plan the changes again with the backend that carries them out")
            })
        })
        .collect()
}
