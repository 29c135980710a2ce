//! Putting commands into slices, so the command is in the slice before it executes a single
//! instruction of its own. Where the slice is one cgroup2 directory (pure v2, cgroupfs
//! backend), the command starts as a child that clone3 puts straight into it
//! (CLONE_INTO_CGROUP, `into_cgroup`): bulkhead itself never enters the slice, waits,
//! forwards signals and ends as the command ended. Elsewhere (v1 and hybrid hierarchies, a
//! systemd scope, an old kernel) bulkhead joins the slice and then execs the command in
//! place, so it gets every signal directly and its exit status is bulkhead's. Both ways do
//! the same work first (`prepare`) and the same system calls from the privilege drop to
//! exec (`bulkhead_sys::launch::command`). [`service`]: `run` as a systemd service.

mod into_cgroup;
mod prepare;
pub mod service;

use bulkhead_cgroups::{Joiner, PlaceError, Placement};
use bulkhead_plan::SliceName;
use bulkhead_sys::error::{Diagnostic, Error};
use into_cgroup::Cloned;
pub(crate) use prepare::{find_program, find_program_with, resolve_ids};
use prepare::{prepare, start_failure, Prepared};
use std::ffi::OsString;
use std::path::PathBuf;

/// Exit codes of `run` when the command itself never started (podman's convention).
pub use bulkhead_sys::exit::{
    NOT_EXECUTABLE as EXIT_NOT_EXECUTABLE, NOT_FOUND as EXIT_NOT_FOUND,
    RUN_FAILED as EXIT_RUN_FAILED,
};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSpec {
    pub slice: Option<SliceName>,
    pub uid: Option<String>,
    pub gid: Option<String>,
    pub cwd: Option<PathBuf>,
    /// `KEY=VALUE` settings, applied after the environment files.
    pub env: Vec<(String, String)>,
    pub env_files: Vec<PathBuf>,
    /// Pass fds 3..3+N by the systemd protocol (LISTEN_FDS, LISTEN_PID).
    pub listen_fds: u32,
    pub argv: Vec<OsString>,
}

/// A failure of `run` with the exit code it should give.
#[derive(Debug)]
pub struct RunError {
    pub code: i32,
    pub error: Error,
    /// The slice to join does not exist (callers explain why: not in the plan, or not
    /// applied yet).
    pub missing_slice: Option<SliceName>,
}

impl RunError {
    pub fn with_code(code: i32, error: Error) -> RunError {
        RunError {
            code,
            error,
            missing_slice: None,
        }
    }
    pub fn missing_slice(slice: &SliceName) -> RunError {
        RunError {
            missing_slice: Some(slice.clone()),
            ..RunError::with_code(
                EXIT_RUN_FAILED,
                Error::invalid(Diagnostic::error(format!("slice '{slice}' does not exist"))),
            )
        }
    }
    /// A failure to place the process into its slice.
    pub fn place(e: PlaceError) -> RunError {
        match e {
            PlaceError::MissingSlice(s) => RunError::missing_slice(&s),
            PlaceError::Failed(e) => RunError::with_code(EXIT_RUN_FAILED, e),
        }
    }
    pub(crate) fn new(code: i32, d: Diagnostic) -> RunError {
        RunError::with_code(code, Error::failed_with(d))
    }
}

/// Join the slice and exec the command in place (`--hugepages`, which keeps this path: its
/// verified runs fork first). Returns only on failure.
pub fn exec(backend: &dyn Placement, spec: &RunSpec) -> RunError {
    match prepare(spec) {
        Ok(p) => join_and_exec(backend, spec, &p, &mut |_| {}),
        Err(e) => e,
    }
}

/// Start the command in its slice: cloned straight into the slice where that is one cgroup2
/// directory (bulkhead waits outside the slice, forwards signals, and ends as the command
/// ended: see `into_cgroup`), else join the slice and exec in place (never returns then).
/// `how` hears which way was taken (`run -v`). Returns the command's exit code, or why it
/// did not start with the exit code to give.
pub fn run(
    backend: &dyn Placement,
    spec: &RunSpec,
    how: &mut dyn FnMut(&str),
) -> Result<i32, RunError> {
    let p = prepare(spec)?;
    if let Some(dir) = spec.slice.as_ref().and_then(|s| backend.cgroup2_dir(s)) {
        match into_cgroup::run_in(&dir, &p, how)? {
            Cloned::Exited(code) => return Ok(code),
            Cloned::NotHere(why) => how(&format!("{why}; joining the slice instead")),
        }
    }
    Err(join_and_exec(backend, spec, &p, how))
}

/// Join `spec.slice` (if any), then drop privileges and exec in this process.
fn join_and_exec(
    backend: &dyn Placement,
    spec: &RunSpec,
    p: &Prepared,
    how: &mut dyn FnMut(&str),
) -> RunError {
    match &spec.slice {
        Some(slice) => {
            if let Err(e) = backend.join(slice, &Joiner::run(slice)) {
                return RunError::place(e);
            }
            how(&format!(
                "joined slice {slice} ({} backend), exec in place",
                backend.name()
            ));
        }
        None => how("no slice: exec in place"),
    }
    // No fork: this very process becomes the command.
    start_failure(p, bulkhead_sys::launch::exec_here(&p.exec))
}
