//! `run` through systemd: the command becomes a transient service in the slice, as with
//! `systemd-run --wait --pipe` (or `--pty`), and bulkhead waits for it and exits with its
//! status. The command gets bulkhead's standard input, output and error (passed to systemd
//! as file descriptors), its environment and working directory, so `bulkhead run` means the
//! same on both backends; signals bulkhead receives are forwarded to it.

use super::{find_program_with, resolve_ids, RunError, RunSpec, EXIT_RUN_FAILED};
use bulkhead_cgroups::systemd::{ServiceSpec, ServiceStdio, Systemd};
use bulkhead_cgroups::Placement;
use bulkhead_plan::env::read_env_file;
use bulkhead_sys::error::{errno_text, Diagnostic, Error};
use bulkhead_sys::pty::{self, Pty, RawStdin};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use bulkhead_cgroups::systemd::ServiceExit;

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
    let failed = |error: Error| RunError::with_code(EXIT_RUN_FAILED, error);
    let (service, pty) = service_spec(sd, spec, opts)?;
    let mut running = sd.start_service(&service).map_err(failed)?;
    let io = pty.map(PtyIo::start);
    if let Some(ns) = crate::tasks::recorded(&service.slice) {
        // systemd forked the command, so it inherits nothing from bulkhead.
        crate::tasks::set_on_slice(&sd.reader, &service.slice, ns);
    }
    let finished = running.wait();
    if let Some(io) = io {
        io.finish();
    }
    finished.map_err(failed)?;
    running.exit().map_err(failed)
}

/// Everything that can fail before systemd is asked: the command, the slice, the user, the
/// environment, the working directory, the program, systemd's version and the terminal.
fn service_spec(
    sd: &Systemd,
    spec: &RunSpec,
    opts: ServiceOptions,
) -> Result<(ServiceSpec, Option<Pty>), RunError> {
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
    let env = service_env(spec)?;
    let cwd = service_cwd(spec)?;
    let program = find_program_with(prog, &env)?;
    let program = std::path::absolute(&program).unwrap_or(program);
    sd.check_run_service()
        .map_err(|e| RunError::with_code(EXIT_RUN_FAILED, e))?;
    if !sd.slice_exists(slice) {
        return Err(RunError::missing_slice(slice));
    }
    let (stdio, pty) = if opts.pty {
        let (stdio, p) = open_pty()?;
        (stdio, Some(p))
    } else {
        (ServiceStdio::Inherit, None)
    };
    let service = ServiceSpec {
        slice: slice.clone(),
        program,
        argv: spec.argv.clone(),
        env,
        cwd,
        user: ids.uid.map(|u| u.to_string()),
        group: ids.gid.map(|g| g.to_string()),
        stdio,
    };
    Ok((service, pty))
}

/// bulkhead's environment, then the files, then -E.
fn service_env(spec: &RunSpec) -> Result<Vec<(String, String)>, RunError> {
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !NOT_INHERITED.contains(&k.as_str()))
        .collect();
    for f in &spec.env_files {
        env.extend(read_env_file(f).map_err(|error| RunError::with_code(EXIT_RUN_FAILED, error))?);
    }
    env.extend(spec.env.iter().cloned());
    Ok(env)
}

/// `--cwd`, absolute, or bulkhead's own working directory.
fn service_cwd(spec: &RunSpec) -> Result<PathBuf, RunError> {
    Ok(match &spec.cwd {
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
    })
}

/// A pseudo-terminal for the command, and the master shared with the signal forwarder.
fn open_pty() -> Result<(ServiceStdio, Pty), RunError> {
    let p = Pty::open().map_err(|e| {
        fail(
            EXIT_RUN_FAILED,
            Diagnostic::error(format!(
                "cannot allocate a pseudo-terminal: {}",
                errno_text(&e)
            )),
        )
    })?;
    let master: Arc<OwnedFd> = Arc::new(p.master.try_clone().map_err(|e| {
        fail(
            EXIT_RUN_FAILED,
            Diagnostic::error(format!(
                "cannot share the pseudo-terminal: {}",
                errno_text(&e)
            )),
        )
    })?);
    let stdio = ServiceStdio::Tty {
        path: p.path.clone(),
        master,
    };
    Ok((stdio, p))
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
