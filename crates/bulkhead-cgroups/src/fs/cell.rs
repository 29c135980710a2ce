//! A socket target's freeze cell: a cgroup of `serve`'s own just below the target's slice,
//! in the hierarchy that can freeze (the unified one, `cgroup.freeze`, which hybrid hosts
//! have too; else the v1 freezer, `freezer.state`). When the target goes idle, `serve` moves
//! the target's processes from the slice into the cell and freezes it; the next connection
//! thaws it. The cell is inside the slice and no other hierarchy is touched, so every limit
//! of the slice still holds for the target, frozen or not.

use super::CgroupFs;
use crate::layout::Version;
use bulkhead_plan::SliceName;
use bulkhead_sys::cgdir::CgroupDir;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::path::{Path, PathBuf};

/// The most processes one gather moves: a target's tree, bounded.
const MAX_GATHER: usize = 4096;

/// The cell of one socket's target.
pub struct FreezeCell {
    dir: CgroupDir,
    /// The cell's directory, for messages and its removal.
    path: PathBuf,
    /// The hierarchy's mount (to open a nested cgroup of the target's by its path).
    mount: PathBuf,
    /// The slice's and the cell's paths as `/proc/PID/cgroup` gives them.
    slice_path: String,
    cell_path: String,
    v2: bool,
}

/// What one gather found.
#[derive(Debug, Default, PartialEq)]
pub struct Gathered {
    /// Processes moved from the slice into the cell.
    pub moved: usize,
    /// Cgroups of the target's own below the slice (a booted container's), by their path in
    /// the hierarchy: frozen with the cell.
    pub nested: Vec<String>,
}

impl CgroupFs {
    /// The cell `name` below `slice` (made if it is not there), in the hierarchy that freezes.
    pub fn freeze_cell(&self, slice: &SliceName, name: &str) -> Result<FreezeCell> {
        let Some((slice_dir, file, _, _)) = self.freezer(slice) else {
            return Err(Error::failed_with(
                Diagnostic::error("this host's cgroups cannot freeze a target")
                    .hint("a target is frozen through the unified hierarchy's cgroup.freeze (Linux 5.2+) or the v1 freezer; use on_idle = \"stop\""),
            ));
        };
        self.check_ours(&slice_dir, slice.as_str())?;
        let path = slice_dir.join(name);
        // The cell is made and opened through the slice's descriptor, opened once.
        let slice_fd = CgroupDir::open(&slice_dir).ok_or_else(|| {
            Error::failed(format!("{}: not a cgroup directory", slice_dir.display()))
        })?;
        let dir = slice_fd
            .child(name)
            .map_err(|e| bulkhead_sys::error::io_failed("cannot make the freeze cell", &path, e))?;
        let v2 = file == "cgroup.freeze";
        let h = match v2 {
            true => self.layout.unified.as_ref(),
            false => self
                .layout
                .v1
                .iter()
                .find(|h| h.version == Version::V1 && h.has("freezer")),
        };
        let mount = h.map(|h| h.mount.clone()).unwrap_or_default();
        let rel = |p: &Path| format!("/{}", p.strip_prefix(&mount).unwrap_or(p).display());
        Ok(FreezeCell {
            dir,
            slice_path: rel(&slice_dir),
            cell_path: rel(&path),
            path,
            mount,
            v2,
        })
    }
}

