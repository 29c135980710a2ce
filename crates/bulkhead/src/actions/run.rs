//! `run`: a command in a slice. On cgroupfs the command is cloned straight into the slice
//! where that is one cgroup2 directory (pure v2: CLONE_INTO_CGROUP, bulkhead waits outside),
//! else bulkhead joins the slice and execs the command (see [`crate::run`]); with
//! `--hugepages` bulkhead joins, forks and stays the parent to check that the command got
//! huge pages. Through systemd the command becomes a transient service (or `--scope`:
//! bulkhead moves itself into a transient scope and execs).

use super::slices::missing_slice;
use super::Context;
use crate::hugepages::launch::{self, Prepared, RunMode};
use crate::hugepages::{Facts, Paths};
use crate::run::exec;
use crate::run::service::{run_service, ServiceOptions};
pub use crate::run::{RunError, RunSpec, EXIT_RUN_FAILED};
use bulkhead_cgroups::Chosen;
use bulkhead_sys::error::{Diagnostic, Error};

/// How to run it.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// The command, its user, directory, environment and slice.
    pub spec: RunSpec,
    /// systemd: a scope instead of a service.
    pub scope: bool,
    /// systemd: a pseudo-terminal.
    pub pty: bool,
    /// `--hugepages thp|2M|1G`.
    pub hugepages: Option<String>,
    /// With hugepages: stay the parent and check (else exec in place).
    pub verify: bool,
}

/// What the user hears while the command runs.
pub enum RunEvent<'a> {
    /// A finding about the run (notes are for people who did not ask for quiet).
    Note(Diagnostic),
    /// A line about huge pages (what was set, what the command got).
    Hugepages(&'a str),
    /// How the command was put into its slice (cloned into it, or joined then exec'd): for
    /// `run -v`.
    Placed(&'a str),
}

/// Run the command; returns its exit code (0..=255, 128+N for a signal), or why it did not
/// start with the exit code to give (125, 126, 127). Returns only when the command ran as a
/// child (cloned into a pure v2 slice, `--hugepages`) or a service, or failed to start: a
/// run that joins its slice execs in place.
pub fn run(cx: &Context, req: RunRequest, on: &mut dyn FnMut(RunEvent)) -> Result<i32, RunError> {
    let start = |e: Error| RunError::with_code(EXIT_RUN_FAILED, e);
    let chosen = cx.choose().map_err(start)?;
    let mut spec = req.spec.clone();
    // The slice's scheduler slice (CPUSchedulingSliceSec): taken before exec or fork, so the
    // command and its threads inherit it; a service gets it from the slice once it runs.
    if let Some(w) = spec.slice.as_ref().and_then(crate::tasks::set_on_self) {
        on(RunEvent::Note(Diagnostic::warning(w)));
    }
    let result = match &req.hugepages {
        Some(mode) => run_hugepages(&chosen, &mut spec, mode, req.verify, on),
        None => run_plain(&chosen, &spec, req.scope, req.pty, on),
    };
    result.map_err(|e| explain_missing(cx, &chosen, e))
}

/// A missing slice gets the full explanation (in the plan or not, the nearest name).
fn explain_missing(cx: &Context, chosen: &Chosen, e: RunError) -> RunError {
    match &e.missing_slice {
        Some(s) => RunError {
            error: missing_slice(cx, chosen, s),
            ..e
        },
        None => e,
    }
}

fn run_plain(
    chosen: &Chosen,
    spec: &RunSpec,
    scope: bool,
    pty: bool,
    on: &mut dyn FnMut(RunEvent),
) -> Result<i32, RunError> {
    match chosen {
        Chosen::Systemd(s) if !scope => {
            let exit = run_service(s, spec, ServiceOptions { pty })?;
            if let Some(n) = exit.note {
                on(RunEvent::Note(n));
            }
            Ok(exit.code)
        }
        Chosen::Cgroupfs(_) if scope || pty => Err(RunError::with_code(
            EXIT_RUN_FAILED,
            Error::invalid(
                Diagnostic::error(format!(
                    "--{} needs the systemd backend",
                    if scope { "scope" } else { "pty" }
                ))
                .hint("with the cgroupfs backend the command runs in bulkhead's own process and terminal; leave the option out"),
            ),
        )),
        c => crate::run::run(c.placement(), spec, &mut |m| on(RunEvent::Placed(m))),
    }
}

/// `--hugepages MODE`: check it can work, set the allocator's switches, then run verified
/// (or exec in place with `verify` off).
fn run_hugepages(
    chosen: &Chosen,
    spec: &mut RunSpec,
    mode: &str,
    verify: bool,
    on: &mut dyn FnMut(RunEvent),
) -> Result<i32, RunError> {
    let start = |e: Error| RunError::with_code(EXIT_RUN_FAILED, e);
    let facts = Facts::read(&Paths::default());
    let mode = RunMode::parse(mode, &facts).map_err(start)?;
    let p = launch::prepare(spec, mode, &facts).map_err(start)?;
    for n in &p.notes {
        on(RunEvent::Note(n.clone()));
    }
    let set: Vec<String> = p.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    on(RunEvent::Hugepages(&format!(
        "hugepages {}: {}",
        mode.label(),
        set.join(" ")
    )));
    if !verify {
        on(RunEvent::Hugepages(&format!(
            "hugepages: not verified (--no-verify); check with `bulkhead hugepages usage {}` (the command keeps this PID)",
            std::process::id()
        )));
        return Err(exec(chosen.placement(), spec));
    }
    run_verified(chosen, spec, &p, &facts, on)
}

/// Run the prepared command as a child and say whether it got huge pages.
fn run_verified(
    chosen: &Chosen,
    spec: &RunSpec,
    p: &Prepared,
    facts: &Facts,
    on: &mut dyn FnMut(RunEvent),
) -> Result<i32, RunError> {
    let mode = p.mode;
    let v = launch::run_verified(chosen.placement(), spec, mode, &mut |pid, s| {
        on(RunEvent::Hugepages(&format!(
            "hugepages: PID {pid} got huge pages after {:.2} s: {}",
            s.at.as_secs_f64(),
            s.describe(mode)
        )));
    });
    if let Some(e) = v.error {
        return Err(e);
    }
    let name = launch::argv_text(&spec.argv);
    match (v.first, v.peak) {
        (Some(_), Some(peak)) => on(RunEvent::Hugepages(&format!(
            "hugepages: `{name}` (PID {}) exited with {} after {:.1} s; most seen: {}",
            v.pid,
            v.code,
            v.ran_for.as_secs_f64(),
            peak.describe(mode)
        ))),
        (None, _) => {
            let reasons = launch::missed_reasons(&v, p, facts);
            on(RunEvent::Note(
                Diagnostic::warning(format!(
                    "hugepages: `{name}` (PID {}) got no {} pages in {:.1} s ({} look(s) at its memory){}",
                    v.pid,
                    mode.label(),
                    v.ran_for.as_secs_f64(),
                    v.samples,
                    if reasons.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", reasons.join("; "))
                    }
                ))
                .hint("`bulkhead hugepages usage PID` on a running process shows where its memory is"),
            ));
        }
        _ => {}
    }
    Ok(v.code)
}
