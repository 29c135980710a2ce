//! Everything a run needs, found before the process joins a slice or starts a child: the
//! user and its groups, the environment (bulkhead's, then the files, then `--env`), the
//! working directory and the program (found as execvp(3) would), as a
//! [`bulkhead_sys::launch::ExecSpec`]; and what a failure to start it means for the user.

use super::{RunError, RunSpec, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_RUN_FAILED};
use bulkhead_sys::error::{errno_text, Diagnostic, Error};
use bulkhead_sys::launch::{ExecFailure, ExecSpec, Step};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A command ready to start.
pub(crate) struct Prepared {
    pub exec: ExecSpec,
}

/// Check and resolve everything of `spec` that can fail before the command starts.
pub(crate) fn prepare(spec: &RunSpec) -> Result<Prepared, RunError> {
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
    let program = find_program_with(prog, &env)?;
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut set = |k: OsString, v: OsString| match vars.iter_mut().find(|(x, _)| *x == k) {
        Some(slot) => slot.1 = v,
        None => vars.push((k, v)),
    };
    for (k, v) in env {
        set(k.into(), v.into());
    }
    if spec.listen_fds > 0 {
        set("LISTEN_FDS".into(), spec.listen_fds.to_string().into());
    }
    Ok(Prepared {
        exec: ExecSpec {
            program,
            argv: spec.argv.clone(),
            env: vars,
            // The PID of the process that execs: bulkhead's own in place, the child's when
            // it was cloned into the slice.
            listen_pid: spec.listen_fds > 0,
            groups: ids.groups,
            gid: ids.gid,
            uid: ids.uid,
            cwd: spec.cwd.clone(),
        },
    })
}

/// What the user hears when the command did not start: the step that failed, with the exit
/// code (127 not found, 126 not executable, 125 otherwise).
pub(crate) fn start_failure(p: &Prepared, f: ExecFailure) -> RunError {
    let e = errno_text(&f.error());
    let text = match f.step {
        Step::Groups => format!("setgroups: {e}"),
        Step::Gid => format!("setgid: {e}"),
        Step::Uid => format!("setuid: {e}"),
        Step::Cwd => format!(
            "--cwd {}: {e}",
            p.exec.cwd.as_deref().unwrap_or(Path::new("")).display()
        ),
        Step::Exec => format!("cannot execute {}: {e}", p.exec.program.display()),
    };
    RunError::new(f.exit_code(), Diagnostic::error(text))
}

pub(crate) struct Ids {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub groups: Option<Vec<u32>>,
}

pub(crate) fn resolve_ids(spec: &RunSpec) -> std::result::Result<Ids, RunError> {
    use bulkhead_sys::users;
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
                Ok(n) => users::user_by_uid(n).map(Ok).unwrap_or(Err(n)),
                Err(_) => match users::user_by_name(u) {
                    Some(user) => Ok(user),
                    None => {
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
            Err(_) => match users::gid_by_name(g) {
                Some(gid) => gid,
                None => {
                    return Err(bad(
                        format!("--gid {g}: no such group"),
                        "give a group name or a numeric GID",
                    ))
                }
            },
        }),
        None => match &user {
            Some(Ok(u)) => Some(u.gid),
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
        Ok(u) => u.uid,
        Err(n) => *n,
    });
    // Supplementary groups: the user's, as systemd-run --uid gives them.
    let groups = match (&user, gid) {
        (Some(Ok(u)), Some(g)) => Some(users::group_list(&u.name, g)),
        (_, Some(g)) => Some(vec![g]),
        _ => None,
    };
    Ok(Ids { uid, gid, groups })
}

/// [`find_program`] with the PATH the command will have: the last `PATH=` of its
/// environment settings, else bulkhead's own.
pub(crate) fn find_program_with(
    prog: &OsString,
    env: &[(String, String)],
) -> std::result::Result<PathBuf, RunError> {
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    find_program(prog, path)
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
