//! `destroy` on cgroupfs: remove slices children first (killing what is left with --kill),
//! and put back controllers bulkhead enabled on cgroups it did not create.

use super::{foreign, mark, op::Op, CgroupFs};
use crate::backend::{busy_error, removal_order, Changes};
use crate::layout::Hierarchy;
use bulkhead_plan::SliceName;
use bulkhead_sys::cgroupfs::procs;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::collections::HashSet;
use std::fs;
use std::path::PathBuf;

impl CgroupFs {
    pub(super) fn plan_destroy_fs(&self, slices: &[SliceName], kill: bool) -> Result<Changes<Op>> {
        let names = removal_order(slices, self.slices_on_system());
        let mut errors = Vec::new();
        let mut ops = Vec::new();
        let mut busy = Vec::new();
        let mut removed: HashSet<PathBuf> = HashSet::new();
        for name in &names {
            let dirs = self.removable_dirs(name, &names, &mut errors);
            let mut pids: Vec<i32> = dirs.iter().flat_map(|d| procs(d)).collect();
            pids.sort_unstable();
            pids.dedup();
            if kill && pids.contains(&(std::process::id() as i32)) {
                errors.push(
                    Diagnostic::error(format!(
                        "bulkhead itself runs in slice '{name}'; --kill would kill it halfway"
                    ))
                    .hint("run destroy from a shell outside the slice"),
                );
            }
            if !pids.is_empty() {
                let shown: Vec<String> = pids.iter().take(8).map(|p| p.to_string()).collect();
                busy.push(format!(
                    "{name} ({} process(es): {})",
                    pids.len(),
                    shown.join(" ")
                ));
                if kill {
                    ops.push(Op::Kill { dirs: dirs.clone() });
                }
            }
            for d in dirs {
                removed.insert(d.clone());
                ops.push(Op::Rmdir { dir: d });
            }
        }
        if !busy.is_empty() && !kill {
            errors.push(busy_error(&busy, "bulkhead move --slice / PID..."));
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        ops.extend(foreign_disables(&removed));
        Ok(Changes::new(
            ops,
            names.iter().map(|n| n.to_string()).collect(),
        ))
    }

    /// The directories of one slice that can go: bulkhead's, with no cgroup of someone
    /// else's inside.
    fn removable_dirs(
        &self,
        name: &SliceName,
        all: &[SliceName],
        errors: &mut Vec<Diagnostic>,
    ) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        for h in self.all_hierarchies() {
            let d = self.dir(h, name);
            if !d.is_dir() {
                continue;
            }
            if mark::owner(&d) == mark::Owner::Unknown {
                errors.push(mark::cannot_tell(name.as_str(), &d, "delete"));
                continue;
            }
            if !mark::is_ours(&d) {
                errors.push(
                    Diagnostic::error(format!(
                        "slice '{name}' was not created by bulkhead; refusing to delete it"
                    ))
                    .at(d.display().to_string()),
                );
                continue;
            }
            errors.extend(self.foreign_children(h, &d, name, all));
            dirs.push(d);
        }
        dirs
    }

    /// Sub-cgroups that are not bulkhead slices (made by someone else) block rmdir.
    fn foreign_children(
        &self,
        h: &Hierarchy,
        d: &std::path::Path,
        name: &SliceName,
        all: &[SliceName],
    ) -> Vec<Diagnostic> {
        let Ok(rd) = fs::read_dir(d) else {
            return vec![];
        };
        rd.filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir() && !all.iter().any(|n| self.dir(h, n) == *p))
            .map(|p| {
                Diagnostic::error(format!(
                    "slice '{name}' contains the cgroup {} that bulkhead did not create",
                    p.display()
                ))
                .hint("move its processes out and remove it first")
            })
            .collect()
    }
}

/// Controllers bulkhead enabled on cgroups it does not own, once nothing of bulkhead's is
/// left below them.
fn foreign_disables(removed: &HashSet<PathBuf>) -> Vec<Op> {
    foreign::load()
        .into_iter()
        .filter(|(dir, _)| {
            let left = fs::read_dir(dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .any(|e| e.path().is_dir() && !removed.contains(&e.path()))
                })
                .unwrap_or(false);
            !left && dir.is_dir()
        })
        .map(|(dir, controller)| Op::Disable {
            dir,
            controller,
            foreign: true,
        })
        .collect()
}
