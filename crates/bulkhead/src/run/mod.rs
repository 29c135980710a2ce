//! Putting commands into slices: `run` joins the slice and then execs the command, so the
//! command is in the slice before it executes a single instruction of its own, gets every
//! signal directly, and its exit code is bulkhead's.

pub mod service;

use bulkhead_cgroups::{Joiner, PlaceError, Placement};
use bulkhead_plan::SliceName;
use bulkhead_sys::error::{errno_text, Diagnostic, Error};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Exit codes of `run` when the command itself never started (podman's convention).
pub use bulkhead_sys::exit::{
    NOT_EXECUTABLE as EXIT_NOT_EXECUTABLE, NOT_FOUND as EXIT_NOT_FOUND,
    RUN_FAILED as EXIT_RUN_FAILED,
};

#[derive(Debug, Clone, Default)]
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
    fn new(code: i32, d: Diagnostic) -> RunError {
        RunError::with_code(code, Error::failed_with(d))
    }
}

pub(crate) struct Ids {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    groups: Option<Vec<nix::unistd::Gid>>,
}

pub(crate) fn resolve_ids(spec: &RunSpec) -> std::result::Result<Ids, RunError> {
    use nix::unistd::{Group, Uid, User};
    let bad = |m: String, h: &str| {
        RunError::with_code(
            EXIT_RUN_FAILED,
            Error::invalid(Diagnostic::error(m).hint(h)),
        )
    };
    let user = match &spec.uid {
        None => None,
        Some(u) => {
            let found = match u.parse::<u32>() {
                Ok(n) => User::from_uid(Uid::from_raw(n))
                    .ok()
                    .flatten()
                    .map(Ok)
                    .unwrap_or(Err(n)),
                Err(_) => match User::from_name(u) {
                    Ok(Some(user)) => Ok(user),
                    _ => {
                        return Err(bad(
                            format!("--uid {u}: no such user"),
                            "give a user name or a numeric UID",
                        ))
                    }
                },
            };
            Some(found)
        }
    };
    let gid = match &spec.gid {
        Some(g) => Some(match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => match Group::from_name(g) {
                Ok(Some(gr)) => gr.gid.as_raw(),
                _ => {
                    return Err(bad(
                        format!("--gid {g}: no such group"),
                        "give a group name or a numeric GID",
                    ))
                }
            },
        }),
        None => match &user {
            Some(Ok(u)) => Some(u.gid.as_raw()),
            Some(Err(_)) => {
                return Err(bad(
                    "--uid names a UID with no user entry, so --gid is needed".into(),
                    "add --gid GID",
                ))
            }
            None => None,
        },
    };
    let uid = user.as_ref().map(|u| match u {
        Ok(u) => u.uid.as_raw(),
        Err(n) => *n,
    });
    // Supplementary groups: the user's, as systemd-run --uid gives them.
    let groups = match (&user, gid) {
        (Some(Ok(u)), Some(g)) => {
            let name = std::ffi::CString::new(u.name.clone()).unwrap_or_default();
            Some(
                nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(g))
                    .unwrap_or_else(|_| vec![nix::unistd::Gid::from_raw(g)]),
            )
        }
        (_, Some(g)) => Some(vec![nix::unistd::Gid::from_raw(g)]),
        _ => None,
    };
    Ok(Ids { uid, gid, groups })
}

/// Find the program the way execvp(3) would, so a missing command is reported before the
/// process joins the slice.
pub(crate) fn find_program(
    prog: &OsString,
    path_var: Option<&str>,
) -> std::result::Result<PathBuf, RunError> {
    use std::os::unix::fs::PermissionsExt;
    let p = Path::new(prog);
    let check = |c: &Path| -> Option<std::result::Result<PathBuf, i32>> {
        let m = std::fs::metadata(c).ok()?;
        if m.is_file() && m.permissions().mode() & 0o111 != 0 {
            Some(Ok(c.to_path_buf()))
        } else {
            Some(Err(EXIT_NOT_EXECUTABLE))
        }
    };
    let not_found = |what: String| {
        RunError::new(
            EXIT_NOT_FOUND,
            Diagnostic::error(format!("{what}: command not found"))
                .hint("give the full path, or check PATH"),
        )
    };
    let not_exec = |c: &Path| {
        RunError::new(
            EXIT_NOT_EXECUTABLE,
            Diagnostic::error(format!("{}: not an executable file", c.display()))
                .hint("check the file's mode (chmod +x) and type"),
        )
    };
    if p.as_os_str().to_string_lossy().contains('/') {
        return match check(p) {
            Some(Ok(c)) => Ok(c),
            Some(Err(_)) => Err(not_exec(p)),
            None => Err(not_found(p.display().to_string())),
        };
    }
    let path_var = path_var
        .map(String::from)
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    let mut seen_nonexec = None;
    for dir in path_var.split(':').filter(|d| !d.is_empty()) {
        let c = Path::new(dir).join(p);
        match check(&c) {
            Some(Ok(c)) => return Ok(c),
            Some(Err(_)) => seen_nonexec = Some(c),
            None => {}
        }
    }
    match seen_nonexec {
        Some(c) => Err(not_exec(&c)),
        None => Err(not_found(p.display().to_string())),
    }
}

