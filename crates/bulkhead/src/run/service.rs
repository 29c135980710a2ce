//! `run` through systemd: the command becomes a transient service in the slice, as with
//! `systemd-run --wait --pipe` (or `--pty`), and bulkhead waits for it and exits with its
//! status. The command gets bulkhead's standard input, output and error (passed to systemd
//! as file descriptors), its environment and working directory, so `bulkhead run` means the
//! same on both backends; signals bulkhead receives are forwarded to it.

use super::{find_program_with, resolve_ids, RunError, RunSpec, EXIT_RUN_FAILED};
use bulkhead_cgroups::systemd::bus::{call_failed, unit_object_path, Bus, Manager};
use bulkhead_cgroups::systemd::props::{Prop, PropValue};
use bulkhead_cgroups::systemd::versions::{COLLECT_MODE_SINCE, RUN_SERVICE_SINCE};
use bulkhead_cgroups::systemd::{refused, Systemd};
use bulkhead_cgroups::Placement;
use bulkhead_plan::env::read_env_file;
use bulkhead_sys::error::{errno_text, Diagnostic, Error};
use bulkhead_sys::pty::{self, Pty, RawStdin};
use bulkhead_sys::signals::{SignalPipe, FORWARDED};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

/// How `run` talks to the command.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServiceOptions {
    /// Give the command a pseudo-terminal (like `systemd-run --pty`) instead of bulkhead's
    /// own standard input, output and error.
    pub pty: bool,
}

/// Variables that describe bulkhead's own service, not the command's.
const NOT_INHERITED: &[&str] = &[
    "INVOCATION_ID",
    "JOURNAL_STREAM",
    "NOTIFY_SOCKET",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "SYSTEMD_EXEC_PID",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
    "MAINPID",
    "MANAGERPID",
];

