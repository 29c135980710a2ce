//! The cgroupfs backend's operations as plain data: printed by `--dry-run`, executed by
//! [`execute`], and undone in reverse order when one of them fails.

use super::{foreign, mark};
use crate::backend::Outcome;
use bulkhead_sys::cgroupfs::{kill_all, rmdir, write_file};
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Create a cgroup and mark it as bulkhead's.
    Mkdir { dir: PathBuf },
    /// Write a control file.
    Write {
        file: PathBuf,
        value: String,
        /// The directive this write carries out, e.g. `CPUWeight=1000`.
        why: String,
        /// What to write to undo it (`None`: the cgroup is new, removing it undoes it).
        #[serde(skip_serializing_if = "Option::is_none")]
        restore: Option<String>,
        /// A default that may be skipped when the kernel lacks the file.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        optional: bool,
    },
    /// Enable a controller for the children of a v2 cgroup. `foreign`: a cgroup bulkhead did
    /// not create (remembered, so destroy can put it back).
    Enable {
        dir: PathBuf,
        controller: String,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        foreign: bool,
    },
    /// Disable a controller for the children of a v2 cgroup (`foreign`: one that an earlier
    /// apply enabled on a cgroup bulkhead did not create).
    Disable {
        dir: PathBuf,
        controller: String,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        foreign: bool,
    },
    /// Kill every process in these cgroups (all hierarchies of one slice) and wait.
    Kill { dirs: Vec<PathBuf> },
    /// Remove a cgroup.
    Rmdir { dir: PathBuf },
}

impl Op {
    /// What this operation changes on a cgroup bulkhead did not create, for [`foreign`]'s
    /// record (`None`: nothing foreign).
    fn foreign_change(&self) -> Option<foreign::Change<'_>> {
        match self {
            Op::Enable {
                dir,
                controller,
                foreign: true,
            } => Some(foreign::Change::Enabled { dir, controller }),
            Op::Disable {
                dir,
                controller,
                foreign: true,
            } => Some(foreign::Change::Disabled { dir, controller }),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Mkdir { dir } => write!(f, "mkdir {}", dir.display()),
            Op::Write {
                file, value, why, ..
            } => write!(f, "write {} = {:?}  # {why}", file.display(), value),
            Op::Enable {
                dir, controller, ..
            } => write!(
                f,
                "write {} = \"+{controller}\"",
                dir.join("cgroup.subtree_control").display()
            ),
            Op::Disable {
                dir, controller, ..
            } => write!(
                f,
                "write {} = \"-{controller}\"",
                dir.join("cgroup.subtree_control").display()
            ),
            Op::Kill { dirs } => write!(
                f,
                "kill every process in {}",
                dirs.first()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default()
            ),
            Op::Rmdir { dir } => write!(f, "rmdir {}", dir.display()),
        }
    }
}

fn undo(op: &Op) -> Option<Op> {
    match op {
        Op::Mkdir { dir } => Some(Op::Rmdir { dir: dir.clone() }),
        Op::Write {
            file,
            restore: Some(r),
            why,
            ..
        } => Some(Op::Write {
            file: file.clone(),
            value: r.clone(),
            why: format!("undo {why}"),
            restore: None,
            optional: true,
        }),
        Op::Enable {
            dir, controller, ..
        } => Some(Op::Disable {
            dir: dir.clone(),
            controller: controller.clone(),
            foreign: false,
        }),
        _ => None,
    }
}

/// Run one operation.
pub fn run_op(op: &Op) -> std::io::Result<()> {
    match op {
        Op::Mkdir { dir } => {
            fs::create_dir(dir)?;
            if let Err(e) = mark::set(dir) {
                let _ = fs::remove_dir(dir);
                return Err(e);
            }
            Ok(())
        }
        Op::Write {
            file,
            value,
            optional,
            ..
        } => match write_file(file, value) {
            Err(e) if *optional && e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        },
        Op::Enable {
            dir, controller, ..
        } => write_file(
            &dir.join("cgroup.subtree_control"),
            &format!("+{controller}"),
        ),
        Op::Disable {
            dir, controller, ..
        } => write_file(
            &dir.join("cgroup.subtree_control"),
            &format!("-{controller}"),
        ),
        Op::Kill { dirs } => kill_all(dirs),
        Op::Rmdir { dir } => {
            rmdir(dir)?;
            mark::clear(dir);
            Ok(())
        }
    }
}