/// Join the slice and exec the command. Returns only on failure.
pub fn exec(backend: &dyn Placement, spec: &RunSpec) -> RunError {
    match prepare_and_exec(backend, spec) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn prepare_and_exec(
    backend: &dyn Placement,
    spec: &RunSpec,
) -> std::result::Result<std::convert::Infallible, RunError> {
    let Some(prog) = spec.argv.first() else {
        return Err(RunError::with_code(EXIT_RUN_FAILED, Error::invalid(Diagnostic::error("no command given").hint("write the command after --, e.g. bulkhead run --slice db-helper -- /usr/bin/backup"))));
    };
    let ids = resolve_ids(spec)?;
    let mut env: Vec<(String, String)> = Vec::new();
    for f in &spec.env_files {
        env.extend(
            bulkhead_plan::env::read_env_file(f)
                .map_err(|error| RunError::with_code(EXIT_RUN_FAILED, error))?,
        );
    }
    env.extend(spec.env.iter().cloned());
    if let Some(cwd) = &spec.cwd {
        if !cwd.is_dir() {
            return Err(RunError::with_code(
                EXIT_RUN_FAILED,
                Error::invalid(Diagnostic::error(format!(
                    "--cwd {}: not a directory",
                    cwd.display()
                ))),
            ));
        }
    }
    let path_override = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let program = find_program(prog, path_override)?;
    if let Some(slice) = &spec.slice {
        backend
            .join(slice, &Joiner::run(slice))
            .map_err(RunError::place)?;
    }
    // No fork: drop privileges in this very process, then exec.
    let fail = |what: &str, e: nix::Error| {
        RunError::new(
            EXIT_RUN_FAILED,
            Diagnostic::error(format!("{what}: {}", e.desc())),
        )
    };
    if let Some(groups) = &ids.groups {
        nix::unistd::setgroups(groups).map_err(|e| fail("setgroups", e))?;
    }
    if let Some(g) = ids.gid {
        nix::unistd::setgid(nix::unistd::Gid::from_raw(g)).map_err(|e| fail("setgid", e))?;
    }
    if let Some(u) = ids.uid {
        nix::unistd::setuid(nix::unistd::Uid::from_raw(u)).map_err(|e| fail("setuid", e))?;
    }
    if let Some(cwd) = &spec.cwd {
        // As the target user, like systemd's WorkingDirectory=.
        std::env::set_current_dir(cwd).map_err(|e| {
            RunError::new(
                EXIT_RUN_FAILED,
                Diagnostic::error(format!("--cwd {}: {}", cwd.display(), errno_text(&e))),
            )
        })?;
    }
    let mut cmd = std::process::Command::new(&program);
    cmd.arg0(prog).args(&spec.argv[1..]);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    if spec.listen_fds > 0 {
        // exec keeps the PID, so the command's PID is this one.
        cmd.env("LISTEN_FDS", spec.listen_fds.to_string())
            .env("LISTEN_PID", std::process::id().to_string());
    }
    let e = cmd.exec();
    let code = match e.raw_os_error() {
        Some(libc::ENOENT) => EXIT_NOT_FOUND,
        Some(libc::EACCES) | Some(libc::ENOEXEC) => EXIT_NOT_EXECUTABLE,
        _ => EXIT_RUN_FAILED,
    };
    Err(RunError::new(
        code,
        Diagnostic::error(format!(
            "cannot execute {}: {}",
            program.display(),
            errno_text(&e)
        )),
    ))
}

/// Spawn `cmd` as a child that joins the cgroups whose `cgroup.procs` files are given before
/// it execs: the child runs no instruction of the command outside the slice. Used where
/// bulkhead must stay the parent (benchmarks, supervisors).
pub fn spawn_joined(
    cmd: &mut std::process::Command,
    procs_files: &[PathBuf],
) -> std::io::Result<std::process::Child> {
    bulkhead_sys::process::join_cgroups_before_exec(cmd, procs_files)?;
    cmd.spawn()
}
