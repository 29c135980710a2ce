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

pub mod bus;
pub mod export;
pub mod props;
pub mod run;

use super::{Backend, CgroupFs, Changes, Layout, Op, Outcome, Version as CgVersion, MISSING_SLICE};
use bulkhead_plan::{Plan, ResolvedPlan, SliceName};
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use bus::{call_failed, error_name, short, Bus};
use props::{Prop, PropValue};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where `--persist` writes unit files.
pub const UNIT_DIR: &str = "/etc/systemd/system";

/// One change made through systemd.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    /// Manager.StartTransientUnit(unit, "fail", properties, []).
    StartTransientUnit { unit: String, properties: Vec<Prop> },
    /// Manager.SetUnitProperties(unit, runtime=true, properties).
    SetUnitProperties {
        unit: String,
        properties: Vec<Prop>,
        /// The values before, to undo it.
        #[serde(skip)]
        restore: Vec<Prop>,
    },
    /// Manager.StopUnit(unit, "replace").
    StopUnit { unit: String },
    /// Manager.KillUnit(unit, "all", SIGKILL).
    KillUnit { unit: String },
    /// Manager.StartUnit(unit, "replace").
    StartUnit { unit: String },
    /// Write a unit file or drop-in (whole, by rename).
    WriteFile {
        path: PathBuf,
        text: String,
        #[serde(skip)]
        previous: Option<String>,
    },
    /// Remove a unit file or drop-in bulkhead wrote.
    RemoveFile {
        path: PathBuf,
        #[serde(skip)]
        previous: String,
    },
    /// Manager.Reload() (daemon-reload).
    Reload,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::StartTransientUnit { unit, properties } => {
                write!(f, "dbus StartTransientUnit({unit:?}, \"fail\", [")?;
                for p in properties {
                    write!(f, "\n    {p}")?;
                }
                write!(f, "\n  ], [])")
            }
            Call::SetUnitProperties {
                unit, properties, ..
            } => {
                write!(f, "dbus SetUnitProperties({unit:?}, runtime=true, [")?;
                for p in properties {
                    write!(f, "\n    {p}")?;
                }
                write!(f, "\n  ])")
            }
            Call::StopUnit { unit } => write!(f, "dbus StopUnit({unit:?}, \"replace\")"),
            Call::KillUnit { unit } => write!(f, "dbus KillUnit({unit:?}, \"all\", SIGKILL)"),
            Call::StartUnit { unit } => write!(f, "dbus StartUnit({unit:?}, \"replace\")"),
            Call::WriteFile { path, text, .. } => {
                write!(f, "write {}:", path.display())?;
                for l in text.lines() {
                    write!(f, "\n    {l}")?;
                }
                Ok(())
            }
            Call::RemoveFile { path, .. } => write!(f, "remove {}", path.display()),
            Call::Reload => write!(f, "dbus Reload()"),
        }
    }
}

/// The systemd backend.
pub struct Systemd {
    pub bus: Bus,
    /// Reads cgroupfs (status, process counts); never writes it.
    pub reader: CgroupFs,
    /// Where `--persist` writes unit files.
    pub unit_dir: PathBuf,
}

/// Where bulkhead records the transient units it created.
fn record_dir() -> PathBuf {
    super::runtime_dir().join("systemd")
}

fn record(unit: &str) -> PathBuf {
    record_dir().join(unit)
}

