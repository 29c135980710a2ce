//! Choosing how to copy a root: btrfs snapshot, reflink, overlay, or a full copy, in that
//! order of cost; each refusal says why, for `spawn -v` and for `--snapshot METHOD`.

use super::ensure_mount_point;
use super::registry::Entry;
use super::{
    snapshot_name, state_root, Choice, Disk, Method, PoolKey, Snapshot, SNAPSHOT_DIR,
    SNAPSHOT_PREFIX,
};
use bulkhead_sys::btrfs::{self, BTRFS_MAGIC, FIRST_FREE_OBJECTID, XFS_MAGIC};
use bulkhead_sys::dir::private_dir_at;
use bulkhead_sys::error::{errno_text, io_failed, Diagnostic, Error, Result};
use bulkhead_sys::hostpath::{DirError, HostPath};
use bulkhead_sys::statfs::{fs_name, ino_and_magic};
use bulkhead_sys::tree::{copy_tree, remove_tree_at, CopyFail, CopyFrom};
use bulkhead_sys::trusted::open_trusted_dir;
use rustix::fs::{AtFlags, Mode, OFlags};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Make a writable copy of the directory `src` for one sandbox (opened here by the host path
/// rule, [`bulkhead_sys::hostpath`]).
pub fn create(src: &Path, choice: Choice) -> Result<Snapshot> {
    let opened = HostPath::open(src).map_err(|e| {
        Error::invalid(
            Diagnostic::error(format!("cannot use {} as ROOTFS: {e}", src.display())).hint(
                "give the directory of a root file system, or the name of an image (bulkhead image list)",
            ),
        )
    })?;
    create_from(&opened, choice)
}

/// Make a writable copy of the directory the caller opened as `src`: the copy is made from
/// that descriptor, never from its path again.
pub fn create_from(src: &HostPath, choice: Choice) -> Result<Snapshot> {
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
    /// What the kernel calls the source (messages, the copy's name and directory).
    pub(super) lower: PathBuf,
    /// The source, opened for reading (listing, btrfs ioctls).
    pub(super) fd: OwnedFd,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) magic: u32,
}

