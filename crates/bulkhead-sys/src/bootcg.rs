//! The cgroups of a booted container (`spawn --boot`): the host's hierarchies as this
//! process sees them (`/proc/self/cgroup` matched with mountinfo), a child of bulkhead's own
//! cgroup made in each hierarchy an init writes to (name=systemd, cgroup2), joined by the
//! container's PID 1 through a descriptor opened here, and removed, with everything the init
//! made below it, once the container has exited. Only directories this module made are ever
//! written or removed. On cgroup2, [`supervisor`] moves bulkhead out of the way so that the
//! container's cgroup gets controllers.

pub mod supervisor;

use crate::mountinfo::{self, Mount};
use crate::statefile;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a hierarchy holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A v1 hierarchy with controllers (`cpu`, or `cpu,cpuacct` when co-mounted).
    Controllers,
    /// The v1 hierarchy without controllers that systemd tracks its units in (`name=systemd`).
    Systemd,
    /// The cgroup2 hierarchy.
    Unified,
}

/// One hierarchy of the host, as this process sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub kind: Kind,
    /// Where the host mounts it (`/sys/fs/cgroup/memory`).
    pub mount_point: PathBuf,
    /// The mount options that name it (`memory`, `name=systemd`; empty for cgroup2).
    pub options: String,
    /// This process's own cgroup in it, as a host path.
    pub own: PathBuf,
}

impl Hierarchy {
    /// The directory name it has under /sys/fs/cgroup (`memory`, `systemd`, `unified`).
    pub fn name(&self) -> String {
        self.mount_point
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Whether the container's init gets a cgroup of its own here (it writes to it).
    pub fn writable(&self) -> bool {
        self.kind != Kind::Controllers
    }
}

/// The hierarchies of this process, from /proc/self/cgroup and /proc/self/mountinfo.
pub fn hierarchies() -> io::Result<Vec<Hierarchy>> {
    let cgroup = statefile::read_string(Path::new("/proc/self/cgroup"), 1 << 20)?;
    Ok(match_mounts(&cgroup, &mountinfo::read()?))
}

/// Each line of a /proc/PID/cgroup text matched with the mount of its hierarchy; a line
/// whose hierarchy is not mounted (or a named one other than systemd's) is left out.
pub fn match_mounts(cgroup: &str, mounts: &[Mount]) -> Vec<Hierarchy> {
    let mut out = Vec::new();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        // A mount that shows this process's cgroup (its root is at or above it).
        let shows = |m: &&Mount| Path::new(path).starts_with(&m.root);
        let found = if id == "0" && ctrls.is_empty() {
            mounts
                .iter()
                .filter(shows)
                .find(|m| m.fstype == "cgroup2")
                .map(|m| (m, Kind::Unified, String::new()))
        } else {
            let want: Vec<&str> = ctrls.split(',').collect();
            let kind = match ctrls {
                "name=systemd" => Kind::Systemd,
                c if c.starts_with("name=") => continue,
                _ => Kind::Controllers,
            };
            mounts
                .iter()
                .filter(shows)
                .filter(|m| m.fstype == "cgroup")
                .find(|m| {
                    let opts: Vec<&str> = m.super_options.split(',').collect();
                    want.iter().all(|w| opts.contains(w))
                })
                .map(|m| (m, kind, v1_options(&m.super_options)))
        };
        let Some((m, kind, options)) = found else {
            continue;
        };
        let Ok(rel) = Path::new(path).strip_prefix(&m.root) else {
            continue;
        };
        out.push(Hierarchy {
            kind,
            mount_point: m.point.clone(),
            options,
            own: m.point.join(rel),
        });
    }
    out
}

/// The options that name a v1 hierarchy (a second mount must give the same): the super
/// block's, less `rw`/`ro`.
fn v1_options(super_options: &str) -> String {
    super_options
        .split(',')
        .filter(|o| *o != "rw" && *o != "ro")
        .collect::<Vec<_>>()
        .join(",")
}

/// The cgroups made for one container: removed (with everything below) on drop.
#[derive(Debug)]
pub struct OwnedCgroups {
    dirs: Vec<PathBuf>,
}

