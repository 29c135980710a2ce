//! The cgroups of a booted container (`spawn --boot`): the host's hierarchies as this
//! process sees them (`/proc/self/cgroup` matched with mountinfo), a child of bulkhead's own
//! cgroup made in each hierarchy an init writes to (name=systemd, cgroup2), with the
//! container's own cgroup `payload` below it, joined by the container's PID 1 through a
//! descriptor opened here, and removed, with everything the init made below it, once the
//! container has exited. The limits on how deep and how many cgroups the container may make
//! (cgroup2's `cgroup.max.depth`, `cgroup.max.descendants`) are on the outer cgroup, above the
//! root of the container's cgroup namespace, where it cannot write them. Everything is made,
//! written and removed through directory descriptors ([`tree`]): the container's tree may be
//! deeper than PATH_MAX. Only directories this module made are ever written or removed. On
//! cgroup2, [`supervisor`] moves bulkhead out of the way so that the container's cgroup gets
//! controllers.

pub mod supervisor;
pub mod tree;

use crate::mountinfo::{self, Mount};
use crate::statefile;
use rustix::fs::{AtFlags, Mode, OFlags};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

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

/// The container's own cgroup below the one bulkhead makes in each hierarchy: PID 1 joins it,
/// and it is the root of the container's cgroup namespace.
pub const PAYLOAD: &str = "payload";

/// What a booted container may make below its cgroup on cgroup2 (v1 hierarchies have no
/// such files: there nothing bounds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Levels of cgroups below the container's own (`payload`).
    pub depth: u32,
    /// Cgroups below the container's own, in all.
    pub descendants: u32,
}

/// One cgroup made for a container, in one hierarchy.
#[derive(Debug)]
struct Made {
    /// This process's own cgroup in the hierarchy, held open: the tree is removed from it.
    parent: OwnedFd,
    name: OsString,
    /// Where the cgroup is, for messages.
    dir: PathBuf,
}

/// The cgroups made for one container: removed (with everything below) by [`Self::remove`],
/// or on drop.
#[derive(Debug)]
pub struct OwnedCgroups {
    made: Vec<Made>,
    refused: Vec<String>,
}

impl OwnedCgroups {
    /// Make `name` below each writable hierarchy's own cgroup and `name/payload` below it, and
    /// open `payload/cgroup.procs` for the container's PID 1 to join through. On cgroup2,
    /// `name` gets `limits` (one more level and one more cgroup than the container gets:
    /// `payload` itself) and passes every controller it has down to `payload`. A directory
    /// that exists already is an error (it is not ours).
    /// With `owner` (a user namespace's root, as host IDs) `payload` and the files that
    /// delegate it are given to it, as systemd delegates a unit's cgroup; `name` and its
    /// limits stay root's.
    pub fn create(
        hier: &[Hierarchy],
        name: &str,
        owner: Option<(u32, u32)>,
        limits: Limits,
    ) -> io::Result<(OwnedCgroups, Vec<OwnedFd>)> {
        let mut owned = OwnedCgroups {
            made: Vec::new(),
            refused: Vec::new(),
        };
        let mut procs = Vec::new();
        for h in hier.iter().filter(|h| h.writable()) {
            let dir = h.own.join(name);
            let ctx = |what: &str, e: io::Error| {
                io::Error::new(e.kind(), format!("{what} {}: {e}", dir.display()))
            };
            let parent = rustix::fs::open(
                &h.own,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| {
                io::Error::new(
                    io::Error::from(e).kind(),
                    format!("open {}: {e}", h.own.display()),
                )
            })?;
            rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o755))
                .map_err(|e| ctx("mkdir", e.into()))?;
            owned.made.push(Made {
                parent,
                name: OsString::from(name),
                dir: dir.clone(),
            });
            let parent = &owned.made.last().expect("just made").parent;
            let outer = open_dir(parent.as_fd(), name).map_err(|e| ctx("open", e))?;
            if h.kind == Kind::Unified {
                let levels = limits.depth.saturating_add(1).to_string();
                let count = limits.descendants.saturating_add(1).to_string();
                write_at(&outer, "cgroup.max.depth", &levels)
                    .map_err(|e| ctx("write cgroup.max.depth of", e))?;
                write_at(&outer, "cgroup.max.descendants", &count)
                    .map_err(|e| ctx("write cgroup.max.descendants of", e))?;
                let have = read_at(&outer, "cgroup.controllers")
                    .map_err(|e| ctx("read cgroup.controllers of", e))?;
                for c in supervisor::controllers(&have) {
                    if let Err(e) = write_at(&outer, "cgroup.subtree_control", &format!("+{c}")) {
                        owned.refused.push(format!("{c} ({e})"));
                    }
                }
            }
            rustix::fs::mkdirat(&outer, PAYLOAD, Mode::from_raw_mode(0o755))
                .map_err(|e| ctx(&format!("mkdir {PAYLOAD} in"), e.into()))?;
            let payload = open_dir(outer.as_fd(), PAYLOAD)
                .map_err(|e| ctx(&format!("open {PAYLOAD} in"), e))?;
            if let Some((uid, gid)) = owner {
                delegate(&payload, uid, gid).map_err(|e| ctx(&format!("{PAYLOAD} of"), e))?;
            }
            let f = rustix::fs::openat(
                &payload,
                "cgroup.procs",
                OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .map_err(|e| ctx(&format!("open {PAYLOAD}/cgroup.procs in"), e.into()))?;
            procs.push(f);
        }
        Ok((owned, procs))
    }

    /// The outer cgroups made, in hierarchy order (each holds `payload`).
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.made.iter().map(|m| m.dir.clone()).collect()
    }

    /// The controllers an outer cgroup2 cgroup could not pass down to `payload`, with why.
    pub fn refused(&self) -> &[String] {
        &self.refused
    }

    /// Remove every cgroup made, with everything below it ([`tree::remove_tree_at`]); what
    /// stays is returned (each the deepest cgroup that stayed on its branch).
    pub fn remove(&mut self) -> Vec<tree::Left> {
        let mut left = Vec::new();
        for m in self.made.drain(..) {
            if let Err(l) = tree::remove_tree_at(m.parent.as_fd(), &m.name, &m.dir) {
                left.extend(l);
            }
        }
        left
    }
}