impl Source {
    fn open(src: &HostPath) -> Result<Source> {
        let lower = src.real_path();
        let bad = |e: io::Error| {
            Error::invalid(
                Diagnostic::error(format!(
                    "cannot use {} as ROOTFS: {}",
                    src.shown().display(),
                    errno_text(&e)
                ))
                .hint("give the directory of a root file system, or the name of an image (bulkhead image list)"),
            )
        };
        let fd = src.open_dir().map_err(bad)?;
        let (ino, magic) = ino_and_magic(&fd).map_err(|e| io_failed("cannot stat", &lower, e))?;
        Ok(Source {
            lower,
            fd,
            dev: src.stat().st_dev,
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
    if let Some(refusal) = refusal(src, method) {
        return Ok(Err(refusal));
    }
    match method {
        Method::Overlay => overlay(src, method).map(Ok),
        Method::Btrfs | Method::Reflink | Method::Copy => on_disk(src, method),
    }
}

/// Why `method` cannot work on this source at all, decided before anything is made.
fn refusal(src: &Source, method: Method) -> Option<Refusal> {
    let lower = src.lower.display();
    match method {
        Method::Btrfs if src.magic != BTRFS_MAGIC => Some(Refusal::new(
            format!("{} has no subvolumes", src.fs()),
            format!("ROOTFS {lower} is on {}, not btrfs: --snapshot btrfs needs a btrfs subvolume", src.fs()),
            format!("import it into the btrfs image store (bulkhead image store create --size 10G FILE; bulkhead image import {lower} NAME), or use --snapshot auto"),
        )),
        Method::Btrfs if src.ino != FIRST_FREE_OBJECTID => Some(Refusal::new(
            "ROOTFS is on btrfs but not a subvolume",
            format!("ROOTFS {lower} is a directory on btrfs, not a subvolume"),
            format!("make it a subvolume with bulkhead image import {lower} NAME, or use --snapshot reflink, which works on it as it is"),
        )),
        Method::Reflink if src.magic != XFS_MAGIC && src.magic != BTRFS_MAGIC => Some(Refusal::new(
            format!("{} cannot reflink", src.fs()),
            format!("ROOTFS {lower} is on {}, which cannot share extents (reflink needs XFS or btrfs)", src.fs()),
            format!("use --snapshot overlay or --snapshot copy, or import it into the btrfs image store (bulkhead image import {lower} NAME)"),
        )),
        Method::Overlay => overlay_refusal(),
        Method::Btrfs | Method::Reflink | Method::Copy => None,
    }
}

/// overlayfs is missing, or the state directory's path cannot be spelled in its options.
fn overlay_refusal() -> Option<Refusal> {
    if !overlay_available() {
        return Some(Refusal::new(
            "overlayfs is not available",
            "overlayfs is not available: it is not in /proc/filesystems and its module did not load".into(),
            "load it with modprobe overlay, or use --snapshot copy",
        ));
    }
    // The source is given as /proc/self/fd/N: only bulkhead's own directory is named
    // in the options.
    let bad = [',', ':', '\\'];
    let state = state_root();
    let text = state.to_string_lossy();
    let c = text.chars().find(|c| bad.contains(c))?;
    Some(Refusal::new(
        format!(
            "the path {} has '{c}', which overlayfs options cannot carry",
            state.display()
        ),
        format!(
            "{} contains '{c}', which overlayfs mount options cannot carry",
            state.display()
        ),
        "use a state directory without ',', ':' or '\\' (BULKHEAD_STATE_DIR), or --snapshot copy",
    ))
}

/// An overlay snapshot: its mount point is made now, the mount when the sandbox starts.
fn overlay(src: &Source, method: Method) -> Result<Snapshot> {
    let dir = ensure_mount_point()?;
    Ok(Snapshot {
        method,
        why: String::new(),
        root: dir.join("root"),
        state_dir: dir,
        lower: src.lower.clone(),
        tree: src
            .fd
            .try_clone()
            .map_err(|e| io_failed("cannot open", &src.lower, e))?,
        disk: None,
        pool: None,
        discarded: false,
        owner: std::process::id(),
    })
}

/// Btrfs, Reflink, Copy: an on-disk copy in the holder beside the source.
fn on_disk(src: &Source, method: Method) -> Result<std::result::Result<Snapshot, Refusal>> {
    let (Some(parent), Some(base)) = (src.lower.parent(), src.lower.file_name()) else {
        return Ok(Err(Refusal::new(
            "ROOTFS is /",
            format!("--snapshot {method} cannot copy / beside itself"),
            "give a root file system below /, e.g. an image (bulkhead image import)",
        )));
    };
    let parent_fd = match beside(src, parent, base, method)? {
        Ok(fd) => fd,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let holder = Holder::open(src, method, parent, parent_fd)?;
    // A leftover from a crash with the same PID may hold the name: take the next one.
    for _ in 0..64 {
        let (entry, disk) = Entry::new(|pid, seq| holder.path.join(snapshot_name(base, pid, seq)))?;
        let name = disk.file_name().unwrap_or_default().to_os_string();
        let err = match holder.make(&name, &disk) {
            Ok((tree, pooled)) => return Ok(Ok(holder.snapshot(entry, disk, tree, pooled))),
            Err(e) => e,
        };
        // Nothing of a failed attempt stays: the partial copy, then the entry.
        let taken = matches!(&err, CopyFail::At(p, _, e) if e.raw_os_error() == Some(libc::EEXIST) && p == &disk);
        if !taken {
            let _ = remove_tree_at(holder.fd.as_fd(), &name, &disk);
        }
        let _ = entry.remove();
        if !taken {
            return holder.failed(err);
        }
    }
    Err(Error::failed(format!(
        "cannot find a free snapshot name beside {}",
        src.lower.display()
    ))
    .with_hint(format!(
        "remove stale {SNAPSHOT_PREFIX}* directories in {}",
        holder.path.display()
    )))
}

/// The private directory beside the source that on-disk copies are made in.
struct Holder<'a> {
    src: &'a Source,
    method: Method,
    /// The source's directory, shown, and opened by [`beside`].
    parent: &'a Path,
    parent_fd: OwnedFd,
    /// The holder, shown, and opened.
    path: PathBuf,
    fd: OwnedFd,
    /// Btrfs only: the read-only source's pool of snapshots made ahead of time.
    pool: Option<PoolKey>,
}

impl<'a> Holder<'a> {
    fn open(src: &'a Source, method: Method, parent: &'a Path, parent_fd: OwnedFd) -> Result<Self> {
        let path = parent.join(SNAPSHOT_DIR);
        let fd = private_dir_at(parent_fd.as_fd(), OsStr::new(SNAPSHOT_DIR)).map_err(|e| {
            io_failed("cannot make the private snapshot directory", &path, e).with_hint(format!(
                "{} must be a directory of root's, or absent (bulkhead makes it, mode 0700)",
                path.display()
            ))
        })?;
        let pool = if method == Method::Btrfs {
            PoolKey::of(src, parent)
        } else {
            None
        };
        Ok(Holder {
            src,
            method,
            parent,
            parent_fd,
            path,
            fd,
            pool,
        })
    }

    /// Make the copy as `name` (`disk` when shown) and open it; true when the pool had it.
    fn make(&self, name: &OsStr, disk: &Path) -> std::result::Result<(OwnedFd, bool), CopyFail> {
        let mut pooled = false;
        let made = match self.method {
            Method::Btrfs
                if self
                    .pool
                    .as_ref()
                    .is_some_and(|k| k.claim(self.parent_fd.as_fd(), self.fd.as_fd(), name)) =>
            {
                pooled = true;
                Ok(())
            }
            Method::Btrfs => btrfs::snapshot_at(self.src.fd.as_fd(), self.fd.as_fd(), name)
                .map_err(|e| {
                    CopyFail::At(disk.to_path_buf(), "cannot create the btrfs snapshot", e)
                }),
            _ => copy_tree(
                &CopyFrom {
                    src: self.src.fd.as_fd(),
                    src_shown: &self.src.lower,
                    dst_parent: self.fd.as_fd(),
                    dst_name: name,
                    dst_shown: disk,
                },
                self.method == Method::Reflink,
                true,
            ),
        };
        made?;
        let tree = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| CopyFail::At(disk.to_path_buf(), "cannot open", e.into()))?;
        Ok((tree, pooled))
    }

    fn snapshot(self, entry: Entry, disk: PathBuf, tree: OwnedFd, pooled: bool) -> Snapshot {
        Snapshot {
            method: self.method,
            why: if pooled {
                "made ahead of time: ROOTFS is a read-only subvolume".into()
            } else {
                String::new()
            },
            state_dir: entry.file.clone(),
            root: disk.clone(),
            lower: self.src.lower.clone(),
            tree,
            disk: Some(Disk {
                path: disk,
                holder: self.fd,
            }),
            pool: self.pool,
            discarded: false,
            owner: entry.pid,
        }
    }

    /// A failed copy (its leftovers removed): a refusal where the method does not apply here.
    fn failed(&self, err: CopyFail) -> Result<std::result::Result<Snapshot, Refusal>> {
        let lower = self.src.lower.display();
        match err {
            CopyFail::NoReflink(e) => Ok(Err(no_reflink(self.src, e))),
            CopyFail::At(_, _, e) if e.raw_os_error() == Some(libc::EXDEV) => {
                Ok(Err(Refusal::new(
                    "ROOTFS is the top of a mount",
                    format!(
                        "ROOTFS {lower} is the top of a mounted file system, so --snapshot {} cannot place its copy beside it in {}",
                        self.method,
                        self.parent.display()
                    ),
                    "use a directory or subvolume below the mount point (bulkhead image import puts images there), or --snapshot overlay",
                )))
            }
            CopyFail::At(p, what, e) => Err(copy_error(&p, what, e, self.parent)),
        }
    }
}

/// The directory the copy is kept beside the source in, opened, when it is root's alone:
/// nobody but root can change what any component of its path names (each is root's, and
/// writable by nobody else unless sticky; symlinks followed only when root's). Beside a tree
/// in another user's directory, a copy the sandbox can fill with setuid binaries would be a
/// name that user could move, and the holder a name they could plant first: refused.
fn beside(
    src: &Source,
    parent: &Path,
    base: &OsStr,
    method: Method,
) -> Result<std::result::Result<OwnedFd, Refusal>> {
    let lower = src.lower.display();
    let fd = match open_trusted_dir(parent) {
        Ok(fd) => fd,
        Err(DirError::Untrusted { path, why }) => {
            return Ok(Err(Refusal::new(
                format!("its directory is not root's alone ({} {why})", path.display()),
                format!(
                    "--snapshot {method} keeps its copy beside ROOTFS {lower}, in {}, only where nobody but root can change that directory: {} {why}",
                    parent.display(),
                    path.display()
                ),
                format!("use --snapshot overlay (its copy lives in memory), or move ROOTFS into a directory of root's (bulkhead image import {lower} NAME does)"),
            )))
        }
        Err(e) => return Err(Error::failed(format!("cannot open the directory of ROOTFS {lower}: {e}"))),
    };
    // Still the source: the directory holds it under that name.
    let here = rustix::fs::statat(&fd, base, AtFlags::SYMLINK_NOFOLLOW).ok();
    if here.is_none_or(|st| (st.st_dev, st.st_ino) != (src.dev, src.ino)) {
        return Err(Error::failed(format!(
            "ROOTFS {lower} was moved or replaced while bulkhead opened it"
        ))
        .with_hint(
            "run the command again; if it keeps failing, something keeps renaming that directory",
        ));
    }
    Ok(Ok(fd))
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
