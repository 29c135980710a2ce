//! Writable throw-away copies of a root file system, one per ephemeral sandbox.
//!
//! [`create`] takes the cheapest method the source's file system allows: a btrfs snapshot of
//! a subvolume (one ioctl), a reflink copy on XFS or btrfs (shared extents, one FICLONE per
//! file), or an overlay whose upper layer lives on a tmpfs the sandbox mounts itself. A full
//! copy is made only when asked for. On-disk copies live beside the source in a directory only
//! root can enter, `<parent>/.bulkhead-snapshots/.#bulkhead-<name>-<pid>-<seq>`, and only
//! where `<parent>` is root's alone (nobody else can change what its path names, see
//! [`bulkhead_sys::trusted`]); beside a tree in another user's directory no copy is kept
//! (`--snapshot overlay` works there: its copy lives in memory).
//!
//! Every step works on descriptors: the source as the caller opened it, the holder directory
//! as it was made and checked, the copy as it was made in it. A user who owns the source or
//! renames directories around it cannot redirect a write, a chown or a removal.
//!
//! Every snapshot has a registry entry, `state_root()/<pid>-<seq>`, holding `owner`
//! (`<pid> <start time>`, so a reused PID is told apart) and `snapshot` (the on-disk path,
//! written before the copy exists). Whatever kills the owner, [`clean_stale`] finds the entry
//! and removes what it names.

#![deny(clippy::disallowed_methods)]

mod choose;
mod pool;
mod registry;

pub use bulkhead_plan::sandbox::{Choice, Method};
pub use bulkhead_sys::btrfs::set_read_only;
pub use bulkhead_sys::btrfs::BTRFS_MAGIC;
pub use choose::{create, create_from};
pub use pool::{drop_pool_at, refill_pool, PoolKey};
pub use registry::clean_stale;

use bulkhead_sys::error::{errno_text, io_failed, Error, Result};
use bulkhead_sys::process::detach;
use bulkhead_sys::{statefile, tree};
use registry::remove_entry;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Where the registry lives unless `BULKHEAD_STATE_DIR` says otherwise.
pub use bulkhead_sys::paths::DEFAULT_STATE_ROOT;
/// The start of every on-disk snapshot's name; nothing else is ever removed by name.
pub const SNAPSHOT_PREFIX: &str = ".#bulkhead-";
/// On-disk snapshots live in this directory beside their source, 0700 and root's: a copy the
/// sandbox could write (a setuid binary it made) is out of every host user's reach.
pub const SNAPSHOT_DIR: &str = ".bulkhead-snapshots";

/// Snapshots of a read-only btrfs image made ahead of time, beside it:
/// `.#bulkhead-pool.T<subvolume id>.C<its ctransid>.<pid>.<n>`. A start takes one with a
/// rename instead of waiting for a snapshot's transaction commit.
pub const POOL_PREFIX: &str = ".#bulkhead-pool.";
/// A pooled snapshot being made (renamed to POOL_PREFIX when complete).
pub(crate) const POOL_TMP_PREFIX: &str = ".#bulkhead-pooltmp.";
/// How many snapshots a read-only image keeps ready.
pub const POOL_SIZE: usize = 2;

/// A writable copy of a root file system, removed by [`Snapshot::discard`] or on drop.
#[derive(Debug)]
pub struct Snapshot {
    pub method: Method,
    /// One line for `spawn -v`: why this method.
    pub why: String,
    /// On-disk copies: the registry entry `state_root()/<pid>-<seq>`, a file created and owned by
    /// this process (the owner, then the copy's path). Overlay: the shared mount point
    /// `state_root()/.overlay`.
    pub state_dir: PathBuf,
    /// The writable root: the on-disk copy, or for [`Method::Overlay`] `state_dir/root`, which
    /// is not created (the sandbox mounts a tmpfs on `state_dir` in its own mount namespace
    /// and the overlay on `root`).
    pub root: PathBuf,
    /// The source directory, as the kernel names it.
    pub lower: PathBuf,
    /// The tree the sandbox's root is made from, as this process opened it: the on-disk copy,
    /// or for an overlay the source (its lower layer).
    tree: OwnedFd,
    /// The on-disk copy (btrfs, reflink, copy): its path, its name and the holder directory
    /// it is in, open.
    disk: Option<Disk>,
    /// The source is a read-only btrfs subvolume: its pool is topped up after use.
    pub pool: Option<PoolKey>,
    discarded: bool,
    /// The process that made it: a forked child that drops its copy of the value leaves the
    /// snapshot alone.
    owner: u32,
}

/// An on-disk copy: removed through the holder's descriptor, not its path.
#[derive(Debug)]
struct Disk {
    path: PathBuf,
    holder: OwnedFd,
}

impl Disk {
    fn remove(&self) -> std::result::Result<(), (PathBuf, io::Error)> {
        let name = self.path.file_name().unwrap_or_default();
        tree::remove_tree_at(self.holder.as_fd(), name, &self.path)
    }
}

/// Where every sandbox mounts the root it will pivot into, each in its own mount namespace:
/// one shared, empty directory (`state_root()/.overlay`), so such a root has no state on the
/// host and nothing of it can be left behind. An overlay's tmpfs goes here, and with
/// `--private-users` the ID-mapped copy of an on-disk snapshot (its own path may be in a
/// directory only the host's root can enter).
pub fn mount_point() -> PathBuf {
    state_root().join(".overlay")
}

