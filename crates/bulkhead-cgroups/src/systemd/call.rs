//! The systemd backend's operations: calls to systemd's manager and unit files, as plain
//! data. Executed in order; when one fails, the ones before are undone in reverse.

use super::bus::{call_failed, error_name, short};
use super::props::Prop;
use super::{bus, record, record_dir, Systemd};
use crate::backend::Outcome;
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// Manager.FreezeUnit(unit): every process of the unit stops until thawed.
    FreezeUnit { unit: String },
    /// Manager.ThawUnit(unit).
    ThawUnit { unit: String },
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
            Call::FreezeUnit { unit } => write!(f, "dbus FreezeUnit({unit:?})"),
            Call::ThawUnit { unit } => write!(f, "dbus ThawUnit({unit:?})"),
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

impl Systemd {
    /// Carry out the calls in order; on failure undo the ones made (reloading systemd when
    /// files were put back) and say what was left.
    pub(crate) fn execute_calls(&self, calls: &[&Call]) -> Result<Outcome> {
        let mut undo_log: Vec<Call> = Vec::new();
        let mut irreversible: Vec<String> = Vec::new();
        let mut outcome = Outcome::default();
        for call in calls {
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

    /// Freeze or thaw a unit of bulkhead's own (a socket target's `bulkhead-run-PID.service`
    /// or `bulkhead-spawn-PID.scope`): Manager.FreezeUnit / ThawUnit (systemd 246+, cgroup2).
    pub fn freeze_unit(&self, unit: &str, frozen: bool) -> Result<()> {
        let unit = unit.to_string();
        self.run_call(&match frozen {
            true => Call::FreezeUnit { unit },
            false => Call::ThawUnit { unit },
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
                    s => {
                        // The unit never ran: nothing to undo later, so no record either.
                        let _ = std::fs::remove_file(record(unit));
                        Err(Error::failed_with(
                        Diagnostic::error(format!(
                            "systemd could not start {unit} ({})",
                            match s {
                                Some(s) => format!("it is {s}"),
                                None => "its start job failed and systemd unloaded it".into(),
                            }
                        ))
                        .hint(format!(
                            "see: journalctl -u {unit}; a drop-in's Condition/Assert or a dependency can stop a slice: systemctl cat {unit}"
                        )),
                    ))
                    }
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
            Call::FreezeUnit { unit } => m
                .freeze_unit(unit)
                .map_err(|e| call_failed(&format!("FreezeUnit({unit})"), &e)),
            Call::ThawUnit { unit } => m
                .thaw_unit(unit)
                .map_err(|e| call_failed(&format!("ThawUnit({unit})"), &e)),
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

/// A unit file or drop-in, whole: its directory made if missing, the text written to a new
/// temporary file beside it (never through a planted symlink) and renamed over it.
fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        bulkhead_sys::statefile::ensure_dir(parent, 0o755)
            .map_err(|e| bulkhead_sys::error::io_failed("cannot create", parent, e))?;
    }
    bulkhead_sys::statefile::write_atomic(path, text.as_bytes(), 0o644)
        .map_err(|e| bulkhead_sys::error::io_failed("cannot write", path, e))
}

/// systemd refused properties: name the directive the message is about.
pub fn refused(unit: &str, properties: &[Prop], e: &zbus::Error) -> Error {
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
        Call::FreezeUnit { unit } => Some(Call::ThawUnit { unit: unit.clone() }),
        Call::ThawUnit { unit } => Some(Call::FreezeUnit { unit: unit.clone() }),
        Call::StopUnit { .. } | Call::KillUnit { .. } | Call::Reload => None,
    }
}

fn first_line(c: &Call) -> String {
    first_line_str(&c.to_string()).to_string()
}

fn first_line_str(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}
