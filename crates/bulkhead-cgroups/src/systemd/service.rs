//! A command as a transient service in a slice, as `systemd-run --wait --pipe` (or `--pty`)
//! makes it: the properties, the watch on the unit's D-Bus signals, the signals bulkhead
//! gets forwarded to the unit (KillUnit), and the exit status systemd records. The library's
//! `run` prepares what to run ([`ServiceSpec`]) and relays the terminal; everything that
//! speaks D-Bus is here.

use super::bus::{call_failed, unit_object_path, Bus, Manager};
use super::props::{Prop, PropValue};
use super::versions::{COLLECT_MODE_SINCE, RUN_SERVICE_SINCE};
use super::{refused, Systemd};
use bulkhead_plan::SliceName;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::pty;
use bulkhead_sys::signals::{SignalPipe, FORWARDED};
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

/// What to run as a service: everything already resolved by the caller.
#[derive(Debug)]
pub struct ServiceSpec {
    pub slice: SliceName,
    /// The absolute path of the program.
    pub program: PathBuf,
    /// The command line as given (`argv[0]` first).
    pub argv: Vec<OsString>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub user: Option<String>,
    pub group: Option<String>,
    pub stdio: ServiceStdio,
}

/// Where the service's standard input, output and error go.
#[derive(Debug)]
pub enum ServiceStdio {
    /// bulkhead's own descriptors 0, 1 and 2 (those that are open), passed to systemd.
    Inherit,
    /// A pseudo-terminal: its path (TTYPath=) and the master, to forward window size changes.
    Tty { path: String, master: Arc<OwnedFd> },
}

/// How the service ended.
#[derive(Debug)]
pub struct ServiceExit {
    /// The exit code `run` gives: the command's, or 128+N for signal N.
    pub code: i32,
    /// A remark for the user (an exit status systemd also uses for its own failures).
    pub note: Option<Diagnostic>,
}

/// The names systemd gives its own exit statuses (systemd.exec(5), "Process Exit Codes").
fn systemd_exit_name(status: i32) -> Option<&'static str> {
    Some(match status {
        200 => "CHDIR: the working directory could not be entered",
        203 => "EXEC: the command could not be executed",
        204 => "MEMORY",
        208 => "STDIN: standard input could not be set up",
        209 => "STDOUT: standard output could not be set up",
        216 => "GROUP: the group could not be set",
        217 => "USER: the user could not be set",
        218 => "CAPABILITIES",
        219 => "CGROUP: the process could not join its cgroup",
        222 => "STDERR: standard error could not be set up",
        224 => "PAM",
        _ => return None,
    })
}

impl Systemd {
    /// Whether this systemd can run a command as a service and wait for it; if not, why and
    /// what to use instead.
    pub fn check_run_service(&self) -> Result<()> {
        if self.version() >= RUN_SERVICE_SINCE {
            return Ok(());
        }
        Err(Error::failed_with(
            Diagnostic::error(format!(
                "systemd {} is too old to run a command as a service and wait for it (AddRef= and Type=exec came in systemd {RUN_SERVICE_SINCE})",
                self.bus.version_text
            ))
            .hint("use `bulkhead run --scope`, which works with any systemd"),
        ))
    }

