//! Choosing how to copy a root: btrfs snapshot, reflink, overlay, or a full copy, in that
//! order of cost; each refusal says why, for `spawn -v` and for `--snapshot METHOD`.

use super::ensure_mount_point;
use super::registry::Entry;
use super::{
    remove_snapshot, snapshot_name, state_root, Choice, Method, PoolKey, Snapshot, SNAPSHOT_DIR,
    SNAPSHOT_PREFIX,
};
use bulkhead_sys::btrfs::{self, BTRFS_MAGIC, FIRST_FREE_OBJECTID, XFS_MAGIC};
use bulkhead_sys::dir::private_dir;
use bulkhead_sys::error::{errno_text, io_failed, Diagnostic, Error, Result};
use bulkhead_sys::statfs::{fs_name, ino_and_magic};
use bulkhead_sys::tree::{copy_tree, open_dir, CopyFail};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Make a writable copy of `src` for one sandbox.
pub fn create(src: &Path, choice: Choice) -> Result<Snapshot> {
    let source = Source::open(src)?;
    match choice {
        Choice::Only(m) => match attempt(&source, m)? {
            Ok(mut s) => {
                s.why = match s.why.as_str() {
                    "" => format!("--snapshot {m}"),
                    pooled => format!("--snapshot {m}; {pooled}"),
                };
                Ok(s)
            }
            Err(refusal) => Err(refusal.error),
        },
        Choice::Auto => auto(&source),
    }
}

pub(super) struct Source {
    pub(super) lower: PathBuf,
    pub(super) fd: OwnedFd,
    pub(super) ino: u64,
    pub(super) magic: u32,
}

impl Source {
    fn open(src: &Path) -> Result<Source> {
        let bad = |what: String| {
            Error::invalid(Diagnostic::error(what).hint(
                "give the directory of a root file system, or the name of an image (bulkhead image list)",
            ))
        };
        let lower = std::fs::canonicalize(src).map_err(|e| {
            bad(format!(
                "cannot use {} as ROOTFS: {}",
                src.display(),
                errno_text(&e)
            ))
        })?;
        let fd = open_dir(&lower).map_err(|e| {
            bad(format!(
                "cannot use {} as ROOTFS: {}",
                src.display(),
                errno_text(&e)
            ))
        })?;
        let (ino, magic) = ino_and_magic(&fd).map_err(|e| io_failed("cannot stat", &lower, e))?;
        Ok(Source {
            lower,
            fd,
            ino,
            magic,
        })
    }

    fn fs(&self) -> String {
        fs_name(self.magic)
    }
}

/// Why a method cannot be used here: a short reason for Auto's `why`, the full error for
/// `Only`.
struct Refusal {
    reason: String,
    error: Error,
}

impl Refusal {
    fn new(reason: impl Into<String>, message: String, hint: impl Into<String>) -> Refusal {
        Refusal {
            reason: reason.into(),
            error: Error::invalid(Diagnostic::error(message).hint(hint)),
        }
    }
}

fn auto(src: &Source) -> Result<Snapshot> {
    let mut why_not: Vec<String> = Vec::new();
    if src.magic == BTRFS_MAGIC && src.ino == FIRST_FREE_OBJECTID {
        match attempt(src, Method::Btrfs)? {
            Ok(mut s) => {
                s.why = match s.why.as_str() {
                    "" => "ROOTFS is a btrfs subvolume".into(),
                    pooled => format!("ROOTFS is a btrfs subvolume; {pooled}"),
                };
                return Ok(s);
            }
            Err(r) => why_not.push(r.reason),
        }
    }
    match attempt(src, Method::Reflink)? {
        Ok(mut s) => {
            s.why = if src.magic == BTRFS_MAGIC && why_not.is_empty() {
                "ROOTFS is on btrfs but not a subvolume: reflink copy".into()
            } else {
                why_not.push(format!("ROOTFS is on {}", src.fs()));
                format!("{}: reflink copy", why_not.join(", "))
            };
            return Ok(s);
        }
        Err(r) => why_not.push(r.reason),
    }
    match attempt(src, Method::Overlay)? {
        Ok(mut s) => {
            s.why = format!(
                "{}: overlayfs with the upper layer on tmpfs",
                why_not.join(", ")
            );
            Ok(s)
        }
        Err(r) => {
            why_not.push(r.reason);
            Err(Error::invalid(
                Diagnostic::error(format!(
                    "no snapshot method works for ROOTFS {}: {}",
                    src.lower.display(),
                    why_not.join("; ")
                ))
                .hint("--snapshot copy makes a full copy; or import it into the btrfs image store (bulkhead image import)"),
            ))
        }
    }
}

