//! The snapshot pool of read-only btrfs images: snapshots made ahead of time, claimed by
//! rename at a start, refilled in the background.

use super::choose::Source;
use super::{remove_snapshot, POOL_PREFIX, POOL_SIZE, POOL_TMP_PREFIX};
use bulkhead_sys::btrfs::{
    self, subvol_info, BTRFS_MAGIC, FIRST_FREE_OBJECTID, ROOT_SUBVOL_RDONLY,
};
use bulkhead_sys::process::detach;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Which pool a read-only subvolume's snapshots go to. A change to the subvolume (made
/// writable, modified, made read-only again) changes its ctransid, and with it the key, so a
/// pooled snapshot never serves an older content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolKey {
    src: PathBuf,
    parent: PathBuf,
    treeid: u64,
    ctransid: u64,
}

impl PoolKey {
    /// The key of a read-only btrfs subvolume; None for anything else.
    pub(super) fn of(src: &Source) -> Option<PoolKey> {
        if src.magic != BTRFS_MAGIC || src.ino != FIRST_FREE_OBJECTID {
            return None;
        }
        let (treeid, flags, ctransid) = subvol_info(src.fd.as_raw_fd()).ok()?;
        if flags & ROOT_SUBVOL_RDONLY == 0 {
            return None;
        }
        Some(PoolKey {
            src: src.lower.clone(),
            parent: src.lower.parent()?.to_path_buf(),
            treeid,
            ctransid,
        })
    }
    fn prefix(&self) -> String {
        format!("{POOL_PREFIX}T{}.C{}.", self.treeid, self.ctransid)
    }
    fn entries(&self, prefix: &str) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(&self.parent) else {
            return Vec::new();
        };
        rd.flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .map(|e| e.path())
            .collect()
    }
    /// Take a pooled snapshot by renaming it to `dest` (atomic: two starts never get the same).
    pub(super) fn claim(&self, dest: &Path) -> bool {
        self.entries(&self.prefix())
            .iter()
            .any(|p| std::fs::rename(p, dest).is_ok())
    }
    /// Make snapshots until the pool holds [`POOL_SIZE`]; remove those of older contents.
    /// One filler per image at a time (a lock on the image's directory).
    pub(super) fn fill(&self) -> io::Result<()> {
        let src = std::fs::File::open(&self.src)?;
        if rustix::fs::flock(&src, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(());
        }
        let (treeid, flags, ctransid) = subvol_info(src.as_raw_fd())?;
        let live = format!("{POOL_PREFIX}T{treeid}.C{ctransid}.");
        let read_only = flags & ROOT_SUBVOL_RDONLY != 0;
        let ours = format!("{POOL_PREFIX}T{treeid}.");
        let tmp = format!("{POOL_TMP_PREFIX}T{treeid}.");
        // Leftovers of an interrupted filler (we hold the lock), and snapshots of an older
        // content or of an image that is writable now.
        for p in self.entries(&ours).into_iter().chain(self.entries(&tmp)) {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if !read_only || name.starts_with(&tmp) || !name.starts_with(&live) {
                let _ = remove_snapshot(&p);
            }
        }
        if !read_only || treeid != self.treeid {
            return Ok(());
        }
        // Labelled with what the image is now (its ctransid can move once after it was made
        // read-only, without a change of content); a start only takes a snapshot whose label
        // matches the image's ctransid at that moment.
        let live_key = PoolKey {
            ctransid,
            ..self.clone()
        };
        let mut have = live_key.entries(&live_key.prefix()).len();
        let mut n = 0;
        while have < POOL_SIZE {
            let id = format!("T{treeid}.C{ctransid}.{}.{n}", std::process::id());
            let t = self.parent.join(format!("{POOL_TMP_PREFIX}{id}"));
            btrfs::snapshot(src.as_raw_fd(), &t)?;
            std::fs::rename(&t, self.parent.join(format!("{POOL_PREFIX}{id}")))?;
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

/// Remove every pooled snapshot of the subvolume at `src` (before the image is removed).
pub fn drop_pool(src: &Path) {
    let (Ok(f), Some(parent)) = (std::fs::File::open(src), src.parent()) else {
        return;
    };
    let Ok((treeid, _, _)) = subvol_info(f.as_raw_fd()) else {
        return;
    };
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n.starts_with(&format!("{POOL_PREFIX}T{treeid}."))
            || n.starts_with(&format!("{POOL_TMP_PREFIX}T{treeid}."))
        {
            let _ = remove_snapshot(&e.path());
        }
    }
}