    /// Start the service (signals bulkhead gets go to it from now on). Wait for it with
    /// [`RunningService::wait`].
    pub fn start_service(&self, spec: &ServiceSpec) -> Result<RunningService<'_>> {
        let unit = format!("bulkhead-run-{}.service", std::process::id());
        let props = self.service_props(spec);
        let bus = &self.bus;
        let changes = watch_unit(bus, &unit)?;
        bus.manager()
            .subscribe()
            .map_err(|e| call_failed("Subscribe", &e))?;
        let master = match &spec.stdio {
            ServiceStdio::Tty { master, .. } => Some(master.clone()),
            ServiceStdio::Inherit => None,
        };
        let forwarder = Forwarder::install(bus.conn.clone(), unit.clone(), master);
        if let Err(e) = bus.start_transient(&unit, &props) {
            drop(forwarder);
            return Err(refused(&unit, &props, &e));
        }
        Ok(RunningService {
            bus,
            unit,
            changes,
            forwarder: Some(forwarder),
        })
    }

    /// The transient service's properties.
    fn service_props(&self, spec: &ServiceSpec) -> Vec<Prop> {
        let text = |s: &OsString| s.to_string_lossy().into_owned();
        // systemd expands $VAR in command lines; `$$` is its literal `$`.
        let argv: Vec<String> = spec
            .argv
            .iter()
            .map(|a| text(a).replace('$', "$$"))
            .collect();
        let mut props = vec![
            Prop::new(
                "Description",
                PropValue::Str(format!(
                    "bulkhead run: {}",
                    spec.argv.iter().map(text).collect::<Vec<_>>().join(" ")
                )),
            ),
            Prop::new("Slice", PropValue::Str(spec.slice.unit())),
            Prop::new("Type", PropValue::Str("exec".into())),
            Prop::new(
                "ExecStart",
                PropValue::Exec(vec![(spec.program.display().to_string(), argv, false)]),
            ),
            Prop::new("AddRef", PropValue::Bool(true)),
            Prop::new(
                "Environment",
                PropValue::Strs(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            ),
            Prop::new(
                "WorkingDirectory",
                PropValue::Str(spec.cwd.display().to_string()),
            ),
        ];
        if self.version() >= COLLECT_MODE_SINCE {
            props.push(Prop::new(
                "CollectMode",
                PropValue::Str("inactive-or-failed".into()),
            ));
        }
        if let Some(u) = &spec.user {
            props.push(Prop::new("User", PropValue::Str(u.clone())));
        }
        if let Some(g) = &spec.group {
            props.push(Prop::new("Group", PropValue::Str(g.clone())));
        }
        props.extend(stdio_props(&spec.stdio));
        props
    }
}

/// Standard input, output and error: the terminal, or bulkhead's own open descriptors.
fn stdio_props(stdio: &ServiceStdio) -> Vec<Prop> {
    match stdio {
        ServiceStdio::Tty { path, .. } => {
            let mut props = vec![Prop::new("TTYPath", PropValue::Str(path.clone()))];
            for s in ["StandardInput", "StandardOutput", "StandardError"] {
                props.push(Prop::new(s, PropValue::Str("tty".into())));
            }
            props
        }
        ServiceStdio::Inherit => [
            ("StandardInputFileDescriptor", 0),
            ("StandardOutputFileDescriptor", 1),
            ("StandardErrorFileDescriptor", 2),
        ]
        .into_iter()
        .filter(|(_, fd)| bulkhead_sys::fd::is_open(*fd))
        .map(|(name, fd)| Prop::new(name, PropValue::Fd(fd)))
        .collect(),
    }
}

/// The unit's PropertiesChanged signals, from before it starts.
fn watch_unit(bus: &Bus, unit: &str) -> Result<zbus::blocking::MessageIterator> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.freedesktop.systemd1")
        .and_then(|b| b.path(unit_object_path(unit)))
        .and_then(|b| b.interface("org.freedesktop.DBus.Properties"))
        .and_then(|b| b.member("PropertiesChanged"))
        .map(|b| b.build())
        .map_err(|e| call_failed("watch the service", &e))?;
    zbus::blocking::MessageIterator::for_match_rule(rule, &bus.conn, Some(1024))
        .map_err(|e| call_failed("watch the service", &e))
}

/// A service bulkhead started and waits for.
pub struct RunningService<'a> {
    bus: &'a Bus,
    unit: String,
    changes: zbus::blocking::MessageIterator,
    forwarder: Option<Forwarder>,
}

impl RunningService<'_> {
    /// The service's unit name.
    pub fn unit(&self) -> &str {
        &self.unit
    }

    /// Wait until the service has no job and is inactive or failed, then stop forwarding
    /// signals.
    pub fn wait(&mut self) -> Result<()> {
        let finished = wait_finished(self.bus, &self.unit, &mut self.changes);
        drop(self.forwarder.take());
        finished
    }

    /// How the service ended (after [`wait`](Self::wait)); lets systemd collect the unit.
    pub fn exit(self) -> Result<ServiceExit> {
        let (bus, unit) = (self.bus, &self.unit);
        let get_i32 = |name: &str| {
            bus.unit_property(unit, "org.freedesktop.systemd1.Service", name)
                .ok()
                .flatten()
                .and_then(|v| i32::try_from(&*v).ok())
        };
        let code = get_i32("ExecMainCode").unwrap_or(0);
        let status = get_i32("ExecMainStatus").unwrap_or(0);
        let result = bus
            .unit_property(unit, "org.freedesktop.systemd1.Service", "Result")
            .ok()
            .flatten()
            .and_then(|v| <&str>::try_from(&*v).ok().map(String::from))
            .unwrap_or_default();
        bus.unref(unit);
        exit_of(code, status, &result, unit)
    }
}