/// Whether PID 1 is systemd (in this PID namespace).
pub fn pid1_is_systemd() -> bool {
    std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd")
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

    pub fn version(&self) -> props::Version {
        self.bus.version
    }

    fn is_transient_ours(&self, unit: &str, st: &bus::UnitState) -> bool {
        st.transient && record(unit).exists()
    }

    fn persisted_path(&self, unit: &str) -> PathBuf {
        self.unit_dir.join(unit)
    }

    fn is_persisted_ours(&self, unit: &str) -> bool {
        export::ours(&self.persisted_path(unit))
    }

    /// Refuse units bulkhead did not create; say what they are.
    fn foreign(&self, name: &SliceName, st: &bus::UnitState, verb: &str) -> Diagnostic {
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

    /// Warnings for directives systemd records but the host's cgroup layout cannot enforce.
    fn layout_warnings(&self, plan: &ResolvedPlan) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        let mem_v1 = self
            .reader
            .layout
            .hierarchy("memory")
            .is_some_and(|h| h.version == CgVersion::V1);
        let cpuset_v1 = self
            .reader
            .layout
            .hierarchy("cpuset")
            .is_none_or(|h| h.version == CgVersion::V1);
        for s in &plan.slices {
            let ctx = format!("[slice.{}]", s.name());
            for (d, set) in [
                ("MemoryMin", s.memory_min.is_some()),
                ("MemoryLow", s.memory_low.is_some()),
                ("MemoryHigh", s.memory_high.is_some()),
                ("MemorySwapMax", s.memory_swap_max.is_some()),
            ] {
                if set && mem_v1 {
                    out.push(
                        Diagnostic::warning(format!(
                            "{d} is recorded but not enforced: systemd applies it only when the memory controller is on cgroup v2, and here it is on v1"
                        ))
                        .context(ctx.clone()),
                    );
                }
            }
            if s.uses_cpuset() && cpuset_v1 {
                out.push(
                    Diagnostic::warning(
                        "AllowedCPUs/AllowedMemoryNodes are recorded but not enforced: systemd drives cpuset only on cgroup v2",
                    )
                    .context(ctx),
                );
            }
        }
        out
    }

    /// What a transient apply does.
    fn plan_transient(&self, plan: &ResolvedPlan) -> Result<Changes> {
        let version = self.version();
        let mut warnings = self.layout_warnings(plan);
        let mut errors = Vec::new();
        let mut ops = Vec::new();
        for s in &plan.slices {
            let name = s.name();
            let unit = name.unit();
            let sp = props::slice_props(s, version);
            warnings.extend(sp.warnings);
            match self.bus.unit_state(&unit)? {
                Some(st) if self.is_transient_ours(&unit, &st) => {
                    let (set, restore) = self.differences(&unit, &sp.props)?;
                    if !set.is_empty() {
                        ops.push(Call::SetUnitProperties {
                            unit,
                            properties: set,
                            restore,
                        });
                    }
                }
                Some(_) if self.is_persisted_ours(&unit) => errors.push(
                    Diagnostic::error(format!(
                        "slice '{name}' was made persistent by an earlier `apply --persist` ({})",
                        self.persisted_path(&unit).display()
                    ))
                    .hint(format!("apply with --persist again, or remove it first: bulkhead destroy --slice {name}")),
                ),
                Some(st) if free(&st) => ops.push(Call::StartTransientUnit {
                    unit,
                    properties: sp.props,
                }),
                Some(st) => errors.push(self.foreign(name, &st, "adopt")),
                None => ops.push(Call::StartTransientUnit {
                    unit,
                    properties: sp.props,
                }),
            }
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        warnings.extend(self.left_over(plan));
        Ok(Changes {
            ops: ops.into_iter().map(Op::Systemd).collect(),
            warnings,
            slices: plan.slices.iter().map(|s| s.name().to_string()).collect(),
            ..Default::default()
        })
    }

    fn left_over(&self, plan: &ResolvedPlan) -> Vec<Diagnostic> {
        self.slices()
            .into_iter()
            .filter(|s| plan.slice(s).is_none())
            .map(|s| {
                Diagnostic::note(format!(
                    "slice '{s}' exists from an earlier apply but is not in this plan; it is left as it is"
                ))
                .hint(format!("remove it with: bulkhead destroy --slice {s}"))
            })
            .collect()
    }

    /// The properties that differ from what systemd has now, and their current values.
    fn differences(&self, unit: &str, wanted: &[Prop]) -> Result<(Vec<Prop>, Vec<Prop>)> {
        let current = self.bus.unit_properties(unit)?;
        let mut all: Vec<Prop> = wanted.to_vec();
        for (name, directive, default) in props::managed(self.version()) {
            if !all.iter().any(|p| p.name == name) {
                all.push(
                    Prop::new(name, default).why(format!("{directive} (removed from the plan)")),
                );
            }
        }
        let mut set = Vec::new();
        let mut restore = Vec::new();
        for p in all {
            let cur = current
                .get(&p.name)
                .and_then(|v| props::from_dbus(v, &p.value));
            match cur {
                Some(c) if props::same(&c, &p.value) => {}
                Some(c) => {
                    restore.push(Prop::new(&p.name, c));
                    set.push(p);
                }
                // systemd does not report it: set it when the plan asks for it.
                None if !p.directive.ends_with("(removed from the plan)") => set.push(p),
                None => {}
            }
        }
        Ok((set, restore))
    }

    /// What `apply --persist` does: unit files and drop-ins, a reload, and a start of each
    /// slice not active yet.
    pub fn plan_persist(&self, plan: &Plan, resolved: &ResolvedPlan) -> Result<Changes> {
        let version = self.version();
        let mut warnings = self.layout_warnings(resolved);
        for s in &resolved.slices {
            warnings.extend(props::slice_props(s, version).warnings);
        }
        let files = export::unit_files(plan, &resolved.host, version)?;
        let mut errors = Vec::new();
        for s in &resolved.slices {
            let unit = s.name().unit();
            if let Some(st) = self.bus.unit_state(&unit)? {
                let mine = self.persisted_path(&unit);
                if self.is_transient_ours(&unit, &st) {
                    errors.push(
                        Diagnostic::error(format!(
                            "slice '{}' is a transient unit from an earlier apply without --persist",
                            s.name()
                        ))
                        .hint(format!("remove it first: bulkhead destroy --slice {}", s.name())),
                    );
                } else if !st.fragment_path.is_empty()
                    && (Path::new(&st.fragment_path) != mine || !export::ours(&mine))
                {
                    errors.push(self.foreign(s.name(), &st, "replace"));
                } else if st.fragment_path.is_empty() && !free(&st) {
                    errors.push(self.foreign(s.name(), &st, "adopt"));
                }
            }
        }
        if let Err(e) = export::check_targets(&self.unit_dir, &files) {
            errors.extend(e.diagnostics());
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        let mut ops = Vec::new();
        for f in &files.files {
            let path = self.unit_dir.join(&f.path);
            let previous = std::fs::read_to_string(&path).ok();
            if previous.as_deref() == Some(f.text.as_str()) {
                continue;
            }
            ops.push(Call::WriteFile {
                path,
                text: f.text.clone(),
                previous,
            });
        }
        for s in &files.stale {
            let path = self.unit_dir.join(s);
            if export::ours(&path) {
                let previous = std::fs::read_to_string(&path).unwrap_or_default();
                ops.push(Call::RemoveFile { path, previous });
            }
        }
        if !ops.is_empty() {
            ops.push(Call::Reload);
        }
        for s in &resolved.slices {
            let unit = s.name().unit();
            let active = self
                .bus
                .unit_state(&unit)?
                .is_some_and(|st| st.active_state == "active");
            if !active && !s.implicit {
                ops.push(Call::StartUnit { unit });
            }
        }
        warnings.extend(self.left_over(resolved));
        Ok(Changes {
            ops: ops.into_iter().map(Op::Systemd).collect(),
            warnings,
            slices: resolved
                .slices
                .iter()
                .map(|s| s.name().to_string())
                .collect(),
            ..Default::default()
        })
    }

    fn run_call(&self, call: &Call) -> Result<()> {
        let m = self.bus.manager();
        match call {
            Call::StartTransientUnit { unit, properties } => {
                let _ = std::fs::create_dir_all(record_dir());
                std::fs::write(record(unit), "").map_err(|e| {
                    let mut d = Diagnostic::error(format!(
                        "cannot record {unit} in {}: {}",
                        record_dir().display(),
                        errno_text(&e)
                    ));
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        d = d.hint("creating systemd units needs root: run bulkhead as root");
                    }
                    Error::failed_with(d)
                })?;
                if let Err(e) = self.bus.start_transient(unit, properties) {
                    let _ = std::fs::remove_file(record(unit));
                    return Err(refused(unit, properties, &e));
                }
                match self.bus.wait_settled(unit, Duration::from_secs(30))? {
                    Some(s) if s == "active" => Ok(()),
                    s => Err(Error::failed_with(
                        Diagnostic::error(format!(
                            "systemd could not start {unit} (it is {})",
                            s.unwrap_or_else(|| "gone".into())
                        ))
                        .hint(format!("see: journalctl -u {unit}")),
                    )),
                }
            }
            Call::SetUnitProperties {
                unit, properties, ..
            } => self
                .bus
                .set_properties(unit, properties)
                .map_err(|e| refused(unit, properties, &e)),
            Call::StopUnit { unit } => {
                m.stop_unit(unit, "replace")
                    .map_err(|e| call_failed(&format!("StopUnit({unit})"), &e))?;
                self.bus.wait_settled(unit, Duration::from_secs(120))?;
                let _ = std::fs::remove_file(record(unit));
                Ok(())
            }
            Call::KillUnit { unit } => m
                .kill_unit(unit, "all", libc::SIGKILL)
                .map_err(|e| call_failed(&format!("KillUnit({unit})"), &e)),
            Call::StartUnit { unit } => {
                m.start_unit(unit, "replace")
                    .map_err(|e| call_failed(&format!("StartUnit({unit})"), &e))?;
                match self.bus.wait_settled(unit, Duration::from_secs(30))? {
                    Some(s) if s == "active" => Ok(()),
                    s => Err(Error::failed_with(
                        Diagnostic::error(format!(
                            "systemd could not start {unit} (it is {})",
                            s.unwrap_or_else(|| "gone".into())
                        ))
                        .hint(format!("see: systemctl status {unit}")),
                    )),
                }
            }
            Call::WriteFile { path, text, .. } => write_file(path, text),
            Call::RemoveFile { path, .. } => {
                std::fs::remove_file(path)
                    .map_err(|e| bulkhead_sys::error::io_failed("cannot remove", path, e))?;
                if let Some(parent) = path
                    .parent()
                    .filter(|p| p.extension().is_some_and(|x| x == "d"))
                {
                    let _ = std::fs::remove_dir(parent);
                }
                Ok(())
            }
            Call::Reload => m
                .reload()
                .map_err(|e| call_failed("Reload (daemon-reload)", &e)),
        }
    }
}

/// A unit systemd knows but nobody made: a stub left from a lookup, or a stopped unit.
fn free(st: &bus::UnitState) -> bool {
    st.fragment_path.is_empty()
        && !st.transient
        && !st.job
        && matches!(st.active_state.as_str(), "inactive" | "failed")
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| bulkhead_sys::error::io_failed("cannot create", parent, e))?;
    }
    let tmp = path.with_extension("bulkhead-tmp");
    std::fs::write(&tmp, text)
        .map_err(|e| bulkhead_sys::error::io_failed("cannot write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| bulkhead_sys::error::io_failed("cannot write", path, e))
}

/// systemd refused properties: name the directive the message is about.
fn refused(unit: &str, properties: &[Prop], e: &zbus::Error) -> Error {
    let msg = short(e);
    let hit: Vec<&Prop> = properties
        .iter()
        .filter(|p| msg.contains(&p.name) && !p.directive.is_empty())
        .collect();
    let about = match hit.as_slice() {
        [] => {
            let all: Vec<&str> = properties
                .iter()
                .filter(|p| !p.directive.is_empty())
                .map(|p| p.directive.as_str())
                .collect();
            if all.is_empty() {
                String::new()
            } else {
                format!(" (the unit had: {})", all.join(", "))
            }
        }
        hits => format!(
            " (the plan's {})",
            hits.iter()
                .map(|p| p.directive.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let name = error_name(e).unwrap_or_default();
    let mut d = Diagnostic::error(format!("systemd refused {unit}: {msg}{about}"));
    if let Some(c) = hit.first() {
        d = d.context(
            c.directive
                .split('=')
                .next()
                .unwrap_or_default()
                .to_string(),
        );
    }
    let bad_input = matches!(
        name,
        "org.freedesktop.DBus.Error.InvalidArgs"
            | "org.freedesktop.systemd1.UnitExists"
            | "org.freedesktop.DBus.Error.PropertyReadOnly"
    );
    match bus::hint_for(e) {
        Some(h) => d = d.hint(h),
        None if bad_input => d = d.hint("change the value in the plan to one this systemd accepts"),
        None => {}
    }
    if bad_input {
        Error::invalid(d)
    } else {
        Error::failed_with(d)
    }
}

/// Add to an error's hint (what went wrong keeps its own advice).
fn add_hint(e: Error, more: &str) -> Error {
    let joined = match e.diagnostics().last().and_then(|d| d.hint.clone()) {
        Some(h) => format!("{h}\n  hint: {more}"),
        None => more.to_string(),
    };
    e.with_hint(joined)
}

fn undo(call: &Call) -> Option<Call> {
    match call {
        Call::StartTransientUnit { unit, .. } | Call::StartUnit { unit } => {
            Some(Call::StopUnit { unit: unit.clone() })
        }
        Call::SetUnitProperties { unit, restore, .. } => Some(Call::SetUnitProperties {
            unit: unit.clone(),
            properties: restore.clone(),
            restore: vec![],
        }),
        Call::WriteFile { path, previous, .. } => Some(match previous {
            Some(p) => Call::WriteFile {
                path: path.clone(),
                text: p.clone(),
                previous: None,
            },
            None => Call::RemoveFile {
                path: path.clone(),
                previous: String::new(),
            },
        }),
        Call::RemoveFile { path, previous } => Some(Call::WriteFile {
            path: path.clone(),
            text: previous.clone(),
            previous: None,
        }),
        Call::StopUnit { .. } | Call::KillUnit { .. } | Call::Reload => None,
    }
}

fn calls(changes: &Changes) -> Vec<&Call> {
    changes
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Systemd(c) => Some(c),
            _ => None,
        })
        .collect()
}

impl Backend for Systemd {
    fn name(&self) -> &'static str {
        "systemd"
    }

    fn describe(&self) -> String {
        format!(
            "systemd backend, systemd {} via {}, {}",
            self.bus.version_text,
            self.bus.via,
            self.reader.layout.describe()
        )
    }

    fn plan_apply(&self, plan: &ResolvedPlan) -> Result<Changes> {
        self.plan_transient(plan)
    }

    fn plan_destroy(&self, slices: &[SliceName], kill: bool) -> Result<Changes> {
        let names = super::removal_order(slices, self.slices());
        let mut errors = Vec::new();
        let mut ops = Vec::new();
        let mut busy = Vec::new();
        let mut files_removed = false;
        for name in &names {
            let unit = name.unit();
            let st = self.bus.unit_state(&unit)?;
            let transient = st
                .as_ref()
                .is_some_and(|s| self.is_transient_ours(&unit, s));
            let persisted = self.is_persisted_ours(&unit);
            if !transient && !persisted {
                match &st {
                    Some(s) if !free(s) => errors.push(self.foreign(name, s, "remove")),
                    _ => {}
                }
                continue;
            }
            let active = st.as_ref().is_some_and(|s| !free(s));
            let procs = self
                .reader
                .layout
                .primary()
                .map(|h| crate::metrics::count_procs(&self.reader.dir(h, name)))
                .unwrap_or(0);
            if procs > 0 {
                busy.push(format!("{name} ({procs} process(es))"));
                if kill {
                    ops.push(Call::KillUnit { unit: unit.clone() });
                }
            }
            if active {
                ops.push(Call::StopUnit { unit: unit.clone() });
            }
            if persisted {
                let path = self.persisted_path(&unit);
                let drop_in =
                    PathBuf::from(format!("{}.d", path.display())).join(export::FLOOR_DROP_IN);
                for p in [drop_in, path] {
                    if export::ours(&p) {
                        let previous = std::fs::read_to_string(&p).unwrap_or_default();
                        ops.push(Call::RemoveFile { path: p, previous });
                        files_removed = true;
                    }
                }
            }
        }
        if !busy.is_empty() && !kill {
            errors.push(
                Diagnostic::error(format!("slices still have processes: {}", busy.join("; ")))
                    .hint(
                    "stop them, move them out with `bulkhead move`, or pass --kill to kill them",
                ),
            );
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        if files_removed {
            ops.push(Call::Reload);
        }
        Ok(Changes {
            ops: ops.into_iter().map(Op::Systemd).collect(),
            slices: names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        })
    }

    fn execute(&self, changes: &Changes) -> Result<Outcome> {
        let mut undo_log: Vec<Call> = Vec::new();
        let mut irreversible: Vec<String> = Vec::new();
        let mut outcome = Outcome::default();
        for call in calls(changes) {
            match self.run_call(call) {
                Ok(()) => {
                    outcome.done += 1;
                    match undo(call) {
                        Some(u) => undo_log.push(u),
                        None if matches!(call, Call::Reload) => {}
                        None => irreversible.push(call.to_string()),
                    }
                }
                Err(e) => {
                    let mut failed_undo = Vec::new();
                    let mut files = false;
                    for u in undo_log.iter().rev() {
                        files |= matches!(u, Call::WriteFile { .. } | Call::RemoveFile { .. });
                        if let Err(ue) = self.run_call(u) {
                            failed_undo.push(format!("{}: {}", first_line(u), ue));
                        }
                    }
                    if files {
                        if let Err(ue) = self.run_call(&Call::Reload) {
                            failed_undo.push(format!("Reload: {ue}"));
                        }
                    }
                    let hint = if !irreversible.is_empty() {
                        format!(
                            "{} change(s) before it cannot be undone and stay done: {}",
                            irreversible.len(),
                            irreversible
                                .iter()
                                .map(|s| first_line_str(s))
                                .collect::<Vec<_>>()
                                .join("; ")
                        )
                    } else if failed_undo.is_empty() {
                        format!(
                            "nothing was left changed: the {} change(s) made before it were undone (transient units stopped, properties and files put back)",
                            undo_log.len()
                        )
                    } else {
                        format!(
                            "undoing the earlier changes failed too, check by hand: {}",
                            failed_undo.join("; ")
                        )
                    };
                    return Err(add_hint(e, &hint));
                }
            }
        }
        Ok(outcome)
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

    /// `run --scope`: move this process into a new transient scope in the slice.
    fn join(&self, slice: &SliceName) -> Result<()> {
        if !self.slice_exists(slice) {
            return Err(Error::invalid(
                Diagnostic::error(format!("slice '{slice}' does not exist")).context(MISSING_SLICE),
            ));
        }
        let pid = std::process::id();
        let unit = format!("bulkhead-run-{pid}.scope");
        let mut properties = vec![
            Prop::new(
                "Description",
                PropValue::Str(format!("bulkhead run --scope in {}", slice.unit())),
            ),
            Prop::new("Slice", PropValue::Str(slice.unit())),
            Prop::new("PIDs", PropValue::Pids(vec![pid])),
        ];
        if self.version() >= props::COLLECT_MODE_SINCE {
            properties.push(Prop::new(
                "CollectMode",
                PropValue::Str("inactive-or-failed".into()),
            ));
        }
        self.bus.start_transient(&unit, &properties).map_err(|e| {
            call_failed(&format!("create the scope {unit} in {}", slice.unit()), &e)
        })?;
        match self.bus.wait_settled(&unit, Duration::from_secs(30))? {
            Some(s) if s == "active" => Ok(()),
            s => Err(Error::failed(format!(
                "systemd could not start the scope {unit} (it is {})",
                s.unwrap_or_else(|| "gone".into())
            ))),
        }
    }

    /// Attach a process to the slice's delegated scope `bulkhead-move-SLICE.scope`, made with
    /// the first process moved there.
    fn move_pid(&self, slice: &SliceName, pid: i32) -> std::result::Result<(), String> {
        if self.version() < props::ATTACH_SINCE {
            return Err(format!(
                "systemd {} is too old: moving processes needs AttachProcessesToUnit, which came in systemd {} (use --backend cgroupfs on this host)",
                self.bus.version_text,
                props::ATTACH_SINCE
            ));
        }
        if !self.slice_exists(slice) {
            return Err(format!("slice '{slice}' does not exist"));
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_err(|_| "no such process".to_string())?;
        let flags: u64 = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(6))
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        if flags & 0x0020_0000 != 0 {
            return Err("is a kernel thread; kernel threads cannot be moved".into());
        }
        let scope = move_scope(slice);
        let active = self
            .bus
            .unit_state(&scope)
            .map_err(|e| e.to_string())?
            .is_some_and(|st| st.active_state == "active");
        if active {
            return self
                .bus
                .manager()
                .attach_processes_to_unit(&scope, "/", &[pid as u32])
                .map_err(|e| {
                    format!(
                        "systemd refused AttachProcessesToUnit({scope}): {}",
                        short(&e)
                    )
                });
        }
        let mut properties = vec![
            Prop::new(
                "Description",
                PropValue::Str(format!("Processes moved into {} by bulkhead", slice.unit())),
            ),
            Prop::new("Slice", PropValue::Str(slice.unit())),
            Prop::new("Delegate", PropValue::Bool(true)),
            Prop::new("PIDs", PropValue::Pids(vec![pid as u32])),
        ];
        properties.push(Prop::new(
            "CollectMode",
            PropValue::Str("inactive-or-failed".into()),
        ));
        self.bus
            .start_transient(&scope, &properties)
            .map_err(|e| format!("systemd refused to create {scope}: {}", short(&e)))?;
        match self.bus.wait_settled(&scope, Duration::from_secs(30)) {
            Ok(Some(s)) if s == "active" => Ok(()),
            Ok(s) => Err(format!(
                "systemd could not start {scope} (it is {})",
                s.unwrap_or_else(|| "gone".into())
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The delegated scope `move` puts processes in.
pub fn move_scope(slice: &SliceName) -> String {
    format!("bulkhead-move-{slice}.scope")
}

fn first_line(c: &Call) -> String {
    first_line_str(&c.to_string()).to_string()
}

fn first_line_str(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Systemd,
    Cgroupfs,
}

/// The backend chosen for this host, with why.
pub enum Chosen {
    Systemd(Box<Systemd>),
    Cgroupfs(CgroupFs),
}

impl Chosen {
    pub fn backend(&self) -> &dyn Backend {
        match self {
            Chosen::Systemd(s) => s.as_ref(),
            Chosen::Cgroupfs(c) => c,
        }
    }
    /// The cgroupfs view used to read slices (status).
    pub fn reader(&self) -> &CgroupFs {
        match self {
            Chosen::Systemd(s) => &s.reader,
            Chosen::Cgroupfs(c) => c,
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
            if default_root && pid1_is_systemd() {
                if let Ok(s) = Systemd::connect(layout.clone()) {
                    return Ok(Chosen::Systemd(Box::new(s)));
                }
            }
            Ok(Chosen::Cgroupfs(CgroupFs::new(layout, cgroup_root)?))
        }
    }
}