fn fail(code: i32, d: Diagnostic) -> RunError {
    RunError::with_code(code, Error::failed_with(d))
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

/// How the service ended.
#[derive(Debug)]
pub struct ServiceExit {
    /// The exit code `run` gives: the command's, or 128+N for signal N.
    pub code: i32,
    /// A remark for the user (an exit status systemd also uses for its own failures).
    pub note: Option<Diagnostic>,
}

/// `--listen-fds` cannot work in a service: StartTransientUnit (like systemd-run) gives the
/// service only standard input, output and error, so the command would start without its
/// sockets and without `LISTEN_FDS`. Refuse it, and say what works.
pub fn check_listen_fds(spec: &RunSpec) -> Result<(), RunError> {
    if spec.listen_fds == 0 {
        return Ok(());
    }
    Err(RunError::with_code(
        EXIT_RUN_FAILED,
        Error::invalid(
            Diagnostic::error(format!(
                "--listen-fds {}: a systemd service cannot be given bulkhead's file descriptors (StartTransientUnit, like systemd-run, passes only standard input, output and error), so the command would start without its sockets",
                spec.listen_fds
            ))
            .hint("add --scope (bulkhead moves itself into a transient scope in the slice and execs the command with fds 3.. and LISTEN_FDS, LISTEN_PID), or use --backend cgroupfs"),
        ),
    ))
}

/// Run the command as a transient service in its slice and wait for it.
pub fn run_service(
    sd: &Systemd,
    spec: &RunSpec,
    opts: ServiceOptions,
) -> Result<ServiceExit, RunError> {
    check_listen_fds(spec)?;
    let Some(prog) = spec.argv.first() else {
        return Err(RunError::with_code(
            EXIT_RUN_FAILED,
            Error::invalid(Diagnostic::error("no command given").hint(
                "write the command after --, e.g. bulkhead run --slice db-helper -- /usr/bin/backup",
            )),
        ));
    };
    let Some(slice) = &spec.slice else {
        return Err(fail(EXIT_RUN_FAILED, Diagnostic::error("no slice given")));
    };
    let ids = resolve_ids(spec)?;
    // The command gets bulkhead's environment, then the files, then -E.
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !NOT_INHERITED.contains(&k.as_str()))
        .collect();
    for f in &spec.env_files {
        env.extend(read_env_file(f).map_err(|error| RunError::with_code(EXIT_RUN_FAILED, error))?);
    }
    env.extend(spec.env.iter().cloned());
    let cwd = match &spec.cwd {
        Some(c) if !c.is_dir() => {
            return Err(RunError::with_code(
                EXIT_RUN_FAILED,
                Error::invalid(Diagnostic::error(format!(
                    "--cwd {}: not a directory",
                    c.display()
                ))),
            ))
        }
        Some(c) => std::path::absolute(c).unwrap_or_else(|_| c.clone()),
        None => std::env::current_dir().unwrap_or_else(|_| "/".into()),
    };
    let program = find_program_with(prog, &env)?;
    let program = std::path::absolute(&program).unwrap_or(program);
    if sd.version() < RUN_SERVICE_SINCE {
        return Err(fail(
            EXIT_RUN_FAILED,
            Diagnostic::error(format!(
                "systemd {} is too old to run a command as a service and wait for it (AddRef= and Type=exec came in systemd {RUN_SERVICE_SINCE})",
                sd.bus.version_text
            ))
            .hint("use `bulkhead run --scope`, which works with any systemd"),
        ));
    }
    if !sd.slice_exists(slice) {
        return Err(RunError::missing_slice(slice));
    }

    let unit = format!("bulkhead-run-{}.service", std::process::id());
    let text = |s: &std::ffi::OsString| s.to_string_lossy().into_owned();
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
        Prop::new("Slice", PropValue::Str(slice.unit())),
        Prop::new("Type", PropValue::Str("exec".into())),
        Prop::new(
            "ExecStart",
            PropValue::Exec(vec![(program.display().to_string(), argv, false)]),
        ),
        Prop::new("AddRef", PropValue::Bool(true)),
        Prop::new(
            "Environment",
            PropValue::Strs(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        ),
        Prop::new(
            "WorkingDirectory",
            PropValue::Str(cwd.display().to_string()),
        ),
    ];
    if sd.version() >= COLLECT_MODE_SINCE {
        props.push(Prop::new(
            "CollectMode",
            PropValue::Str("inactive-or-failed".into()),
        ));
    }
    if let Some(u) = ids.uid {
        props.push(Prop::new("User", PropValue::Str(u.to_string())));
    }
    if let Some(g) = ids.gid {
        props.push(Prop::new("Group", PropValue::Str(g.to_string())));
    }
    let pty = if opts.pty {
        let p = Pty::open().map_err(|e| {
            fail(
                EXIT_RUN_FAILED,
                Diagnostic::error(format!(
                    "cannot allocate a pseudo-terminal: {}",
                    errno_text(&e)
                )),
            )
        })?;
        props.push(Prop::new("TTYPath", PropValue::Str(p.path.clone())));
        for s in ["StandardInput", "StandardOutput", "StandardError"] {
            props.push(Prop::new(s, PropValue::Str("tty".into())));
        }
        Some(p)
    } else {
        for (name, fd) in [
            ("StandardInputFileDescriptor", 0),
            ("StandardOutputFileDescriptor", 1),
            ("StandardErrorFileDescriptor", 2),
        ] {
            if bulkhead_sys::fd::is_open(fd) {
                props.push(Prop::new(name, PropValue::Fd(fd)));
            }
        }
        None
    };

    let bus = &sd.bus;
    let conn = bus.conn.clone();
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.freedesktop.systemd1")
        .and_then(|b| b.path(unit_object_path(&unit)))
        .and_then(|b| b.interface("org.freedesktop.DBus.Properties"))
        .and_then(|b| b.member("PropertiesChanged"))
        .map(|b| b.build())
        .map_err(|e| RunError::with_code(EXIT_RUN_FAILED, call_failed("watch the service", &e)))?;
    let mut changes = zbus::blocking::MessageIterator::for_match_rule(rule, &conn, Some(1024))
        .map_err(|e| RunError::with_code(EXIT_RUN_FAILED, call_failed("watch the service", &e)))?;
    bus.manager()
        .subscribe()
        .map_err(|e| RunError::with_code(EXIT_RUN_FAILED, call_failed("Subscribe", &e)))?;
    let master = match &pty {
        Some(p) => Some(Arc::new(p.master.try_clone().map_err(|e| {
            fail(
                EXIT_RUN_FAILED,
                Diagnostic::error(format!(
                    "cannot share the pseudo-terminal: {}",
                    errno_text(&e)
                )),
            )
        })?)),
        None => None,
    };
    let forwarder = Forwarder::install(conn.clone(), unit.clone(), master);
    if let Err(e) = bus.start_transient(&unit, &props) {
        drop(forwarder);
        return Err(RunError::with_code(
            EXIT_RUN_FAILED,
            refused(&unit, &props, &e),
        ));
    }
    let io = pty.map(PtyIo::start);
    if let Some(ns) = crate::tasks::recorded(slice) {
        // systemd forked the command, so it inherits nothing from bulkhead.
        crate::tasks::set_on_slice(&sd.reader, slice, ns);
    }
    let finished = wait_finished(bus, &unit, &mut changes);
    drop(forwarder);
    if let Some(io) = io {
        io.finish();
    }
    finished.map_err(|e| RunError::with_code(EXIT_RUN_FAILED, e))?;

    let get_i32 = |name: &str| {
        bus.unit_property(&unit, "org.freedesktop.systemd1.Service", name)
            .ok()
            .flatten()
            .and_then(|v| i32::try_from(&*v).ok())
    };
    let code = get_i32("ExecMainCode").unwrap_or(0);
    let status = get_i32("ExecMainStatus").unwrap_or(0);
    let result = bus
        .unit_property(&unit, "org.freedesktop.systemd1.Service", "Result")
        .ok()
        .flatten()
        .and_then(|v| <&str>::try_from(&*v).ok().map(String::from))
        .unwrap_or_default();
    bus.unref(&unit);
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
        _ => Err(fail(
            EXIT_RUN_FAILED,
            Diagnostic::error(format!(
                "systemd did not start the command (result: {})",
                if result.is_empty() {
                    "unknown"
                } else {
                    &result
                }
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
) -> bulkhead_sys::error::Result<()> {
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

/// The command's pseudo-terminal while it runs: stdin -> terminal, terminal -> stdout, and
/// stdin raw if it is a terminal.
struct PtyIo {
    slave: OwnedFd,
    raw: RawStdin,
    output_done: std::sync::mpsc::Receiver<()>,
}

impl PtyIo {
    fn start(p: Pty) -> PtyIo {
        let raw = RawStdin::enter();
        let master = Arc::new(p.master);
        let m_in = master.clone();
        std::thread::spawn(move || pty::copy(bulkhead_sys::fd::stdin(), m_in.as_fd()));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            pty::copy(master.as_fd(), bulkhead_sys::fd::stdout());
            let _ = done_tx.send(());
        });
        PtyIo {
            slave: p.slave,
            raw,
            output_done: done_rx,
        }
    }

    /// After the command ended: let the last output through, then restore the terminal. The
    /// master stays open in the copy threads until the process exits.
    fn finish(self) {
        drop(self.slave);
        // The master reads EIO once no one holds the terminal open any more; a process the
        // command left behind may still hold it, so do not wait for long.
        let _ = self.output_done.recv_timeout(Duration::from_secs(2));
        drop(self.raw);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_fds_are_refused_for_a_service_with_what_to_do() {
        let mut spec = RunSpec {
            argv: vec!["/bin/true".into()],
            ..RunSpec::default()
        };
        assert!(check_listen_fds(&spec).is_ok());
        spec.listen_fds = 2;
        let e = check_listen_fds(&spec).unwrap_err();
        assert_eq!(e.code, EXIT_RUN_FAILED);
        let text = e.error.to_string();
        assert!(text.contains("--listen-fds 2"), "{text}");
        assert!(text.contains("add --scope"), "{text}");
    }
}