/// The exit `run` gives for systemd's ExecMainCode, ExecMainStatus and Result.
fn exit_of(code: i32, status: i32, result: &str, unit: &str) -> Result<ServiceExit> {
    match code {
        // CLD_EXITED. systemd's own failures (bad user, working directory, ...) are exit
        // statuses too, as with systemd-run; say what they mean.
        1 => Ok(ServiceExit {
            code: status,
            note: systemd_exit_name(status)
                .filter(|_| result != "success")
                .map(|what| {
                    Diagnostic::note(format!(
                        "exit status {status} is also systemd's {what}; if the command did not run, see: journalctl -u {unit}"
                    ))
                }),
        }),
        // CLD_KILLED, CLD_DUMPED
        2 | 3 => Ok(ServiceExit {
            code: 128 + status,
            note: None,
        }),
        _ => Err(Error::failed_with(
            Diagnostic::error(format!(
                "systemd did not start the command (result: {})",
                if result.is_empty() { "unknown" } else { result }
            ))
            .hint(format!("see: journalctl -u {unit}")),
        )),
    }
}

/// Wait until the service has no job and is inactive or failed.
fn wait_finished(
    bus: &Bus,
    unit: &str,
    changes: &mut zbus::blocking::MessageIterator,
) -> Result<()> {
    loop {
        match bus.unit_state(unit)? {
            None => return Ok(()),
            Some(s) if !s.job && matches!(s.active_state.as_str(), "inactive" | "failed") => {
                return Ok(())
            }
            _ => {}
        }
        match changes.next() {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(call_failed(&format!("wait for {unit}"), &e)),
            None => {
                return Err(Error::failed(format!(
                    "the connection to systemd closed while waiting for {unit}"
                )))
            }
        }
    }
}

/// Forwards the signals bulkhead gets to the service (KillUnit), and window size changes to
/// its pseudo-terminal. Dropping it puts the default handlers back.
struct Forwarder {
    pipe: Option<SignalPipe>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Forwarder {
    fn install(
        conn: zbus::blocking::Connection,
        unit: String,
        pty_master: Option<Arc<OwnedFd>>,
    ) -> Forwarder {
        let Ok(pipe) = SignalPipe::install(FORWARDED) else {
            return Forwarder {
                pipe: None,
                thread: None,
            };
        };
        let Ok(reader) = pipe.reader() else {
            return Forwarder {
                pipe: Some(pipe),
                thread: None,
            };
        };
        let thread = std::thread::spawn(move || {
            let Ok(manager) = Manager::new(&conn) else {
                return;
            };
            while let Some(sig) = reader.recv() {
                if sig == libc::SIGWINCH {
                    if let Some(m) = &pty_master {
                        pty::copy_window_size(bulkhead_sys::fd::stdin(), m.as_fd());
                    }
                    continue;
                }
                // Keyboard signals go to the whole unit, as to a foreground process group.
                let whom = if matches!(sig, libc::SIGINT | libc::SIGQUIT) {
                    "all"
                } else {
                    "main"
                };
                let _ = manager.kill_unit(&unit, whom, sig);
            }
        });
        Forwarder {
            pipe: Some(pipe),
            thread: Some(thread),
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        drop(self.pipe.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_systemd_also_uses_get_a_note_unless_the_service_succeeded() {
        let e = exit_of(1, 217, "exit-code", "u.service").unwrap();
        assert_eq!(e.code, 217);
        let note = e.note.unwrap().to_string();
        assert!(note.contains("USER"), "{note}");
        assert!(note.contains("journalctl -u u.service"), "{note}");
        assert!(exit_of(1, 217, "success", "u.service")
            .unwrap()
            .note
            .is_none());
        assert_eq!(exit_of(2, 9, "signal", "u.service").unwrap().code, 137);
        let err = exit_of(0, 0, "", "u.service").unwrap_err().to_string();
        assert!(err.contains("result: unknown"), "{err}");
    }
}