impl Drop for OwnedCgroups {
    /// What [`Self::remove`] has not removed yet (a start that failed midway).
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

fn open_dir(dir: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

fn write_at(dir: &OwnedFd, name: &str, text: &str) -> io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?;
    crate::fd::write_once(fd.as_fd(), text.as_bytes()).map(drop)
}

fn read_at(dir: &OwnedFd, name: &str) -> io::Result<String> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?;
    let mut buf = [0u8; 4096];
    let n = crate::fd::read_once(fd.as_fd(), &mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
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

/// Give the cgroup open as `dir` and its [`DELEGATED`] files to `uid`:`gid` (kernfs: no
/// symlinks to follow).
fn delegate(dir: &OwnedFd, uid: u32, gid: u32) -> io::Result<()> {
    let (uid, gid) = (
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
    );
    rustix::fs::fchown(dir, uid, gid).map_err(|e| ctx_io("chown", "the directory", e))?;
    for f in DELEGATED {
        match rustix::fs::chownat(dir, *f, uid, gid, AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => {}
            r => r.map_err(|e| ctx_io("chown", f, e))?,
        }
    }
    Ok(())
}

fn ctx_io(what: &str, name: &str, e: rustix::io::Errno) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{what} {name}: {e}"))
}

/// Remove what a bulkhead killed with SIGKILL left: `PREFIX-PID` cgroups below this
/// process's own in the writable hierarchies whose PID is no longer alive and that hold no
/// process, through descriptors ([`tree`]). Returns what was removed, and what of it stayed.
pub fn remove_stale(hier: &[Hierarchy], prefix: &str) -> (Vec<PathBuf>, Vec<tree::Left>) {
    let (mut removed, mut left) = (Vec::new(), Vec::new());
    for h in hier.iter().filter(|h| h.writable()) {
        let Ok(parent) = rustix::fs::open(
            &h.own,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let Ok(names) = statefile::names_in(parent.as_fd()) else {
            continue;
        };
        for name in names {
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(prefix))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let dir = h.own.join(&name);
            if crate::process::alive(pid) || !crate::cgroupfs::procs_tree(&dir).is_empty() {
                continue;
            }
            match tree::remove_tree_at(parent.as_fd(), OsStr::new(&name), &dir) {
                Ok(()) => removed.push(dir),
                Err(l) => left.extend(l),
            }
        }
    }
    (removed, left)
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
