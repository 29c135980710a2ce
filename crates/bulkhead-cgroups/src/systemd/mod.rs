//! The systemd backend: where systemd is PID 1 it owns the cgroup tree, so bulkhead asks it
//! over D-Bus instead of writing cgroupfs under its feet.
//!
//! - `apply` makes each slice a transient unit (StartTransientUnit with the plan's
//!   properties), or with `--persist` writes unit files and drop-ins under
//!   /etc/systemd/system and reloads systemd. Both are idempotent: only differences are set.
//! - `run` starts the command as a transient service in the slice and waits for it (or
//!   `--scope`: bulkhead moves itself into a transient scope, then execs); `move` attaches
//!   processes to a scope in the slice with AttachProcessesToUnit.
//! - Every change is a [`Call`] (plain data) first, so `--dry-run` prints exactly what apply
//!   does; an apply that fails midway stops the transient units it created and puts back
//!   the properties and files it changed.
//!
//! Transient units are bulkhead's when systemd says they are transient and bulkhead recorded
//! them in /run/bulkhead/systemd; unit files are bulkhead's when they start with
//! [`export::HEADER`]. Anything else is never adopted, changed or removed.

mod attach;
pub mod bus;
mod call;
mod destroy;
pub mod export;
mod persist;
mod place;
pub mod props;
mod service;
pub mod slice_props;
mod throttle;
mod transient;
pub mod versions;

pub use call::{refused, Call};
pub use place::move_scope;
pub use service::{RunningService, ServiceExit, ServiceSpec, ServiceStdio};

use crate::backend::{ApplyOptions, Backend, Changes, Joiner, Outcome, PlaceError, Placement};
use crate::fs::CgroupFs;
use crate::layout::Layout;
use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::{Diagnostic, Result};
use bus::Bus;
use std::path::PathBuf;

/// Where `--persist` writes unit files.
pub const UNIT_DIR: &str = "/etc/systemd/system";

/// The systemd backend.
pub struct Systemd {
    pub bus: Bus,
    /// Reads cgroupfs (status, process counts); never writes it.
    pub reader: CgroupFs,
    /// Where `--persist` writes unit files.
    pub unit_dir: PathBuf,
}

/// Where bulkhead records the transient units it created.
pub(super) fn record_dir() -> PathBuf {
    bulkhead_sys::paths::systemd_records_dir()
}

pub(super) fn record(unit: &str) -> PathBuf {
    record_dir().join(unit)
}

impl Systemd {
    /// Connect to systemd. Fails with a clear error when it cannot be reached.
    pub fn connect(layout: Layout) -> Result<Systemd> {
        let bus = Bus::connect()?;
        let reader = CgroupFs {
            layout,
            root: PathBuf::new(),
        };
        Ok(Systemd {
            bus,
            reader,
            unit_dir: PathBuf::from(UNIT_DIR),
        })
    }

    pub fn version(&self) -> versions::Version {
        self.bus.version
    }

    pub(super) fn is_transient_ours(&self, unit: &str, st: &bus::UnitState) -> bool {
        st.transient && record(unit).exists()
    }

    pub(super) fn persisted_path(&self, unit: &str) -> PathBuf {
        self.unit_dir.join(unit)
    }

    pub(super) fn is_persisted_ours(&self, unit: &str) -> bool {
        export::ours(&self.persisted_path(unit))
    }

    /// Refuse units bulkhead did not create; say what they are.
    pub(super) fn foreign(&self, name: &SliceName, st: &bus::UnitState, verb: &str) -> Diagnostic {
        let unit = name.unit();
        let from = if !st.fragment_path.is_empty() {
            format!("loaded from {}", st.fragment_path)
        } else if st.transient {
            "a transient unit".to_string()
        } else {
            "made by systemd itself, without a unit file".to_string()
        };
        Diagnostic::error(format!(
            "slice '{name}' exists in systemd as {unit} ({from}, {}) and was not created by bulkhead; refusing to {verb} it",
            st.active_state
        ))
        .hint("rename the slice in the plan (systemd's own slices such as system, user and machine cannot be used)")
    }
}

/// A unit systemd knows but nobody made: a stub left from a lookup, or a stopped unit.
pub(super) fn free(st: &bus::UnitState) -> bool {
    st.fragment_path.is_empty()
        && !st.transient
        && !st.job
        && matches!(st.active_state.as_str(), "inactive" | "failed")
}

impl Placement for Systemd {
    fn name(&self) -> &'static str {
        "systemd"
    }

    fn attaches_services(&self) -> bool {
        true
    }

    fn join_delegates(&self) -> bool {
        true
    }

    fn slices(&self) -> Vec<SliceName> {
        let mut out: Vec<SliceName> = std::fs::read_dir(record_dir())
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let unit = e.file_name().to_string_lossy().into_owned();
                        let stem = unit.strip_suffix(".slice")?;
                        let st = self.bus.unit_state(&unit).ok()??;
                        st.transient.then(|| SliceName::parse(stem).ok())?
                    })
                    .collect()
            })
            .unwrap_or_default();
        for s in export::slices_in(&self.unit_dir) {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out.sort_by(|a, b| (a.depth(), a.as_str()).cmp(&(b.depth(), b.as_str())));
        out
    }

    /// The records of transient slices are what says a slice is bulkhead's; D-Bus reads
    /// need no privilege, but a record directory this user cannot read hides them.
    fn unverified(&self) -> Option<String> {
        match std::fs::read_dir(record_dir()) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Some(format!(
                "ownership not verified: uid {} cannot read {} (bulkhead's records of its transient slices); run as root to verify",
                bulkhead_sys::process::euid(),
                record_dir().display()
            )),
            _ => None,
        }
    }

    fn slice_exists(&self, slice: &SliceName) -> bool {
        let unit = slice.unit();
        self.is_persisted_ours(&unit)
            || self
                .bus
                .unit_state(&unit)
                .ok()
                .flatten()
                .is_some_and(|st| self.is_transient_ours(&unit, &st))
    }

    /// `run --scope`, `spawn --slice`: move this process into a new transient scope in the
    /// slice.
    fn join(&self, slice: &SliceName, who: &Joiner) -> std::result::Result<(), PlaceError> {
        self.join_scope(slice, who)
    }

    fn move_pid(&self, slice: &SliceName, pid: i32) -> std::result::Result<(), String> {
        self.move_into_scope(slice, pid)
    }
}

impl Backend for Systemd {
    type Op = Call;

    fn describe(&self) -> String {
        format!(
            "systemd backend, systemd {} via {}, {}",
            self.bus.version_text,
            self.bus.via,
            self.reader.layout.describe()
        )
    }

    fn plan_apply(&self, plan: &ResolvedPlan, how: ApplyOptions) -> Result<Changes<Call>> {
        if how.persist {
            self.plan_persist(plan)
        } else {
            self.plan_transient(plan)
        }
    }

    fn plan_destroy(&self, slices: &[SliceName], kill: bool) -> Result<Changes<Call>> {
        self.plan_destroy_sd(slices, kill)
    }

    fn execute(&self, changes: &Changes<Call>) -> Result<Outcome> {
        self.execute_calls(&changes.ops.iter().collect::<Vec<_>>())
    }
}