/// Execute `ops` in order. If one fails, every change already made is undone in reverse
/// order, and the error says what failed, where, and that the system was put back.
pub fn execute(ops: &[&Op]) -> Result<Outcome> {
    let outcome = execute_ops(ops)?;
    foreign::record(ops.iter().filter_map(|op| op.foreign_change()));
    Ok(outcome)
}

fn execute_ops(ops: &[&Op]) -> Result<Outcome> {
    let mut undo_log: Vec<Op> = Vec::new();
    // Kills, removals and disables cannot be undone.
    let mut irreversible: Vec<String> = Vec::new();
    let mut outcome = Outcome::default();
    for op in ops {
        if let Op::Write {
            file,
            optional: true,
            ..
        } = op
        {
            if !file.exists() {
                outcome.skipped += 1;
                continue;
            }
        }
        match run_op(op) {
            Ok(()) => {
                outcome.done += 1;
                match undo(op) {
                    Some(u) => undo_log.push(u),
                    None if !matches!(op, Op::Write { .. }) => irreversible.push(op.to_string()),
                    None => {}
                }
            }
            Err(e) => {
                let mut failed_undo = Vec::new();
                for u in undo_log.iter().rev() {
                    if let Err(ue) = run_op(u) {
                        failed_undo.push(format!("{u}: {}", errno_text(&ue)));
                    }
                }
                let what = match op {
                    Op::Write { why, .. } => format!(" ({why})"),
                    _ => String::new(),
                };
                let mut d = Diagnostic::error(format!("{op}{what} failed: {}", errno_text(&e)));
                d = if !irreversible.is_empty() {
                    d.hint(format!(
                        "{} change(s) before it cannot be undone and stay done: {}",
                        irreversible.len(),
                        irreversible.join("; ")
                    ))
                } else if failed_undo.is_empty() {
                    d.hint(format!(
                        "nothing was left changed: the {} change(s) made before it were undone",
                        undo_log.len()
                    ))
                } else {
                    d.hint(format!(
                        "undoing the earlier changes failed too, check by hand: {}",
                        failed_undo.join("; ")
                    ))
                };
                if let Some(h) = explain_errno(op, &e) {
                    d.message.push_str(&format!(" ({h})"));
                }
                return Err(Error::failed_with(d));
            }
        }
    }
    Ok(outcome)
}

fn explain_errno(op: &Op, e: &std::io::Error) -> Option<&'static str> {
    let file = match op {
        Op::Write { file, .. } => file.file_name()?.to_str()?,
        _ => return None,
    };
    match (e.raw_os_error()?, file) {
        (libc::EBUSY, f) if f.starts_with("memory.") => {
            Some("the slice already uses more memory than the new limit and the kernel could not reclaim it")
        }
        (libc::EOPNOTSUPP, f) if f.contains("bfq") => {
            Some("the device does not use the BFQ scheduler")
        }
        (libc::EACCES | libc::EPERM, _) => Some("bulkhead needs root to change cgroups"),
        _ => None,
    }
}

/// Kill every process in the given cgroups and everything below them, then remove them all,
/// deepest first. For cgroup trees the caller created itself (benchmark and test roots);
/// slices go through [`Op::Kill`] and [`Op::Rmdir`] instead.
pub fn remove_trees(roots: &[PathBuf]) -> std::io::Result<()> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        out.push(d.to_path_buf());
        if let Ok(rd) = fs::read_dir(d) {
            for e in rd.flatten() {
                if e.path().is_dir() {
                    walk(&e.path(), out);
                }
            }
        }
    }
    let mut all = Vec::new();
    for r in roots.iter().filter(|r| r.is_dir()) {
        walk(r, &mut all);
    }
    let killed = kill_all(&all);
    all.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    let mut first_err = killed.err();
    for d in &all {
        if let Err(e) = run_op(&Op::Rmdir { dir: d.clone() }) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}
