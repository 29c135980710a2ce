//! The snapshot pool of read-only btrfs images: snapshots made ahead of time, claimed by
//! rename at a start, refilled in the background. The pool lives beside its image, in a
//! directory that is root's alone (the one a snapshot's holder needs, see `choose`), and is
//! worked on through that directory's descriptor.

use super::choose::Source;
use super::{POOL_PREFIX, POOL_SIZE, POOL_TMP_PREFIX};
use bulkhead_sys::btrfs::{
    self, subvol_info, BTRFS_MAGIC, FIRST_FREE_OBJECTID, ROOT_SUBVOL_RDONLY,
};
use bulkhead_sys::dir::open_subdir;
use bulkhead_sys::hostpath::reopen_dir;
use bulkhead_sys::process::detach;
use bulkhead_sys::statefile::names_in;
use bulkhead_sys::tree::remove_tree_at;
use bulkhead_sys::trusted::open_trusted_dir;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// Which pool a read-only subvolume's snapshots go to. A change to the subvolume (made
/// writable, modified, made read-only again) changes its ctransid, and with it the key, so a
/// pooled snapshot never serves an older content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolKey {
    /// The image's directory (root's alone) and the image's name in it.
    parent: PathBuf,
    name: OsString,
    treeid: u64,
    ctransid: u64,
}

/// The names in the directory open as `dir` that start with `prefix`.
fn entries(dir: BorrowedFd<'_>, prefix: &str) -> Vec<OsString> {
    let Ok(list) = reopen_dir(dir) else {
        return Vec::new();
    };
    names_in(list.as_fd())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.to_str().is_some_and(|n| n.starts_with(prefix)))
        .collect()
}

impl PoolKey {
    /// The key of a read-only btrfs subvolume in `parent` (a directory that is root's alone);
    /// None for anything else.
    pub(super) fn of(src: &Source, parent: &Path) -> Option<PoolKey> {
        if src.magic != BTRFS_MAGIC || src.ino != FIRST_FREE_OBJECTID {
            return None;
        }
        let (treeid, flags, ctransid) = subvol_info(src.fd.as_raw_fd()).ok()?;
        if flags & ROOT_SUBVOL_RDONLY == 0 {
            return None;
        }
        Some(PoolKey {
            parent: parent.to_path_buf(),
            name: src.lower.file_name()?.to_os_string(),
            treeid,
            ctransid,
        })
    }
    fn prefix(&self) -> String {
        format!("{POOL_PREFIX}T{}.C{}.", self.treeid, self.ctransid)
    }
    /// Take a pooled snapshot from the image's directory `parent` by renaming it to `dest` in
    /// `holder` (atomic: two starts never get the same).
    pub(super) fn claim(
        &self,
        parent: BorrowedFd<'_>,
        holder: BorrowedFd<'_>,
        dest: &OsStr,
    ) -> bool {
        entries(parent, &self.prefix())
            .iter()
            .any(|n| rustix::fs::renameat(parent, n, holder, dest).is_ok())
    }
    /// Make snapshots until the pool holds [`POOL_SIZE`]; remove those of older contents.
    /// One filler per image at a time (a lock on the image's directory). The image's
    /// directory is opened again by its path: it must still be root's alone.
    pub(super) fn fill(&self) -> io::Result<()> {
        let dir = open_trusted_dir(&self.parent).map_err(|e| io::Error::other(e.to_string()))?;
        let dir = reopen_dir(dir.as_fd())?;
        let src = open_subdir(dir.as_fd(), &self.name)?;
        if !bulkhead_sys::process::lock_file(&src, false).unwrap_or(false) {
            return Ok(());
        }
        let (treeid, flags, ctransid) = subvol_info(src.as_raw_fd())?;
        let live = format!("{POOL_PREFIX}T{treeid}.C{ctransid}.");
        let read_only = flags & ROOT_SUBVOL_RDONLY != 0;
        let ours = format!("{POOL_PREFIX}T{treeid}.");
        let tmp = format!("{POOL_TMP_PREFIX}T{treeid}.");
        // Leftovers of an interrupted filler (we hold the lock), and snapshots of an older
        // content or of an image that is writable now.
        let stale = entries(dir.as_fd(), &ours)
            .into_iter()
            .chain(entries(dir.as_fd(), &tmp));
        for n in stale {
            let name = n.to_str().unwrap_or_default();
            if !read_only || name.starts_with(&tmp) || !name.starts_with(&live) {
                let _ = remove_tree_at(dir.as_fd(), &n, &self.parent.join(&n));
            }
        }
        if !read_only || treeid != self.treeid {
            return Ok(());
        }
        // Labelled with what the image is now (its ctransid can move once after it was made
        // read-only, without a change of content); a start only takes a snapshot whose label
        // matches the image's ctransid at that moment.
        let mut have = entries(dir.as_fd(), &live).len();
        let mut n = 0;
        while have < POOL_SIZE {
            let id = format!("T{treeid}.C{ctransid}.{}.{n}", std::process::id());
            let t = format!("{POOL_TMP_PREFIX}{id}");
            btrfs::snapshot_at(src.as_fd(), dir.as_fd(), OsStr::new(&t))?;
            rustix::fs::renameat(&dir, &t, &dir, format!("{POOL_PREFIX}{id}"))?;
            have += 1;
            n += 1;
        }
        Ok(())
    }
}

/// Top up the pool in a detached process, so the caller does not wait for the snapshots'
/// transaction commits.
pub fn refill_pool(key: &PoolKey) {
    let key = key.clone();
    detach(true, move || key.fill().is_ok());
}

/// Remove every pooled snapshot of the subvolume `name` in the directory open (for reading) as
/// `dir` (before the image is removed); `dir_path` names that directory in messages.
pub fn drop_pool_at(dir: BorrowedFd<'_>, dir_path: &Path, name: &OsStr) {
    let Ok(src) = open_subdir(dir, name) else {
        return;
    };
    let Ok((treeid, _, _)) = subvol_info(src.as_raw_fd()) else {
        return;
    };
    let ours = entries(dir, &format!("{POOL_PREFIX}T{treeid}."))
        .into_iter()
        .chain(entries(dir, &format!("{POOL_TMP_PREFIX}T{treeid}.")));
    for n in ours {
        let _ = remove_tree_at(dir, &n, &dir_path.join(&n));
    }
}