impl OwnedCgroups {
    /// Make `name` below each writable hierarchy's own cgroup and open its `cgroup.procs`
    /// for the container's PID 1 to join through. A directory that exists already is an
    /// error (it is not ours).
    /// With `owner` (a user namespace's root, as host IDs) the directories and the files
    /// that delegate them are given to it, as systemd delegates a unit's cgroup.
    pub fn create(
        hier: &[Hierarchy],
        name: &str,
        owner: Option<(u32, u32)>,
    ) -> io::Result<(OwnedCgroups, Vec<OwnedFd>)> {
        let mut owned = OwnedCgroups { dirs: Vec::new() };
        let mut procs = Vec::new();
        for h in hier.iter().filter(|h| h.writable()) {
            let dir = h.own.join(name);
            fs::create_dir(&dir)
                .map_err(|e| io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display())))?;
            owned.dirs.push(dir.clone());
            if let Some((uid, gid)) = owner {
                delegate(&dir, uid, gid)?;
            }
            let f = fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(dir.join("cgroup.procs"))?;
            procs.push(OwnedFd::from(f));
        }
        Ok((owned, procs))
    }

    /// The directories made, in hierarchy order.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
}

impl Drop for OwnedCgroups {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = remove_tree(d);
        }
    }
}

/// The files a delegated cgroup's owner writes (those a hierarchy lacks are skipped).
const DELEGATED: &[&str] = &[
    "cgroup.procs",
    "cgroup.threads",
    "cgroup.subtree_control",
    "tasks",
    "notify_on_release",
    "cgroup.clone_children",
];

/// Give `dir` and its [`DELEGATED`] files to `uid`:`gid` (kernfs: no symlinks to follow).
fn delegate(dir: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let chown = |p: &Path| {
        std::os::unix::fs::lchown(p, Some(uid), Some(gid))
            .map_err(|e| io::Error::new(e.kind(), format!("chown {}: {e}", p.display())))
    };
    chown(dir)?;
    for f in DELEGATED {
        match chown(&dir.join(f)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            r => r?,
        }
    }
    Ok(())
}

/// Remove what a bulkhead killed with SIGKILL left: `PREFIX-PID` cgroups below this
/// process's own in the writable hierarchies whose PID is no longer alive and that hold no
/// process. Returns what was removed.
pub fn remove_stale(hier: &[Hierarchy], prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for h in hier.iter().filter(|h| h.writable()) {
        let Ok(rd) = fs::read_dir(&h.own) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(prefix))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let dir = e.path();
            let alive = crate::process::alive(pid);
            if !alive && crate::cgroupfs::procs_tree(&dir).is_empty() && remove_tree(&dir).is_ok() {
                out.push(dir);
            }
        }
    }
    out
}

/// Remove a cgroup and every cgroup below it, deepest first. Tasks that are leaving keep a
/// cgroup busy for a moment after they are reaped: EBUSY is retried for up to 3 s.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path())?;
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hybrid_hierarchies_are_matched_with_their_mounts() {
        let mi = b"30 23 0:38 /other /run/elsewhere rw - cgroup2 cgroup2 rw\n\
31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n\
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
35 31 0:32 /process_api /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n\
41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let cg = "9:name=systemd:/a.slice\n4:memory:/process_api/x\n1:cpu,cpuacct:/\n\
3:name=other:/\n0::/a.slice\n";
        let h = match_mounts(cg, &mountinfo::parse(mi));
        assert_eq!(h.len(), 4, "{h:?}");
        assert_eq!(h[0].kind, Kind::Systemd);
        assert_eq!(h[0].options, "xattr,name=systemd");
        assert_eq!(h[0].own, Path::new("/sys/fs/cgroup/systemd/a.slice"));
        assert_eq!(h[1].own, Path::new("/sys/fs/cgroup/memory/x"));
        assert_eq!(h[2].options, "cpu,cpuacct");
        assert_eq!(h[2].name(), "cpu,cpuacct");
        assert!(!h[2].writable());
        assert_eq!(h[3].kind, Kind::Unified);
        assert_eq!(h[3].own, Path::new("/sys/fs/cgroup/unified/a.slice"));
    }
}