impl FreezeCell {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where `pid` is in this hierarchy, from its `/proc/PID/cgroup` text.
    fn cgroup_of(&self, text: &str) -> Option<String> {
        text.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            let here = match self.v2 {
                true => id == "0" && ctrls.is_empty(),
                false => ctrls.split(',').any(|c| c == "freezer"),
            };
            here.then(|| path.to_string())
        })
    }

    /// Move each of `pids` (a tree: the first is its root) that is in the slice itself into
    /// the cell; say which cgroups of the target's own below the slice hold the others. A
    /// process gone meanwhile is skipped, and so is one whose parent is no longer in the tree
    /// (its PID was given to another process since the tree was read).
    pub fn gather(&self, pids: &[i32]) -> Gathered {
        let mut g = Gathered::default();
        let below = format!("{}/", self.slice_path.trim_end_matches('/'));
        for &pid in pids.iter().take(MAX_GATHER) {
            let Some(text) = bulkhead_sys::procs::cgroup(pid) else {
                continue;
            };
            let Some(at) = self.cgroup_of(&text) else {
                continue;
            };
            let in_tree = Some(&pid) == pids.first()
                || bulkhead_sys::process::parent(pid as u32)
                    .is_some_and(|pp| pids.contains(&(pp as i32)));
            if at == self.slice_path && in_tree {
                if self.dir.write("cgroup.procs", &pid.to_string()).is_ok() {
                    g.moved += 1;
                }
            } else if at != self.cell_path && !at.starts_with(&format!("{}/", self.cell_path)) {
                if let Some(rest) = at.strip_prefix(&below) {
                    let top = format!("{below}{}", rest.split('/').next().unwrap_or(rest));
                    if !g.nested.contains(&top) {
                        g.nested.push(top);
                    }
                }
            }
        }
        g
    }

    fn value(&self, frozen: bool) -> (&'static str, &'static str) {
        match (self.v2, frozen) {
            (true, true) => ("cgroup.freeze", "1"),
            (true, false) => ("cgroup.freeze", "0"),
            (false, true) => ("freezer.state", "FROZEN"),
            (false, false) => ("freezer.state", "THAWED"),
        }
    }

    /// Freeze or thaw the cell, and the target's own cgroups below the slice (`nested`).
    pub fn set(&self, frozen: bool, nested: &[String]) -> std::io::Result<()> {
        let (file, value) = self.value(frozen);
        self.dir.write(file, value)?;
        for n in nested {
            let p = self.mount.join(n.trim_start_matches('/'));
            if let Some(d) = CgroupDir::open(&p) {
                d.write(file, value)?;
            }
        }
        Ok(())
    }

    /// Whether the kernel says the cell is frozen (every task stopped), not only asked to be.
    pub fn frozen(&self) -> bool {
        match self.v2 {
            true => self
                .dir
                .read("cgroup.events")
                .is_some_and(|e| e.lines().any(|l| l == "frozen 1")),
            false => self
                .dir
                .read("freezer.state")
                .is_some_and(|s| s.trim() == "FROZEN"),
        }
    }

    /// The processes in the cell.
    pub fn pids(&self) -> Vec<i32> {
        self.dir
            .read("cgroup.procs")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Thaw it and remove it (once its processes are gone; a cell still holding some stays,
    /// thawed, and the error says so).
    pub fn remove(self) -> std::io::Result<()> {
        let _ = self.set(false, &[]);
        std::fs::remove_dir(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(v2: bool) -> FreezeCell {
        FreezeCell {
            dir: CgroupDir::open(Path::new("/")).unwrap(),
            path: "/x".into(),
            mount: "/sys/fs/cgroup/unified".into(),
            slice_path: "/t/db.slice/web.slice".into(),
            cell_path: "/t/db.slice/web.slice/bulkhead-serve-web".into(),
            v2,
        }
    }

    #[test]
    fn a_process_is_found_in_the_freezing_hierarchy_only() {
        let text = "12:freezer:/t/db.slice/web.slice\n4:cpu,cpuacct:/t/db.slice\n0::/t/db.slice/web.slice/bulkhead-serve-web\n";
        assert_eq!(
            cell(true).cgroup_of(text).as_deref(),
            Some("/t/db.slice/web.slice/bulkhead-serve-web")
        );
        assert_eq!(
            cell(false).cgroup_of(text).as_deref(),
            Some("/t/db.slice/web.slice")
        );
        assert_eq!(cell(true).cgroup_of("4:cpu:/x\n"), None);
        assert_eq!(cell(false).value(true), ("freezer.state", "FROZEN"));
        assert_eq!(cell(true).value(false), ("cgroup.freeze", "0"));
    }
}
