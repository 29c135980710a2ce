//! The rig's own tree of cgroups on cgroupfs (the benchmarks'): the machine's hierarchies,
//! the slices of a resolved plan applied under a cgroup root and removed again, what they
//! hold and used read back, and a child spawned into them. The caller never builds a backend
//! or reads the layout itself.

use bulkhead_cgroups::fs::{foreign, remove_trees as remove_cgroup_trees};
use bulkhead_cgroups::{iocost, stats, Backend, CgroupFs, Layout, Placement, Version};
use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The machine's mounted cgroup hierarchies.
#[derive(Debug, Clone)]
pub struct Hierarchies(Layout);

/// One hierarchy's mount point, and whether it holds cpuset (a new v1 cpuset cgroup needs
/// its parent's CPUs and memory nodes before it takes tasks).
#[derive(Debug, Clone)]
pub struct Mount {
    pub path: PathBuf,
    pub cpuset: bool,
}

/// A memory limit for a cgroup: the file (in the memory hierarchy) and what to write.
#[derive(Debug, Clone)]
pub struct MemoryLimit {
    /// The memory hierarchy's mount point.
    pub mount: PathBuf,
    pub file: &'static str,
    pub value: String,
}

impl Hierarchies {
    /// Read the hierarchies from /proc/self/mountinfo.
    pub fn detect() -> std::io::Result<Hierarchies> {
        Layout::detect().map(Hierarchies)
    }

    /// Every hierarchy's mount (v1 ones first, then the unified one).
    pub fn mounts(&self) -> Vec<Mount> {
        self.0
            .v1
            .iter()
            .chain(self.0.unified.iter())
            .map(|h| Mount {
                path: h.mount.clone(),
                cpuset: h.has("cpuset"),
            })
            .collect()
    }

    /// The named v1 hierarchies with no controller (`name=systemd`): not the caller's to
    /// write, but a program it starts may make cgroups there (systemd-nspawn mirrors its
    /// cgroup2 path into `name=systemd`), so a caller records its root there too, for removal.
    pub fn named(&self) -> Vec<PathBuf> {
        bulkhead_sys::mountinfo::read()
            .unwrap_or_default()
            .into_iter()
            .filter(|m| {
                m.fstype == "cgroup" && m.super_options.split(',').any(|o| o.starts_with("name="))
            })
            .filter(|m| !self.0.v1.iter().any(|h| h.mount == m.point))
            .map(|m| m.point)
            .collect()
    }

    /// One line for a report: `hybrid: cpu,... on v1; hugetlb on v2 (/sys/fs/cgroup/unified)`.
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// How to limit a cgroup to `bytes` of memory (None: lift the limit); None when no
    /// memory controller is mounted.
    pub fn memory_limit(&self, bytes: Option<u64>) -> Option<MemoryLimit> {
        let h = self.0.hierarchy("memory")?;
        let (file, value) = match (h.version, bytes) {
            (Version::V1, Some(b)) => ("memory.limit_in_bytes", b.to_string()),
            (Version::V1, None) => ("memory.limit_in_bytes", "-1".into()),
            (_, Some(b)) => ("memory.max", b.to_string()),
            (_, None) => ("memory.max", "max".into()),
        };
        Some(MemoryLimit {
            mount: h.mount.clone(),
            file,
            value,
        })
    }

    /// Slices under the cgroup `root` (`/bulkhead-bench-PID`) in these hierarchies.
    pub fn groups(&self, root: &str) -> Result<Groups> {
        Ok(Groups {
            fs: CgroupFs::new(self.0.clone(), root)?,
        })
    }
}

/// A slice's directory in one hierarchy.
#[derive(Debug, Clone)]
pub struct SliceDir {
    pub dir: PathBuf,
    /// A v1 hierarchy (its controllers are those bound to the mount).
    pub v1: bool,
    pub controllers: Vec<String>,
}

/// Slices under one cgroup root, on cgroupfs.
#[derive(Debug, Clone)]
pub struct Groups {
    fs: CgroupFs,
}

impl Groups {
    /// Slices under `root` in the machine's hierarchies.
    pub fn open(root: &str) -> Result<Groups> {
        let h = Hierarchies::detect().map_err(|e| Error::failed(e.to_string()))?;
        h.groups(root)
    }

    /// The layout's line for a report.
    pub fn describe(&self) -> String {
        self.fs.layout.describe()
    }

    /// Create or update the plan's slices (as `bulkhead apply --backend cgroupfs` does).
    pub fn apply(&self, plan: &ResolvedPlan) -> Result<()> {
        self.fs
            .execute(&self.fs.plan_apply(plan, Default::default())?)?;
        Ok(())
    }

    /// Set the plan's `[iocost]` lines (io.cost at the cgroup2 root), recording the ones
    /// before in `record` so that [`reset_iocost`] puts them back.
    pub fn apply_iocost(&self, plan: &ResolvedPlan, record: &Path) -> Result<()> {
        let Some(r) = &plan.iocost else {
            return Ok(());
        };
        let root =
            iocost::root(&self.fs.layout).map_err(|e| Error::failed(format!("[iocost]: {e}")))?;
        let ops = iocost::plan_apply(r, &root)?;
        if !ops.is_empty() {
            iocost::execute(&ops, record)?;
        }
        Ok(())
    }

