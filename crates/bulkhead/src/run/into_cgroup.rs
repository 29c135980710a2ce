//! `run` where the slice is one cgroup2 directory (pure v2, cgroupfs backend): the command
//! starts as a child that clone3 puts straight into the slice (CLONE_INTO_CGROUP, Linux
//! 5.7+), so it is in the slice from its first instruction and bulkhead never enters it (no
//! `cgroup.procs` write, no migration of bulkhead's own threads).
//!
//! bulkhead stays the parent: it waits, passes on the signals sent to it (SIGTERM, SIGHUP,
//! SIGINT, SIGQUIT, SIGUSR1, SIGUSR2; not a terminal's, which the command got itself as a
//! member of bulkhead's process group), and then ends as the command ended: with its exit
//! code, or killed by the same signal (so a shell shows 128+N and a supervisor sees the
//! signal, exactly as when bulkhead execs the command in place). A SIGKILL of bulkhead,
//! which cannot be passed on, kills the command too (PR_SET_PDEATHSIG). `LISTEN_PID` is the
//! child's PID.
//!
//! Where the kernel or the cgroup refuses this way (clone3 or CLONE_INTO_CGROUP missing, a
//! cgroup that cannot take processes, a seccomp filter), the caller joins and execs instead.

use super::prepare::{start_failure, Prepared};
use super::{RunError, EXIT_RUN_FAILED};
use bulkhead_sys::error::{errno_text, Diagnostic, Error};
use bulkhead_sys::launch::{spawn_into_cgroup, SpawnError};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// How the attempt ended.
pub(crate) enum Cloned {
    /// The command ran; bulkhead exits with this code (a signal has ended it already).
    Exited(i32),
    /// This way is not possible here (why): join and exec instead.
    NotHere(String),
}

/// clone3 errors that mean "not this way here", not "the command cannot start": no clone3
/// (ENOSYS, also what container seccomp filters answer), no CLONE_INTO_CGROUP (E2BIG,
/// EINVAL), a cgroup the rules refuse (EBUSY: not a leaf with controllers on; EOPNOTSUPP: a
/// threaded or invalid domain), a filter or permission (EPERM, EACCES), for which joining
/// gives the fuller explanation.
fn falls_back(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENOSYS
                | libc::E2BIG
                | libc::EINVAL
                | libc::EBUSY
                | libc::EOPNOTSUPP
                | libc::EPERM
                | libc::EACCES
        )
    )
}

/// Start the prepared command in `dir` and wait for it.
pub(crate) fn run_in(
    dir: &Path,
    p: &Prepared,
    how: &mut dyn FnMut(&str),
) -> Result<Cloned, RunError> {
    // clone3 needs a descriptor opened for reading (O_PATH is refused); std adds O_CLOEXEC.
    let cgroup = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
    {
        Ok(f) => f,
        Err(e) => {
            return Ok(Cloned::NotHere(format!(
                "cannot open {}: {}",
                dir.display(),
                errno_text(&e)
            )))
        }
    };
    match spawn_into_cgroup(&p.exec, cgroup.as_fd()) {
        Ok(child) => {
            drop(cgroup);
            how(&format!(
                "clone3(CLONE_INTO_CGROUP) into {}: PID {}; bulkhead waits outside the slice",
                dir.display(),
                child.pid()
            ));
            let status = child.wait();
            Ok(Cloned::Exited(bulkhead_sys::signals::end_like(status)))
        }
        Err(SpawnError::Start(f)) => Err(start_failure(p, f)),
        Err(SpawnError::Clone(e)) if falls_back(&e) => Ok(Cloned::NotHere(format!(
            "clone3(CLONE_INTO_CGROUP) into {}: {}",
            dir.display(),
            errno_text(&e)
        ))),
        Err(SpawnError::Clone(e)) => {
            let mut d = Diagnostic::error(format!(
                "cannot start the command in {}: clone3: {}",
                dir.display(),
                errno_text(&e)
            ));
            if e.raw_os_error() == Some(libc::EAGAIN) {
                d = d.hint(
                    "the slice may be at its TasksMax (pids.max), or the system out of processes",
                );
            }
            Err(RunError::with_code(EXIT_RUN_FAILED, Error::failed_with(d)))
        }
    }
}
