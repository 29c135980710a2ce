//! Everything a benchmark creates on the machine — a cgroup root in every hierarchy, a loop
//! device with a file system, its mount and scheduler — recorded in a state file so that it is
//! removed at the end, on Ctrl-C, on failure, and by the next run when the last one was
//! killed with SIGKILL.

use bulkhead::actions::hugepages;
use bulkhead_testkit::groups::{self, Hierarchies};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

const STATE_ROOT: &str = "/run/bulkhead/bench";

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct State {
    pub pid: u32,
    /// The bench's cgroup root in each hierarchy.
    pub cgroup_dirs: Vec<PathBuf>,
    /// Its path in the named hierarchies (name=systemd), which the bench does not make but
    /// a systemd-nspawn peer does: removed if they exist.
    #[serde(default)]
    pub named_dirs: Vec<PathBuf>,
    pub image: Option<PathBuf>,
    pub loop_dev: Option<String>,
    pub mount: Option<PathBuf>,
    /// A disk-backed scratch directory (page cache for the memory hog).
    #[serde(default)]
    pub scratch: Option<PathBuf>,
    /// More loop file systems (btrfs, XFS) for the spawn bench.
    #[serde(default)]
    pub loops: Vec<LoopFs>,
    /// hugetlb pools the bench grew (`nr_hugepages` file, pages before): put back first.
    #[serde(default)]
    pub pools: Vec<(PathBuf, u64)>,
    /// Directories the bench made inside directories the user named (`--data-dir`).
    #[serde(default)]
    pub dirs: Vec<PathBuf>,
    /// I/O schedulers the bench changed (`queue/scheduler` file, the one before).
    #[serde(default)]
    pub schedulers: Vec<(PathBuf, String)>,
}

/// A file system in a loop file: removed in reverse order of creation.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct LoopFs {
    pub image: PathBuf,
    pub loop_dev: Option<String>,
    pub mount: Option<PathBuf>,
}

fn unmount(m: &Path) {
    let ok = Command::new("umount")
        .arg(m)
        .status()
        .is_ok_and(|st| st.success());
    if !ok {
        // Still busy: detach it now; the kernel frees it when the last user is gone.
        let _ = Command::new("umount").arg("-l").arg(m).status();
    }
    let _ = std::fs::remove_dir(m);
}

pub struct Env {
    pub state: State,
    pub dir: PathBuf,
    /// `/bulkhead-bench-PID`, the cgroup path given to the slice backend.
    pub cgroup_root: String,
    pub layout: Hierarchies,
}

fn alive(pid: u32) -> bool {
    bulkhead_sys::process::alive(pid)
}

/// Where the bench records the io.cost lines it changed (the plan's `[iocost]`).
pub fn iocost_record(dir: &Path) -> PathBuf {
    dir.join("iocost.json")
}

/// Put back the io.cost lines a bench run changed, from its record.
fn reset_iocost(dir: &Path) {
    groups::reset_iocost(&iocost_record(dir));
}

/// Remove everything a state records. Safe to call twice.
pub fn tear_down(s: &State, dir: &Path) {
    reset_iocost(dir);
    for (file, pages) in &s.pools {
        let _ = std::fs::write(file, pages.to_string());
    }
    for (file, before) in s.schedulers.iter().rev() {
        let _ = std::fs::write(file, before);
    }
    for d in &s.dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    let _ = groups::remove_trees(&s.cgroup_dirs);
    let _ = groups::remove_trees(&s.named_dirs);
    for l in s.loops.iter().rev() {
        if let Some(m) = &l.mount {
            unmount(m);
        }
        if let Some(d) = &l.loop_dev {
            let _ = Command::new("losetup").args(["-d", d]).status();
        }
        let _ = std::fs::remove_file(&l.image);
    }
    if let Some(m) = &s.mount {
        unmount(m);
    }
    if let Some(l) = &s.loop_dev {
        let _ = Command::new("losetup").args(["-d", l]).status();
    }
    if let Some(i) = &s.image {
        let _ = std::fs::remove_file(i);
    }
    if let Some(d) = &s.scratch {
        let _ = std::fs::remove_dir_all(d);
    }
    let _ = std::fs::remove_dir_all(dir);
    // The state root goes too once no run is left in it (fails harmlessly otherwise).
    let _ = std::fs::remove_dir(STATE_ROOT);
}