/// [`mount_point`], created if missing.
pub fn ensure_mount_point() -> Result<PathBuf> {
    let d = mount_point();
    if !statefile::is_dir(&d) {
        statefile::ensure_dir(&d, 0o755).map_err(|e| io_failed("cannot create", &d, e))?;
    }
    Ok(d)
}

/// The registry directory: `/run/bulkhead/sandbox`, or `$BULKHEAD_STATE_DIR` (tests).
pub fn state_root() -> PathBuf {
    bulkhead_sys::paths::sandbox_state_root()
}

impl Snapshot {
    /// The tree the sandbox's root is made from (see the field).
    pub fn tree(&self) -> &OwnedFd {
        &self.tree
    }

    /// Remove the copy and the registry entry. Idempotent; on failure the entry stays, so a
    /// later `clean_stale` (after this process is gone) tries again.
    pub fn discard(&mut self) -> Result<()> {
        if self.discarded {
            return Ok(());
        }
        if self.method == Method::Overlay {
            // Its tmpfs and overlay lived in the sandbox's mount namespace: nothing to remove.
            self.discarded = true;
            return Ok(());
        }
        if let Some(disk) = &self.disk {
            disk.remove().map_err(|(p, e)| {
                Error::failed(format!(
                    "cannot remove the {} snapshot {}: {}: {}",
                    self.method,
                    disk.path.display(),
                    p.display(),
                    errno_text(&e)
                ))
                .with_hint(
                    "stop what still uses it; the next `bulkhead spawn` removes it once this process has exited",
                )
            })?;
        }
        remove_entry(&self.state_dir).map_err(|e| {
            Error::failed(format!(
                "cannot remove the sandbox state {}: {}",
                self.state_dir.display(),
                errno_text(&e)
            ))
        })?;
        self.discarded = true;
        Ok(())
    }
}

impl Snapshot {
    /// For a snapshot from a read-only image's pool: remove it and top the pool up in a
    /// detached process, so the caller does not wait for either. The caller is expected to exit
    /// soon (bulkhead spawn does): the detached process is not waited for. Other snapshots are
    /// simply discarded.
    pub fn retire(&mut self) -> Result<()> {
        let (Some(key), Some(disk)) = (self.pool.clone(), self.disk.as_ref()) else {
            return self.discard();
        };
        if self.discarded {
            return Ok(());
        }
        let state = self.state_dir.clone();
        // The child owns the cleanup from here (with its copy of the holder's descriptor); if
        // it dies first, the entry's owner (this process) is gone soon after, and the next
        // start's clean_stale removes it.
        let started = detach(false, move || {
            let removed = disk.remove().is_ok() && remove_entry(&state).is_ok();
            key.fill().is_ok() && removed
        });
        if !started {
            return self.discard();
        }
        self.discarded = true;
        Ok(())
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if std::process::id() == self.owner {
            let _ = self.discard();
        }
    }
}

/// Remove an on-disk snapshot (a subvolume or a tree) at a recorded path, by directory
/// descriptors: the sandbox that used it cannot redirect the removal with symlinks, and its
/// directory is opened by the host path rule.
fn remove_snapshot(disk: &Path) -> std::result::Result<(), (PathBuf, io::Error)> {
    tree::remove_tree(disk)
}

/// `.#bulkhead-<base>-<pid>-<seq>`, the base cut to keep the name well under NAME_MAX.
pub(crate) fn snapshot_name(base: &OsStr, pid: u32, seq: u32) -> OsString {
    let b = base.as_bytes();
    let mut name = SNAPSHOT_PREFIX.as_bytes().to_vec();
    name.extend_from_slice(&b[..b.len().min(128)]);
    name.extend_from_slice(format!("-{pid}-{seq}").as_bytes());
    OsString::from_vec(name)
}

/// A snapshot path is ours when its name is `.#bulkhead-*-<pid>-<seq>` for its entry.
pub(crate) fn is_our_snapshot(p: &Path, pid: u32, seq: u32) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    p.is_absolute()
        && !p
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        && name.starts_with(SNAPSHOT_PREFIX)
        && name.len() > SNAPSHOT_PREFIX.len()
        && name.ends_with(&format!("-{pid}-{seq}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_and_the_ownership_check() {
        let n = snapshot_name(OsStr::new("busybox"), 12, 3);
        assert_eq!(n, ".#bulkhead-busybox-12-3");
        let long = "x".repeat(300);
        let n = snapshot_name(OsStr::new(&long), 1, 0);
        assert!(n.len() < 160);
        let ok = Path::new("/var/lib/bulkhead/images/.#bulkhead-busybox-12-3");
        assert!(is_our_snapshot(ok, 12, 3));
        assert!(!is_our_snapshot(ok, 12, 4));
        assert!(!is_our_snapshot(ok, 2, 3));
        assert!(!is_our_snapshot(
            Path::new("/var/lib/bulkhead/images/busybox"),
            12,
            3
        ));
        assert!(!is_our_snapshot(
            Path::new("relative/.#bulkhead-a-12-3"),
            12,
            3
        ));
        assert!(!is_our_snapshot(
            Path::new("/x/../.#bulkhead-a-12-3"),
            12,
            3
        ));
        assert!(!is_our_snapshot(Path::new("/"), 12, 3));
        assert!(!is_our_snapshot(
            Path::new("/x/.#bulkhead--12-3").parent().unwrap(),
            12,
            3
        ));
    }
}