/// Try one method. `Ok(Err(_))`: this method does not apply here (nothing was left behind);
/// `Err(_)`: it applied and failed.
fn attempt(src: &Source, method: Method) -> Result<std::result::Result<Snapshot, Refusal>> {
    let lower = src.lower.display();
    match method {
        Method::Btrfs => {
            if src.magic != BTRFS_MAGIC {
                return Ok(Err(Refusal::new(
                    format!("{} has no subvolumes", src.fs()),
                    format!("ROOTFS {lower} is on {}, not btrfs: --snapshot btrfs needs a btrfs subvolume", src.fs()),
                    format!("import it into the btrfs image store (bulkhead image store create --size 10G FILE; bulkhead image import {lower} NAME), or use --snapshot auto"),
                )));
            }
            if src.ino != FIRST_FREE_OBJECTID {
                return Ok(Err(Refusal::new(
                    "ROOTFS is on btrfs but not a subvolume",
                    format!("ROOTFS {lower} is a directory on btrfs, not a subvolume"),
                    format!("make it a subvolume with bulkhead image import {lower} NAME, or use --snapshot reflink, which works on it as it is"),
                )));
            }
        }
        Method::Reflink => {
            if src.magic != XFS_MAGIC && src.magic != BTRFS_MAGIC {
                return Ok(Err(Refusal::new(
                    format!("{} cannot reflink", src.fs()),
                    format!("ROOTFS {lower} is on {}, which cannot share extents (reflink needs XFS or btrfs)", src.fs()),
                    format!("use --snapshot overlay or --snapshot copy, or import it into the btrfs image store (bulkhead image import {lower} NAME)"),
                )));
            }
        }
        Method::Overlay => {
            if !overlay_available() {
                return Ok(Err(Refusal::new(
                    "overlayfs is not available",
                    "overlayfs is not available: it is not in /proc/filesystems and its module did not load".into(),
                    "load it with modprobe overlay, or use --snapshot copy",
                )));
            }
            let bad = [',', ':', '\\'];
            let state = state_root();
            for p in [&src.lower, &state] {
                let text = p.to_string_lossy();
                if let Some(c) = text.chars().find(|c| bad.contains(c)) {
                    return Ok(Err(Refusal::new(
                        format!("the path {} has '{c}', which overlayfs options cannot carry", p.display()),
                        format!("{} contains '{c}', which overlayfs mount options cannot carry", p.display()),
                        "use a path without ',', ':' or '\\' (a bind mount or symlink of it works), or --snapshot copy",
                    )));
                }
            }
            let dir = ensure_mount_point()?;
            return Ok(Ok(Snapshot {
                method,
                why: String::new(),
                root: dir.join("root"),
                state_dir: dir,
                lower: src.lower.clone(),
                disk: None,
                pool: None,
                discarded: false,
                owner: std::process::id(),
            }));
        }
        Method::Copy => {}
    }
    // Btrfs, Reflink, Copy: an on-disk sibling of the source.
    let (Some(parent), Some(base)) = (src.lower.parent(), src.lower.file_name()) else {
        return Ok(Err(Refusal::new(
            "ROOTFS is /",
            format!("--snapshot {method} cannot copy / beside itself"),
            "give a root file system below /, e.g. an image (bulkhead image import)",
        )));
    };
    let pool = if method == Method::Btrfs {
        PoolKey::of(src)
    } else {
        None
    };
    let holder = parent.join(SNAPSHOT_DIR);
    private_dir(&holder).map_err(|e| {
        io_failed("cannot make the private snapshot directory", &holder, e).with_hint(format!(
            "{} must be a directory of root's, or absent (bulkhead makes it, mode 0700)",
            holder.display()
        ))
    })?;
    // A leftover from a crash with the same PID may hold the name: take the next one.
    for _ in 0..64 {
        let (entry, disk) = Entry::new(|pid, seq| holder.join(snapshot_name(base, pid, seq)))?;
        let mut pooled = false;
        let made = match method {
            Method::Btrfs if pool.as_ref().is_some_and(|k| k.claim(&disk)) => {
                pooled = true;
                Ok(())
            }
            Method::Btrfs => btrfs::snapshot(src.fd.as_raw_fd(), &disk)
                .map_err(|e| CopyFail::At(disk.clone(), "cannot create the btrfs snapshot", e)),
            _ => copy_tree(&src.lower, &disk, method == Method::Reflink, true),
        };
        let err = match made {
            Ok(()) => {
                return Ok(Ok(Snapshot {
                    method,
                    why: if pooled {
                        "made ahead of time: ROOTFS is a read-only subvolume".into()
                    } else {
                        String::new()
                    },
                    state_dir: entry.file.clone(),
                    root: disk.clone(),
                    lower: src.lower.clone(),
                    disk: Some(disk),
                    pool,
                    discarded: false,
                    owner: entry.pid,
                }))
            }
            Err(e) => e,
        };
        // Nothing of a failed attempt stays: the partial copy, then the entry.
        let exists = matches!(&err, CopyFail::At(p, _, e) if e.raw_os_error() == Some(libc::EEXIST) && p == &disk);
        if !exists {
            let _ = remove_snapshot(&disk);
        }
        let _ = entry.remove();
        if exists {
            continue;
        }
        return match err {
            CopyFail::NoReflink(e) => Ok(Err(no_reflink(src, e))),
            CopyFail::At(_, _, e) if e.raw_os_error() == Some(libc::EXDEV) => {
                Ok(Err(Refusal::new(
                    "ROOTFS is the top of a mount",
                    format!(
                        "ROOTFS {lower} is the top of a mounted file system, so --snapshot {method} cannot place its copy beside it in {}",
                        parent.display()
                    ),
                    "use a directory or subvolume below the mount point (bulkhead image import puts images there), or --snapshot overlay",
                )))
            }
            CopyFail::At(p, what, e) => Err(copy_error(&p, what, e, parent)),
        };
    }
    Err(
        Error::failed(format!("cannot find a free snapshot name beside {lower}")).with_hint(
            format!(
                "remove stale {SNAPSHOT_PREFIX}* directories in {}",
                parent.display()
            ),
        ),
    )
}