    /// Remove the slices (their processes killed first).
    pub fn destroy(&self, slices: &[SliceName]) -> Result<()> {
        self.fs.execute(&self.fs.plan_destroy(slices, true)?)?;
        Ok(())
    }

    /// Move a process into a slice; `Err` says why not.
    pub fn move_pid(&self, slice: &SliceName, pid: i32) -> std::result::Result<(), String> {
        self.fs.move_pid(slice, pid)
    }

    /// The slice's `cgroup.procs` files (for [`spawn_joined`]).
    pub fn procs_files(&self, slice: &SliceName) -> Vec<PathBuf> {
        self.fs.procs_files(slice)
    }

    /// Every process in the slice and below it.
    pub fn pids(&self, slice: &SliceName) -> Vec<i32> {
        self.fs.pids(slice)
    }

    /// The slice's directories that exist, one per hierarchy.
    pub fn slice_dirs(&self, slice: &SliceName) -> Vec<SliceDir> {
        self.fs
            .existing_dirs(slice)
            .into_iter()
            .map(|(h, dir)| SliceDir {
                dir,
                v1: h.version == Version::V1,
                controllers: h.controllers.clone(),
            })
            .collect()
    }

    /// CPU time the slice used, microseconds.
    pub fn cpu_usage_us(&self, slice: &SliceName) -> Option<u64> {
        stats::cpu_usage_us(&self.fs, slice)
    }

    /// CPU time of a plain cgroup `rel` (relative to the root): cpu.stat's usage_usec
    /// (v2), or cpuacct.usage.
    pub fn dir_cpu_usage_us(&self, rel: &Path) -> Option<u64> {
        let l = &self.fs.layout;
        let at = |mount: &Path| mount.join(&self.fs.root).join(rel);
        if let Some(u) = &l.unified {
            let t = std::fs::read_to_string(at(&u.mount).join("cpu.stat")).ok();
            if let Some(v) = t.and_then(|t| stats::flat_keyed(&t, "usage_usec")) {
                return Some(v);
            }
        }
        let h = l.cpuacct()?;
        let t = std::fs::read_to_string(at(&h.mount).join("cpuacct.usage")).ok()?;
        t.trim().parse::<u64>().ok().map(|ns| ns / 1000)
    }

    /// Where the I/O of cgroup `rel` (relative to the root) is counted: its directory in
    /// the io (or blkio) hierarchy and whether that is v2, and its unified directory (PSI).
    pub fn io_dirs(&self, rel: &Path) -> (Option<(PathBuf, bool)>, Option<PathBuf>) {
        let l = &self.fs.layout;
        let io = l.hierarchy("io").or_else(|| l.hierarchy("blkio"));
        let at = |mount: &Path| mount.join(&self.fs.root).join(rel);
        (
            io.map(|h| (at(&h.mount), h.version == Version::V2)),
            l.unified.as_ref().map(|u| at(&u.mount)),
        )
    }
}

/// Spawn `cmd` as a child that joins the cgroups whose `cgroup.procs` files are given
/// before it execs: it runs no instruction of the command outside them.
pub fn spawn_joined(
    cmd: &mut std::process::Command,
    procs_files: &[PathBuf],
) -> std::io::Result<std::process::Child> {
    bulkhead_sys::process::join_cgroups_before_exec(cmd, procs_files)?;
    cmd.spawn()
}

/// Remove cgroup trees a caller made (each root and everything below it, deepest first).
pub fn remove_trees(roots: &[PathBuf]) -> std::io::Result<()> {
    remove_cgroup_trees(roots)
}

/// Put back the io.cost lines [`Groups::apply_iocost`] changed, from its record.
pub fn reset_iocost(record: &Path) {
    if let Ok(rec) = iocost::record::Record::load(record) {
        if !rec.is_empty() {
            let _ = iocost::reset(&iocost::plan_reset(&rec), record);
        }
    }
}

/// Forget the controllers bulkhead enabled in cgroups whose path contains `root` (a tree
/// that is gone) from the record of controllers it enabled.
pub fn forget_enabled_controllers(root: &str) {
    foreign::forget(|dir, _| dir.to_string_lossy().contains(root));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_limit_is_written_where_this_hosts_memory_controller_is() {
        let h = Hierarchies::detect().expect("mountinfo");
        assert!(
            !h.mounts().is_empty(),
            "no cgroup hierarchy: {}",
            h.describe()
        );
        let Some(on) = h.memory_limit(Some(1 << 30)) else {
            panic!("no memory controller: {}", h.describe());
        };
        let mount = Layout::detect()
            .unwrap()
            .hierarchy("memory")
            .unwrap()
            .mount
            .clone();
        assert_eq!(on.mount, mount);
        let off = h.memory_limit(None).unwrap();
        match on.file {
            "memory.limit_in_bytes" => assert_eq!(off.value, "-1"),
            "memory.max" => assert_eq!(off.value, "max"),
            f => panic!("{f}"),
        }
        assert_eq!(on.value, "1073741824");
        assert!(mount.join("cgroup.procs").exists(), "{}", mount.display());
    }

    #[test]
    fn a_cgroup_root_with_dot_dot_is_refused() {
        let h = Hierarchies::detect().expect("mountinfo");
        let e = h.groups("/a/../b").unwrap_err();
        assert!(
            e.to_string().contains("must not contain '.' or '..'"),
            "{e}"
        );
    }
}