/// Remove what benchmarks killed without cleaning up left behind. Returns what was cleaned.
pub fn clean_stale() -> Vec<u32> {
    let mut cleaned = Vec::new();
    let Ok(rd) = std::fs::read_dir(STATE_ROOT) else {
        return cleaned;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // Our own PID cannot have a live state yet (this runs before Env::create): a
        // directory with it is from an earlier run that had the same PID.
        if pid != std::process::id() && alive(pid) {
            continue;
        }
        let s: State = std::fs::read_to_string(e.path().join("state.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        tear_down(&s, &e.path());
        cleaned.push(pid);
    }
    cleaned
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Env {
    /// Create the bench's cgroup root (`/bulkhead-bench-PID`) in every hierarchy.
    pub fn create() -> Result<Env, String> {
        let layout = Hierarchies::detect().map_err(|e| format!("cannot read mountinfo: {e}"))?;
        let pid = std::process::id();
        let dir = PathBuf::from(STATE_ROOT).join(pid.to_string());
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = format!("bulkhead-bench-{pid}");
        let mut env = Env {
            state: State {
                pid,
                ..Default::default()
            },
            dir,
            cgroup_root: format!("/{name}"),
            layout,
        };
        for m in env.layout.mounts() {
            let (mount, cpuset) = (m.path, m.cpuset);
            let d = mount.join(&name);
            // Recorded before it exists, so a kill at any moment leaves nothing unrecorded.
            env.state.cgroup_dirs.push(d.clone());
            env.save();
            std::fs::create_dir(&d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
            if cpuset {
                copy_cpuset(&mount, &d)?;
            }
        }
        // Not made here, but recorded: systemd-nspawn peers make the bench's path in the
        // named hierarchies (name=systemd) too, and the teardown removes what exists.
        env.state.named_dirs = env.layout.named().iter().map(|m| m.join(&name)).collect();
        env.save();
        Ok(env)
    }

    /// Only the state directory, no cgroups: for benches that change other things (pools).
    pub fn create_bare() -> Result<Env, String> {
        let layout = Hierarchies::detect().map_err(|e| format!("cannot read mountinfo: {e}"))?;
        let pid = std::process::id();
        let dir = PathBuf::from(STATE_ROOT).join(pid.to_string());
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let env = Env {
            state: State {
                pid,
                ..Default::default()
            },
            dir,
            cgroup_root: String::new(),
            layout,
        };
        env.save();
        Ok(env)
    }

    /// Grow or shrink a hugetlb pool (read back, compaction when short), recording its size
    /// before the first change so that the end of the bench, or the next run after a kill,
    /// puts it back.
    pub fn set_pool(&mut self, size: u64, pages: u64) -> Result<hugepages::PoolSet, String> {
        let file = hugepages::pool_file(size);
        if !self.state.pools.iter().any(|(f, _)| f == &file) {
            let was = hugepages::pool_pages(size)
                .ok_or_else(|| format!("{}: no such pool", file.display()))?;
            self.state.pools.push((file, was));
            self.save();
        }
        hugepages::set_pool(size, pages).map_err(|e| e.to_string())
    }

    pub fn save(&self) {
        let _ = std::fs::write(
            self.dir.join("state.json"),
            serde_json::to_string(&self.state).unwrap_or_default(),
        );
    }

    /// A plain cgroup `NAME` under the bench root in every hierarchy (no limits): where the
    /// "free" hogs run, outside any bulkhead slice.
    pub fn plain_cgroup(&self, name: &str) -> Result<Vec<PathBuf>, String> {
        let mut files = Vec::new();
        for d in &self.state.cgroup_dirs {
            let c = d.join(name);
            if !c.exists() {
                std::fs::create_dir(&c).map_err(|e| format!("mkdir {}: {e}", c.display()))?;
                if d.join("cpuset.cpus").exists() {
                    copy_cpuset(d, &c)?;
                }
            }
            files.push(c.join("cgroup.procs"));
        }
        Ok(files)
    }

    /// Limit the whole bench (the "small host") to `bytes` of memory, or lift the limit.
    pub fn limit_memory(&self, bytes: Option<u64>) -> Result<(), String> {
        let Some(limit) = self.layout.memory_limit(bytes) else {
            return Err("no memory controller on this host".into());
        };
        let d = self
            .state
            .cgroup_dirs
            .iter()
            .find(|d| d.starts_with(&limit.mount))
            .ok_or("the bench root is missing in the memory hierarchy")?;
        let (file, value) = (limit.file, limit.value);
        std::fs::write(d.join(file), value).map_err(|e| format!("{}: {e}", d.join(file).display()))
    }

    /// A loop device (direct I/O to its backing file, which is allocated in full first, so
    /// the disk below never allocates during a run) with an ext4 file system, with or without
    /// a journal, on the I/O `scheduler` (`bfq` makes I/O weights apply), mounted under the
    /// state directory. Returns the mount point and device name.
    pub fn loop_fs(
        &mut self,
        size: u64,
        scheduler: &str,
        journal: bool,
    ) -> Result<(PathBuf, String), String> {
        let image = PathBuf::from(format!("/var/tmp/bulkhead-bench-{}.img", self.state.pid));
        self.state.image = Some(image.clone());
        self.save();
        allocate(&image, size)?;
        let dev = run(Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on"])
            .arg(&image))?;
        self.state.loop_dev = Some(dev.clone());
        self.save();
        // With a journal (what users have), metadata commits are issued by the jbd2 kernel
        // thread, outside every slice: the diagnosis shows what that does to an fsync.
        let mut mkfs = Command::new("mkfs.ext4");
        mkfs.args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]);
        if !journal {
            mkfs.args(["-O", "^has_journal"]);
        }
        run(mkfs.arg(&dev))?;
        let mount = self.dir.join("data");
        std::fs::create_dir_all(&mount).map_err(|e| e.to_string())?;
        run(Command::new("mount").arg(&dev).arg(&mount))?;
        self.state.mount = Some(mount.clone());
        self.save();
        let name = Path::new(&dev)
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        // Recorded like a disk's: a loop device keeps its scheduler after it is detached.
        self.set_scheduler(&name, scheduler)?;
        Ok((mount, name))
    }

    /// A file system made by `mkfs` (program and options; the device is appended) in a
    /// loop file of `size` bytes, mounted under the state directory as `tag`.
    pub fn mkfs_loop(&mut self, tag: &str, size: u64, mkfs: &[&str]) -> Result<PathBuf, String> {
        let image = PathBuf::from(format!(
            "/var/tmp/bulkhead-bench-{}-{tag}.img",
            self.state.pid
        ));
        self.state.loops.push(LoopFs {
            image: image.clone(),
            ..Default::default()
        });
        self.save();
        let i = self.state.loops.len() - 1;
        allocate(&image, size)?;
        let dev = run(Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image))?;
        self.state.loops[i].loop_dev = Some(dev.clone());
        self.save();
        run(Command::new(mkfs[0]).args(&mkfs[1..]).arg(&dev))?;
        let mount = self.dir.join(tag);
        std::fs::create_dir_all(&mount).map_err(|e| e.to_string())?;
        self.state.loops[i].mount = Some(mount.clone());
        self.save();
        run(Command::new("mount").arg(&dev).arg(&mount))?;
        Ok(mount)
    }

    /// A directory on a disk-backed file system (/var/tmp), so files written there are page
    /// cache the kernel can reclaim, unlike tmpfs.
    pub fn scratch(&mut self) -> Result<PathBuf, String> {
        let d = PathBuf::from(format!("/var/tmp/bulkhead-bench-{}.d", self.state.pid));
        self.state.scratch = Some(d.clone());
        self.save();
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        Ok(d)
    }

    /// A directory of the bench's own inside `parent` (a file system the user named), removed
    /// at the end.
    pub fn dir_in(&mut self, parent: &Path, tag: &str) -> Result<PathBuf, String> {
        if !parent.is_dir() {
            return Err(format!("{}: not a directory", parent.display()));
        }
        let d = parent.join(format!("bulkhead-bench-{}-{tag}", self.state.pid));
        self.state.dirs.push(d.clone());
        self.save();
        std::fs::create_dir(&d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
        Ok(d)
    }

    /// Switch a disk's I/O scheduler for the bench; the one before comes back at the end.
    pub fn set_scheduler(&mut self, disk: &str, scheduler: &str) -> Result<(), String> {
        let file = PathBuf::from(format!("/sys/block/{disk}/queue/scheduler"));
        let before = bulkhead_testkit::host::io_scheduler(disk)
            .ok_or_else(|| format!("{}: no I/O scheduler to set", file.display()))?;
        if !self.state.schedulers.iter().any(|(f, _)| f == &file) {
            self.state.schedulers.push((file.clone(), before));
            self.save();
        }
        std::fs::write(&file, scheduler)
            .map_err(|e| format!("cannot set the {scheduler} scheduler on {disk}: {e}"))
    }

    /// Remove the file systems of [`Env::mkfs_loop`] now (before other scenarios).
    pub fn drop_loops(&mut self) {
        let s = State {
            loops: std::mem::take(&mut self.state.loops),
            ..Default::default()
        };
        tear_down(&s, Path::new("/nonexistent-bulkhead"));
        self.save();
    }

    /// Remove the loop file system now (before other scenarios).
    pub fn drop_loop_fs(&mut self) {
        let s = State {
            mount: self.state.mount.take(),
            loop_dev: self.state.loop_dev.take(),
            image: self.state.image.take(),
            ..Default::default()
        };
        tear_down(&s, Path::new("/nonexistent-bulkhead"));
        self.save();
    }
}

/// A file of `size` bytes with every block allocated (fallocate), so a loop device on it
/// never makes the file system below allocate while it runs.
fn allocate(image: &Path, size: u64) -> Result<(), String> {
    let f = std::fs::File::create(image).map_err(|e| format!("{}: {e}", image.display()))?;
    if rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, size).is_ok() {
        return Ok(());
    }
    // A file system without fallocate: a sparse file.
    f.set_len(size)
        .map_err(|e| format!("cannot size {}: {e}", image.display()))
}

/// Give a new cpuset cgroup its parent's CPUs and memory nodes where it needs them: on v1 a
/// cpuset with empty values takes no tasks, so the parent's are copied. On v2 an empty value
/// means "inherit" (and the root has no such file at all), so an empty or missing parent
/// value is left alone: writing would only pin the child to today's CPUs.
fn copy_cpuset(parent: &Path, child: &Path) -> Result<(), String> {
    for f in ["cpuset.cpus", "cpuset.mems"] {
        let v = match std::fs::read_to_string(parent.join(f)) {
            Ok(v) => v,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", parent.join(f).display())),
        };
        if v.trim().is_empty() {
            continue;
        }
        std::fs::write(child.join(f), v.trim())
            .map_err(|e| format!("{}: {e}", child.join(f).display()))?;
    }
    Ok(())
}

impl Drop for Env {
    fn drop(&mut self) {
        tear_down(&self.state, &self.dir);
    }
}