fn copy_error(path: &Path, what: &str, e: io::Error, parent: &Path) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::failed(format!(
            "the file system holding {} is full (while copying {})",
            parent.display(),
            path.display()
        ))
        .with_hint("free some space there, or use --snapshot overlay, which writes to memory"),
        _ => Error::failed(format!("{what} {}: {}", path.display(), errno_text(&e))),
    }
}

/// The first FICLONE failed: this file system cannot reflink. Not remembered: a device can
/// be formatted anew, and a failed trial costs little (the directories made up to the first
/// file with data).
fn no_reflink(src: &Source, e: io::Error) -> Refusal {
    let lower = src.lower.display();
    if src.magic == XFS_MAGIC {
        Refusal::new(
            "xfs without reflink",
            format!("ROOTFS {lower} is on an XFS file system made without reflink (FICLONE: {})", errno_text(&e)),
            "mkfs.xfs -m reflink=1 makes one with it (the default since xfsprogs 5.1); or use --snapshot overlay or --snapshot copy",
        )
    } else {
        Refusal::new(
            format!("{} refused FICLONE ({})", src.fs(), errno_text(&e)),
            format!(
                "{} refused to reflink the files of ROOTFS {lower}: {}",
                src.fs(),
                errno_text(&e)
            ),
            "use --snapshot overlay or --snapshot copy",
        )
    }
}

static OVERLAY_SEEN: AtomicBool = AtomicBool::new(false);

/// The kernel has overlay: listed in /proc/filesystems, or its module loads on request (a
/// fresh host lists it only after the first overlay mount). A yes is remembered; a no is asked
/// again, as the module may be loaded meanwhile.
fn overlay_available() -> bool {
    if OVERLAY_SEEN.load(Ordering::Relaxed) {
        return true;
    }
    let yes = bulkhead_sys::statfs::filesystem_available("overlay");
    if yes {
        OVERLAY_SEEN.store(true, Ordering::Relaxed);
    }
    yes
}
