//! Writable throw-away copies of a root file system, one per ephemeral sandbox.
//!
//! [`create`] takes the cheapest method the source's file system allows: a btrfs snapshot of
//! a subvolume (one ioctl), a reflink copy on XFS or btrfs (shared extents, one FICLONE per
//! file), or an overlay whose upper layer lives on a tmpfs the sandbox mounts itself. A full
//! copy is made only when asked for. On-disk copies are hidden siblings of the source, as
//! systemd-nspawn places its own: `<parent>/.#bulkhead-<name>-<pid>-<seq>`.
//!
//! Every snapshot has a registry entry, `state_root()/<pid>-<seq>`, holding `owner`
//! (`<pid> <start time>`, so a reused PID is told apart) and `snapshot` (the on-disk path,
//! written before the copy exists). Whatever kills the owner, [`clean_stale`] finds the entry
//! and removes what it names.

pub use bulkhead_plan::sandbox::{Choice, Method};
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Where the registry lives unless `BULKHEAD_STATE_DIR` says otherwise.
pub const DEFAULT_STATE_ROOT: &str = "/run/bulkhead/sandbox";
/// The start of every on-disk snapshot's name; nothing else is ever removed by name.
pub const SNAPSHOT_PREFIX: &str = ".#bulkhead-";

/// Snapshots of a read-only btrfs image made ahead of time, beside it:
/// `.#bulkhead-pool.T<subvolume id>.C<its ctransid>.<pid>.<n>`. A start takes one with a
/// rename instead of waiting for a snapshot's transaction commit.
pub const POOL_PREFIX: &str = ".#bulkhead-pool.";
/// A pooled snapshot being made (renamed to POOL_PREFIX when complete).
const POOL_TMP_PREFIX: &str = ".#bulkhead-pooltmp.";
/// How many snapshots a read-only image keeps ready.
pub const POOL_SIZE: usize = 2;
pub(crate) const BTRFS_MAGIC: u32 = 0x9123_683e;
pub(crate) const XFS_MAGIC: u32 = 0x5846_5342;
/// The inode number of every btrfs subvolume's root directory.
const BTRFS_FIRST_FREE_OBJECTID: u64 = 256;

/// `_IOW(ty, nr, size)` as <asm-generic/ioctl.h> computes it.
const fn iow(ty: u32, nr: u32, size: usize) -> u32 {
    (1 << 30) | ((size as u32) << 16) | (ty << 8) | nr
}
// <linux/btrfs.h>: BTRFS_IOCTL_MAGIC 0x94.
const BTRFS_IOC_SUBVOL_CREATE: u32 = 0x5000_940e; // struct btrfs_ioctl_vol_args
const BTRFS_IOC_SNAP_DESTROY: u32 = 0x5000_940f; // struct btrfs_ioctl_vol_args
const BTRFS_IOC_SNAP_CREATE_V2: u32 = 0x5000_9417; // struct btrfs_ioctl_vol_args_v2
/// _IOR(0x94, 60, struct btrfs_ioctl_get_subvol_info_args), 504 bytes (Linux 4.18+).
const BTRFS_IOC_GET_SUBVOL_INFO: u32 = 0x81f8_943c;
const SUBVOL_INFO_SIZE: usize = 504;
/// BTRFS_ROOT_SUBVOL_RDONLY in the root item's flags.
const ROOT_SUBVOL_RDONLY: u64 = 1;
const _: () = assert!(iow(0x94, 14, size_of::<VolArgs>()) == BTRFS_IOC_SUBVOL_CREATE);
const _: () = assert!(iow(0x94, 15, size_of::<VolArgs>()) == BTRFS_IOC_SNAP_DESTROY);
const _: () = assert!(iow(0x94, 23, size_of::<VolArgsV2>()) == BTRFS_IOC_SNAP_CREATE_V2);

/// struct btrfs_ioctl_vol_args: 4096 bytes.
#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; 4088],
}

/// struct btrfs_ioctl_vol_args_v2: 4096 bytes (the union after `flags` is unused here).
#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; 4040],
}

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
    /// The canonical source directory.
    pub lower: PathBuf,
    /// The on-disk copy (btrfs, reflink, copy).
    disk: Option<PathBuf>,
    /// The source is a read-only btrfs subvolume: its pool is topped up after use.
    pub pool: Option<PoolKey>,
    discarded: bool,
    /// The process that made it: a forked child that drops its copy of the value leaves the
    /// snapshot alone.
    owner: u32,
}

/// The registry directory: `/run/bulkhead/sandbox`, or `$BULKHEAD_STATE_DIR` (tests).
pub fn state_root() -> PathBuf {
    match std::env::var_os("BULKHEAD_STATE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_STATE_ROOT),
    }
}

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

impl Snapshot {
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
            remove_snapshot(disk, self.method == Method::Btrfs).map_err(|(p, e)| {
                Error::failed(format!(
                    "cannot remove the {} snapshot {}: {}: {}",
                    self.method,
                    disk.display(),
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
        let (Some(key), Some(disk)) = (self.pool.clone(), self.disk.clone()) else {
            return self.discard();
        };
        if self.discarded {
            return Ok(());
        }
        let state = self.state_dir.clone();
        // The child owns the cleanup from here; if it dies first, the entry's owner (this
        // process) is gone soon after, and the next start's clean_stale removes it.
        let started = detach(false, move || {
            let removed = remove_snapshot(&disk, true).is_ok() && remove_entry(&state).is_ok();
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

// ---------------------------------------------------------------------------------------
// Choosing and making

struct Source {
    lower: PathBuf,
    fd: OwnedFd,
    ino: u64,
    magic: u32,
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
        // SAFETY: plain fstat/fstatfs into zeroed buffers on an open descriptor.
        let (ino, magic) = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            let mut sf: libc::statfs = std::mem::zeroed();
            if libc::fstat(fd.as_raw_fd(), &mut st) != 0
                || libc::fstatfs(fd.as_raw_fd(), &mut sf) != 0
            {
                let e = io::Error::last_os_error();
                return Err(bulkhead_sys::error::io_failed("cannot stat", &lower, e));
            }
            (st.st_ino, sf.f_type as u32)
        };
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
    if src.magic == BTRFS_MAGIC && src.ino == BTRFS_FIRST_FREE_OBJECTID {
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
            if src.ino != BTRFS_FIRST_FREE_OBJECTID {
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
                    "overlayfs is not available: it is not in /proc/filesystems".into(),
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
            let dir = overlay_mount_point()?;
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
    // A leftover from a crash with the same PID may hold the name: take the next one.
    for _ in 0..64 {
        let (entry, disk) = Entry::new(|pid, seq| parent.join(snapshot_name(base, pid, seq)))?;
        let mut pooled = false;
        let made = match method {
            Method::Btrfs if pool.as_ref().is_some_and(|k| k.claim(&disk)) => {
                pooled = true;
                Ok(())
            }
            Method::Btrfs => btrfs_snapshot(src.fd.as_raw_fd(), &disk)
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
            let _ = remove_snapshot(&disk, method == Method::Btrfs);
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

/// Where every overlay sandbox mounts its tmpfs (upper layer) and its overlay, each in its own
/// mount namespace: one shared, empty directory, so an overlay snapshot has no state on the
/// host at all and nothing of it can be left behind.
fn overlay_mount_point() -> Result<PathBuf> {
    let d = state_root().join(".overlay");
    if !d.is_dir() {
        std::fs::create_dir_all(&d)
            .map_err(|e| bulkhead_sys::error::io_failed("cannot create", &d, e))?;
    }
    Ok(d)
}

// ---------------------------------------------------------------------------------------
// The snapshot pool of read-only btrfs images

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

/// (subvolume id, root item flags, ctransid) of the subvolume `fd` is the root of.
fn subvol_info(fd: RawFd) -> io::Result<(u64, u64, u64)> {
    let mut buf = vec![0u8; SUBVOL_INFO_SIZE];
    ioctl(fd, BTRFS_IOC_GET_SUBVOL_INFO, buf.as_mut_ptr().cast())?;
    let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().unwrap());
    Ok((u64_at(0), u64_at(288), u64_at(344)))
}

impl PoolKey {
    /// The key of a read-only btrfs subvolume; None for anything else.
    fn of(src: &Source) -> Option<PoolKey> {
        if src.magic != BTRFS_MAGIC || src.ino != BTRFS_FIRST_FREE_OBJECTID {
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
    fn claim(&self, dest: &Path) -> bool {
        self.entries(&self.prefix())
            .iter()
            .any(|p| std::fs::rename(p, dest).is_ok())
    }
    /// Make snapshots until the pool holds [`POOL_SIZE`]; remove those of older contents.
    /// One filler per image at a time (a lock on the image's directory).
    fn fill(&self) -> io::Result<()> {
        let src = std::fs::File::open(&self.src)?;
        if unsafe { libc::flock(src.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
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
                let _ = remove_snapshot(&p, true);
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
            btrfs_snapshot(src.as_raw_fd(), &t)?;
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

/// Run `work` in a process of its own session with stdio on /dev/null, and return at once
/// (false when it could not be forked). With `reap`, it runs as a grandchild (the
/// intermediate child is waited for), so a long-lived caller keeps no zombie; without,
/// it is a child that the caller's exit hands to init (bulkhead spawn exits right after).
/// Callers are single-threaded (bulkhead spawn) or only call async-signal-safe code and
/// their own single-threaded work in the child.
fn detach(reap: bool, work: impl FnOnce() -> bool) -> bool {
    // SAFETY: the child only sets up its session and stdio, runs `work` and _exits.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid > 0 {
            if reap {
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            return true;
        }
        libc::setsid();
        if reap && libc::fork() != 0 {
            libc::_exit(0);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        libc::_exit(if work() { 0 } else { 1 })
    }
}

/// Make the subvolume at `path` read-only (BTRFS_IOC_SUBVOL_SETFLAGS): an image then gets a
/// pool of snapshots made ahead of time.
pub fn set_read_only(path: &Path) -> io::Result<()> {
    // _IOW(0x94, 26, __u64); BTRFS_SUBVOL_RDONLY is bit 1 in this ioctl's flags.
    const BTRFS_IOC_SUBVOL_SETFLAGS: u32 = 0x4008_941a;
    let f = std::fs::File::open(path)?;
    let mut flags: u64 = 1 << 1;
    ioctl(
        f.as_raw_fd(),
        BTRFS_IOC_SUBVOL_SETFLAGS,
        (&mut flags as *mut u64).cast(),
    )
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
            let _ = remove_snapshot(&e.path(), true);
        }
    }
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

/// overlay is in /proc/filesystems (a yes is remembered; a no is asked again, as the module
/// may be loaded meanwhile).
fn overlay_available() -> bool {
    if OVERLAY_SEEN.load(Ordering::Relaxed) {
        return true;
    }
    let yes = std::fs::read_to_string("/proc/filesystems")
        .map(|t| {
            t.lines()
                .any(|l| l.split_whitespace().last() == Some("overlay"))
        })
        .unwrap_or(false);
    if yes {
        OVERLAY_SEEN.store(true, Ordering::Relaxed);
    }
    yes
}

/// `.#bulkhead-<base>-<pid>-<seq>`, the base cut to keep the name well under NAME_MAX.
fn snapshot_name(base: &OsStr, pid: u32, seq: u32) -> OsString {
    let b = base.as_bytes();
    let mut name = SNAPSHOT_PREFIX.as_bytes().to_vec();
    name.extend_from_slice(&b[..b.len().min(128)]);
    name.extend_from_slice(format!("-{pid}-{seq}").as_bytes());
    OsString::from_vec(name)
}

/// A snapshot path is ours when its name is `.#bulkhead-*-<pid>-<seq>` for its entry.
fn is_our_snapshot(p: &Path, pid: u32, seq: u32) -> bool {
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

fn fs_name(magic: u32) -> String {
    match magic {
        0xef53 => "ext4",
        XFS_MAGIC => "xfs",
        BTRFS_MAGIC => "btrfs",
        0x0102_1994 => "tmpfs",
        0x794c_7630 => "overlayfs",
        0x2fc1_2fc1 => "zfs",
        0x6969 => "nfs",
        0xf2f5_2010 => "f2fs",
        0x7371_7368 => "squashfs",
        0x6573_5546 => "fuse",
        0x8584_58f6 => "ramfs",
        0x4d44 => "vfat",
        0xff53_4d42 | 0xfe53_4d42 => "cifs",
        other => return format!("a file system of type {other:#x}"),
    }
    .to_string()
}

// ---------------------------------------------------------------------------------------
// The registry

static SEQ: AtomicU32 = AtomicU32::new(0);
static SELF_PID: AtomicU64 = AtomicU64::new(0);
static SELF_START: AtomicU64 = AtomicU64::new(0);

/// This process's start time (field 22 of /proc/self/stat), read once per process.
fn self_start(pid: u32) -> u64 {
    if SELF_PID.load(Ordering::Acquire) == pid as u64 {
        return SELF_START.load(Ordering::Relaxed);
    }
    let start = proc_start(pid).unwrap_or(0);
    SELF_START.store(start, Ordering::Relaxed);
    SELF_PID.store(pid as u64, Ordering::Release);
    start
}

/// Field 22 (starttime, clock ticks after boot) of /proc/PID/stat.
fn proc_start(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_start(&text)
}

fn parse_stat_start(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

struct Entry {
    /// The registry file `<state_root>/<pid>-<seq>`.
    file: PathBuf,
    pid: u32,
}

impl Entry {
    /// Create `<pid>-<seq>` (never reusing one) holding the owner and the path of the copy
    /// `disk(pid, seq)` will make: the path is recorded before the copy exists, so a crash at
    /// any point leaves a trace. One file, made with O_EXCL: a single metadata operation.
    fn new(disk: impl Fn(u32, u32) -> PathBuf) -> Result<(Entry, PathBuf)> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let root = state_root();
        let pid = std::process::id();
        let mut made_root = false;
        loop {
            let seq = SEQ.fetch_add(1, Ordering::Relaxed);
            let file = root.join(format!("{pid}-{seq}"));
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&file);
            match opened {
                Ok(mut f) => {
                    let path = disk(pid, seq);
                    let mut text = format!("{pid} {}\n", self_start(pid)).into_bytes();
                    text.extend_from_slice(path.as_os_str().as_bytes());
                    if let Err(e) = f.write_all(&text) {
                        let _ = std::fs::remove_file(&file);
                        return Err(bulkhead_sys::error::io_failed(
                            "cannot write the sandbox state",
                            &file,
                            e,
                        ));
                    }
                    return Ok((Entry { file, pid }, path));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound && !made_root => {
                    made_root = true;
                    std::fs::create_dir_all(&root).map_err(|e| {
                        bulkhead_sys::error::io_failed(
                            "cannot create the sandbox state directory",
                            &root,
                            e,
                        )
                    })?;
                }
                Err(e) => {
                    return Err(bulkhead_sys::error::io_failed(
                        "cannot create the sandbox state",
                        &file,
                        e,
                    ))
                }
            }
        }
    }

    fn remove(&self) -> io::Result<()> {
        remove_entry(&self.file)
    }
}

/// An entry's owner line and recorded copy: a file `pid start\npath`, or (older layout) a
/// directory with `owner` and `snapshot` files.
fn read_entry(entry: &Path) -> (Option<String>, Option<PathBuf>) {
    if entry.is_dir() {
        let owner = std::fs::read_to_string(entry.join("owner")).ok();
        let disk = std::fs::read(entry.join("snapshot"))
            .ok()
            .map(|b| PathBuf::from(OsString::from_vec(b)));
        return (owner, disk);
    }
    let Ok(bytes) = std::fs::read(entry) else {
        return (None, None);
    };
    match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => (
            Some(String::from_utf8_lossy(&bytes[..i]).into_owned()),
            (i + 1 < bytes.len())
                .then(|| PathBuf::from(OsString::from_vec(bytes[i + 1..].to_vec()))),
        ),
        None => (None, None),
    }
}

fn remove_entry(entry: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(entry) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Ok(m) if m.is_dir() => {
            // The older layout: a directory (maybe with something mounted on or left in it).
            for f in ["snapshot", "owner"] {
                ignore_missing(std::fs::remove_file(entry.join(f)))?;
            }
            if std::fs::remove_dir(entry).is_err() {
                detach_mounts_under(entry);
                ignore_missing(std::fs::remove_dir_all(entry))?;
            }
            Ok(())
        }
        _ => ignore_missing(std::fs::remove_file(entry)),
    }
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// Remove what dead sandboxes left: for every registry entry whose owner is gone (or whose
/// PID now belongs to another process), unmount what is mounted below it, remove the
/// snapshot it records (only a `.#bulkhead-…-<pid>-<seq>` path) and the entry. Returns one
/// line per thing removed, or per thing that could not be.
///
/// `images` gives the images directory, asked for only once per boot: snapshots there that no
/// registry entry names are orphans of a crash and a reboot.
pub fn clean_stale(images: impl FnOnce() -> Option<PathBuf>) -> Vec<String> {
    let mut out = Vec::new();
    let root = state_root();
    if std::fs::create_dir_all(&root).is_err() {
        return out;
    }
    let Ok(rd) = std::fs::read_dir(&root) else {
        return out;
    };
    let mut boot: Option<Option<f64>> = None;
    for e in rd.flatten() {
        let name = e.file_name();
        let Some((pid, seq)) = name.to_str().and_then(parse_entry_name) else {
            continue;
        };
        let dir = e.path();
        let Some(why) = stale_reason(&dir, pid, &mut boot) else {
            continue;
        };
        let who = format!("sandbox {pid}-{seq} ({why})");
        for m in detach_mounts_under(&dir) {
            out.push(format!("unmounted {} of {who}", m.display()));
        }
        if let (_, Some(disk)) = read_entry(&dir) {
            if !is_our_snapshot(&disk, pid, seq) {
                out.push(format!(
                    "left {} alone: not a {SNAPSHOT_PREFIX}*-{pid}-{seq} path ({who})",
                    disk.display()
                ));
            } else if std::fs::symlink_metadata(&disk).is_ok() {
                for m in detach_mounts_under(&disk) {
                    out.push(format!("unmounted {} of {who}", m.display()));
                }
                let subvol = is_btrfs_subvolume(&disk);
                match remove_snapshot(&disk, subvol) {
                    Ok(()) => out.push(format!(
                        "removed the {}snapshot {} of {who}",
                        if subvol { "btrfs " } else { "" },
                        disk.display()
                    )),
                    Err((p, err)) => {
                        out.push(format!(
                            "could not remove the snapshot {} of {who}: {}: {}",
                            disk.display(),
                            p.display(),
                            errno_text(&err)
                        ));
                        continue;
                    }
                }
            }
        }
        match remove_entry(&dir) {
            Ok(()) => out.push(format!("removed the state {} of {who}", dir.display())),
            Err(err) => out.push(format!(
                "could not remove the state {} of {who}: {}",
                dir.display(),
                errno_text(&err)
            )),
        }
    }
    // Orphans can only come from a registry that was lost, i.e. from before this boot: look
    // once per boot (the marker lives in /run), once the images directory can be read.
    let marker = root.join(".orphans-checked");
    if bulkhead_sys::paths::images_paired_with_registry()
        && std::fs::symlink_metadata(&marker).is_err()
    {
        if let Some(images) = images() {
            clean_orphans(&images, &root, &mut out);
            let _ = std::fs::write(&marker, "");
        }
    }
    out
}

/// Snapshots in the images directory that no registry entry names. An entry is written before
/// its snapshot exists and removed after it is gone, so these are left by a crash that the
/// registry did not survive (a reboot empties /run).
fn clean_orphans(images: &Path, root: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(images) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str() else { continue };
        if !n.starts_with(SNAPSHOT_PREFIX) {
            continue;
        }
        let mut parts = n.rsplitn(3, '-');
        let (Some(seq), Some(pid)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Some((pid, seq)) = parse_entry_name(&format!("{pid}-{seq}")) else {
            continue;
        };
        let disk = e.path();
        if !is_our_snapshot(&disk, pid, seq)
            || std::fs::symlink_metadata(root.join(format!("{pid}-{seq}"))).is_ok()
        {
            continue;
        }
        detach_mounts_under(&disk);
        let subvol = is_btrfs_subvolume(&disk);
        match remove_snapshot(&disk, subvol) {
            // Gone meanwhile: its owner discarded it.
            Ok(()) if std::fs::symlink_metadata(&disk).is_err() => out.push(format!(
                "removed the orphaned snapshot {} (no sandbox state names it: a crash or a reboot left it)",
                disk.display()
            )),
            Ok(()) => {}
            Err((_, err)) if err.kind() == io::ErrorKind::NotFound => {}
            Err((p, err)) => out.push(format!(
                "could not remove the orphaned snapshot {}: {}: {}",
                disk.display(),
                p.display(),
                errno_text(&err)
            )),
        }
    }
}

fn parse_entry_name(name: &str) -> Option<(u32, u32)> {
    let (p, s) = name.split_once('-')?;
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(p) || !all_digits(s) {
        return None;
    }
    Some((p.parse().ok()?, s.parse().ok()?))
}

/// Why the entry's owner is gone, or None while it lives.
fn stale_reason(dir: &Path, name_pid: u32, boot: &mut Option<Option<f64>>) -> Option<String> {
    match read_entry(dir).0 {
        Some(text) => {
            let mut it = text.split_whitespace();
            let pid: Option<u32> = it.next().and_then(|t| t.parse().ok());
            let start: Option<u64> = it.next().and_then(|t| t.parse().ok());
            match (pid, start) {
                (Some(pid), Some(start)) => match proc_start(pid) {
                    None => Some(format!("process {pid} is gone")),
                    Some(now) if now != start => {
                        Some(format!("PID {pid} belongs to another process now"))
                    }
                    Some(_) => None,
                },
                _ => owner_missing(dir, name_pid, boot),
            }
        }
        None => owner_missing(dir, name_pid, boot),
    }
}

/// An entry without a readable owner is being made or removed, or its owner died in between.
/// It is stale when its PID is gone, or when the process with that PID started after the
/// entry was last changed.
fn owner_missing(dir: &Path, pid: u32, boot: &mut Option<Option<f64>>) -> Option<String> {
    let Some(start) = proc_start(pid) else {
        return Some(format!("process {pid} is gone"));
    };
    let boot = *boot.get_or_insert_with(boot_time);
    let mtime = std::fs::symlink_metadata(dir).ok()?.modified().ok()?;
    let mtime = mtime
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let started = boot? + start as f64 / hz;
    (started > mtime + 2.0).then(|| format!("PID {pid} belongs to another process now"))
}

fn boot_time() -> Option<f64> {
    let t = std::fs::read_to_string("/proc/stat").ok()?;
    t.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

// ---------------------------------------------------------------------------------------
// Mounts

/// Mount points at or below `dir` in this mount namespace, deepest first.
pub(crate) fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
pub(crate) fn unescape_mountinfo(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                out.push((oct[0] - b'0') * 64 + (oct[1] - b'0') * 8 + (oct[2] - b'0'));
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    PathBuf::from(OsString::from_vec(out))
}

/// Lazily unmount everything at or below `dir`; returns what was unmounted.
pub(crate) fn detach_mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mut done = Vec::new();
    for m in mounts_under(dir) {
        // A mount point stacked twice is listed twice; the second detach may find nothing.
        if nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH).is_ok() {
            done.push(m);
        }
    }
    done
}

// ---------------------------------------------------------------------------------------
// btrfs

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path contains a NUL byte"))
}

pub(crate) fn open_dir(p: &Path) -> io::Result<OwnedFd> {
    let c = cpath(p)?;
    // SAFETY: a valid C string; the descriptor is owned by the returned OwnedFd.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn mkdir(p: &Path, mode: libc::mode_t) -> io::Result<()> {
    let c = cpath(p)?;
    // SAFETY: a valid C string.
    if unsafe { libc::mkdir(c.as_ptr(), mode) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The parent directory, opened, and the last component as bytes of at most `max` bytes.
fn parent_and_name(p: &Path, max: usize) -> io::Result<(OwnedFd, Vec<u8>)> {
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let name = name.as_bytes().to_vec();
    if name.len() > max {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    Ok((open_dir(parent)?, name))
}

fn ioctl(fd: RawFd, req: u32, arg: *mut libc::c_void) -> io::Result<()> {
    // SAFETY: callers pass a request and an argument buffer of the size the request encodes.
    // (GET_SUBVOL_INFO returns a positive value on success.)
    if unsafe { libc::ioctl(fd, req as _, arg) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A writable snapshot of the subvolume open as `src_fd`, at `dest` (same file system).
fn btrfs_snapshot(src_fd: RawFd, dest: &Path) -> io::Result<()> {
    let (parent, name) = parent_and_name(dest, 4039)?;
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut args: Box<VolArgsV2> = Box::new(unsafe { std::mem::zeroed() });
    args.fd = src_fd as i64;
    args.name[..name.len()].copy_from_slice(&name);
    ioctl(
        parent.as_raw_fd(),
        BTRFS_IOC_SNAP_CREATE_V2,
        (&mut *args as *mut VolArgsV2).cast(),
    )
}

/// A new empty subvolume at `dest`.
pub(crate) fn btrfs_subvolume_create(dest: &Path) -> io::Result<()> {
    let (parent, name) = parent_and_name(dest, 4087)?;
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut args: Box<VolArgs> = Box::new(unsafe { std::mem::zeroed() });
    args.name[..name.len()].copy_from_slice(&name);
    ioctl(
        parent.as_raw_fd(),
        BTRFS_IOC_SUBVOL_CREATE,
        (&mut *args as *mut VolArgs).cast(),
    )
}

fn btrfs_destroy_one(path: &Path) -> io::Result<()> {
    let (parent, name) = parent_and_name(path, 4087)?;
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut args: Box<VolArgs> = Box::new(unsafe { std::mem::zeroed() });
    args.name[..name.len()].copy_from_slice(&name);
    ioctl(
        parent.as_raw_fd(),
        BTRFS_IOC_SNAP_DESTROY,
        (&mut *args as *mut VolArgs).cast(),
    )
}

/// Destroy the subvolume at `path`, and first any subvolume created inside it (the kernel
/// refuses a subvolume that still holds others with ENOTEMPTY).
pub(crate) fn btrfs_destroy(path: &Path) -> std::result::Result<(), (PathBuf, io::Error)> {
    match btrfs_destroy_one(path) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
            let dev = std::fs::symlink_metadata(path)
                .map_err(|e| (path.to_path_buf(), e))?
                .dev();
            let mut nested = Vec::new();
            find_nested_subvolumes(path, dev, &mut nested);
            for n in nested {
                btrfs_destroy(&n)?;
            }
            btrfs_destroy_one(path).map_err(|e| (path.to_path_buf(), e))
        }
        r => r.map_err(|e| (path.to_path_buf(), e)),
    }
}

/// Subvolume roots directly inside the subvolume `dir` (device `dev`), not below them.
fn find_nested_subvolumes(dir: &Path, dev: u64, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(md) = e.metadata() else { continue };
        if !md.is_dir() {
            continue;
        }
        if md.dev() == dev {
            find_nested_subvolumes(&e.path(), dev, out);
        } else if md.ino() == BTRFS_FIRST_FREE_OBJECTID {
            out.push(e.path());
        }
    }
}

/// `path` is the root directory of a btrfs subvolume.
pub(crate) fn is_btrfs_subvolume(path: &Path) -> bool {
    let Ok(md) = std::fs::symlink_metadata(path) else {
        return false;
    };
    md.is_dir() && md.ino() == BTRFS_FIRST_FREE_OBJECTID && fs_magic(path) == Some(BTRFS_MAGIC)
}

pub(crate) fn fs_magic(path: &Path) -> Option<u32> {
    let c = cpath(path).ok()?;
    // SAFETY: statfs into a zeroed buffer.
    unsafe {
        let mut sf: libc::statfs = std::mem::zeroed();
        (libc::statfs(c.as_ptr(), &mut sf) == 0).then_some(sf.f_type as u32)
    }
}

/// Remove an on-disk snapshot: destroy a subvolume, or remove a tree.
fn remove_snapshot(disk: &Path, subvolume: bool) -> std::result::Result<(), (PathBuf, io::Error)> {
    if subvolume {
        match btrfs_destroy(disk) {
            Err((_, e)) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            // Mounts inside it (a sandbox that used this namespace): detach them, try again.
            Err((_, e)) if e.raw_os_error() == Some(libc::EBUSY) => {
                if detach_mounts_under(disk).is_empty() {
                    return Err((disk.to_path_buf(), e));
                }
                btrfs_destroy(disk)
            }
            r => r,
        }
    } else {
        remove_tree(disk)
    }
}

/// Remove a directory tree without crossing into other file systems: mounts below it are
/// lazily detached first, btrfs subvolumes inside it are destroyed.
pub(crate) fn remove_tree(path: &Path) -> std::result::Result<(), (PathBuf, io::Error)> {
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err((path.to_path_buf(), e)),
    };
    if !md.is_dir() {
        return ignore_missing(std::fs::remove_file(path)).map_err(|e| (path.to_path_buf(), e));
    }
    if md.ino() == BTRFS_FIRST_FREE_OBJECTID && fs_magic(path) == Some(BTRFS_MAGIC) {
        return btrfs_destroy(path);
    }
    match remove_below(path, md.dev()) {
        Err((_, e)) if e.raw_os_error() == Some(libc::EBUSY) => {
            detach_mounts_under(path);
            remove_below(path, md.dev())?;
        }
        r => r?,
    }
    ignore_missing(std::fs::remove_dir(path)).map_err(|e| (path.to_path_buf(), e))
}

fn remove_below(dir: &Path, dev: u64) -> std::result::Result<(), (PathBuf, io::Error)> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err((dir.to_path_buf(), e)),
    };
    for e in rd {
        let e = e.map_err(|e| (dir.to_path_buf(), e))?;
        let p = e.path();
        let md = match e.metadata() {
            Ok(md) => md,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err((p, err)),
        };
        if !md.is_dir() {
            ignore_missing(std::fs::remove_file(&p)).map_err(|e| (p.clone(), e))?;
        } else if md.dev() == dev {
            remove_below(&p, dev)?;
            ignore_missing(std::fs::remove_dir(&p)).map_err(|e| (p.clone(), e))?;
        } else if md.ino() == BTRFS_FIRST_FREE_OBJECTID && fs_magic(&p) == Some(BTRFS_MAGIC) {
            btrfs_destroy(&p)?;
        } else {
            // Another file system mounted here: never descend; rmdir says EBUSY.
            std::fs::remove_dir(&p).map_err(|e| (p.clone(), e))?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The tree copy shared by reflink, copy and `image import`

pub(crate) enum CopyFail {
    /// The first FICLONE failed in a way that means "this file system cannot reflink".
    NoReflink(io::Error),
    /// What failed, on which source path.
    At(PathBuf, &'static str, io::Error),
}

/// Copy `src` to the directory `dst` (made here when `make_dst`, else an existing empty
/// directory, e.g. a fresh subvolume), preserving type, mode,
/// owner, times, symlinks, device nodes, FIFOs, sockets, hard links within the tree and
/// extended attributes. With `clone`, regular files share extents with the source (FICLONE);
/// else copy_file_range copies them (which itself shares extents where the file system can).
/// Stays on the source's file system, like `cp -ax` and like a btrfs snapshot. On error the
/// partial copy is left for the caller to remove.
pub(crate) fn copy_tree(
    src: &Path,
    dst: &Path,
    clone: bool,
    make_dst: bool,
) -> std::result::Result<(), CopyFail> {
    let md = std::fs::metadata(src).map_err(|e| CopyFail::At(src.into(), "cannot read", e))?;
    if make_dst {
        mkdir(dst, 0o700).map_err(|e| CopyFail::At(dst.into(), "cannot create", e))?;
    }
    let mut t = TreeCopy {
        clone,
        cloned_any: false,
        links: HashMap::new(),
        dev: md.dev(),
    };
    t.copy_dir(src, dst)?;
    t.attrs(src, dst, &md)
}

struct TreeCopy {
    clone: bool,
    cloned_any: bool,
    links: HashMap<(u64, u64), PathBuf>,
    dev: u64,
}

fn at<'a>(p: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> CopyFail + 'a {
    move |e| CopyFail::At(p.to_path_buf(), what, e)
}

impl TreeCopy {
    fn copy_dir(&mut self, src: &Path, dst: &Path) -> std::result::Result<(), CopyFail> {
        let rd = std::fs::read_dir(src).map_err(at(src, "cannot read"))?;
        // Files first, then subdirectories: a reflink trial meets its first file at once.
        let mut dirs = Vec::new();
        for e in rd {
            let e = e.map_err(at(src, "cannot read"))?;
            let name = e.file_name();
            let s = src.join(&name);
            let d = dst.join(&name);
            let md = e.metadata().map_err(at(&s, "cannot read"))?;
            let ft = md.file_type();
            if ft.is_dir() {
                dirs.push((s, d, md));
                continue;
            }
            if md.nlink() > 1 {
                if let Some(first) = self.links.get(&(md.dev(), md.ino())) {
                    std::fs::hard_link(first, &d).map_err(at(&s, "cannot link"))?;
                    continue;
                }
            }
            if ft.is_file() {
                self.copy_file(&s, &d, &md)?;
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&s).map_err(at(&s, "cannot read"))?;
                std::os::unix::fs::symlink(&target, &d).map_err(at(&s, "cannot copy"))?;
                self.attrs(&s, &d, &md)?;
            } else {
                let c = cpath(&d).map_err(at(&s, "cannot copy"))?;
                // SAFETY: a valid C string; mode and device come from lstat.
                if unsafe { libc::mknod(c.as_ptr(), md.mode(), md.rdev()) } != 0 {
                    return Err(at(&s, "cannot copy")(io::Error::last_os_error()));
                }
                self.attrs(&s, &d, &md)?;
            }
            if md.nlink() > 1 {
                self.links.insert((md.dev(), md.ino()), d);
            }
        }
        for (s, d, md) in dirs {
            mkdir(&d, 0o700).map_err(at(&s, "cannot copy"))?;
            // Another file system (a mount, a nested subvolume) stays an empty directory.
            if md.dev() == self.dev {
                self.copy_dir(&s, &d)?;
            }
            self.attrs(&s, &d, &md)?;
        }
        Ok(())
    }

    fn copy_file(
        &mut self,
        s: &Path,
        d: &Path,
        md: &std::fs::Metadata,
    ) -> std::result::Result<(), CopyFail> {
        let from = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(s)
            .map_err(at(s, "cannot read"))?;
        let to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(d)
            .map_err(at(s, "cannot copy"))?;
        if md.len() > 0 {
            if self.clone {
                if let Err(e) = ioctl(
                    to.as_raw_fd(),
                    libc::FICLONE as u32,
                    from.as_raw_fd() as usize as *mut libc::c_void,
                ) {
                    let unsupported = matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP | libc::EINVAL | libc::EXDEV | libc::ENOTTY)
                    );
                    return Err(if unsupported && !self.cloned_any {
                        if e.raw_os_error() == Some(libc::EXDEV) {
                            CopyFail::At(s.into(), "cannot reflink", e)
                        } else {
                            CopyFail::NoReflink(e)
                        }
                    } else {
                        CopyFail::At(s.into(), "cannot reflink", e)
                    });
                }
                self.cloned_any = true;
            } else {
                // std's copy uses copy_file_range, with sendfile and read/write fallbacks
                // (copy_file_range refuses some pairs of file systems with EXDEV).
                std::io::copy(&mut &from, &mut &to).map_err(at(s, "cannot copy"))?;
            }
        }
        std::os::unix::fs::fchown(&to, Some(md.uid()), Some(md.gid()))
            .map_err(at(s, "cannot set the owner of the copy of"))?;
        to.set_permissions(std::fs::Permissions::from_mode(md.mode() & 0o7777))
            .map_err(at(s, "cannot set the mode of the copy of"))?;
        copy_xattrs(Xt::Fd(from.as_raw_fd()), Xt::Fd(to.as_raw_fd()))
            .map_err(at(s, "cannot copy the attributes of"))?;
        let times = timespecs(md);
        // SAFETY: a valid descriptor and two timespecs.
        if unsafe { libc::futimens(to.as_raw_fd(), times.as_ptr()) } != 0 {
            return Err(at(s, "cannot set the times of the copy of")(
                io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Owner, mode (not for symlinks), extended attributes and times, by path.
    fn attrs(
        &self,
        s: &Path,
        d: &Path,
        md: &std::fs::Metadata,
    ) -> std::result::Result<(), CopyFail> {
        std::os::unix::fs::lchown(d, Some(md.uid()), Some(md.gid()))
            .map_err(at(s, "cannot set the owner of the copy of"))?;
        let symlink = md.file_type().is_symlink();
        if !symlink {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(md.mode() & 0o7777))
                .map_err(at(s, "cannot set the mode of the copy of"))?;
        }
        let cs = cpath(s).map_err(at(s, "cannot read"))?;
        let cd = cpath(d).map_err(at(s, "cannot copy"))?;
        copy_xattrs(Xt::Path(&cs), Xt::Path(&cd))
            .map_err(at(s, "cannot copy the attributes of"))?;
        let times = timespecs(md);
        // SAFETY: a valid C string and two timespecs.
        if unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                cd.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } != 0
        {
            return Err(at(s, "cannot set the times of the copy of")(
                io::Error::last_os_error(),
            ));
        }
        Ok(())
    }
}

fn timespecs(md: &std::fs::Metadata) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: md.atime(),
            tv_nsec: md.atime_nsec(),
        },
        libc::timespec {
            tv_sec: md.mtime(),
            tv_nsec: md.mtime_nsec(),
        },
    ]
}

/// Where extended attributes are read or written: an open file or a path (not followed).
#[derive(Clone, Copy)]
enum Xt<'a> {
    Fd(RawFd),
    Path(&'a CStr),
}

impl Xt<'_> {
    fn list(self, buf: &mut [u8]) -> isize {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: the buffer pointer and length match.
        unsafe {
            match self {
                Xt::Fd(fd) => libc::flistxattr(fd, p, n),
                Xt::Path(c) => libc::llistxattr(c.as_ptr(), p, n),
            }
        }
    }
    fn get(self, name: &CStr, buf: &mut [u8]) -> isize {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: the buffer pointer and length match; name is a C string.
        unsafe {
            match self {
                Xt::Fd(fd) => libc::fgetxattr(fd, name.as_ptr(), p, n),
                Xt::Path(c) => libc::lgetxattr(c.as_ptr(), name.as_ptr(), p, n),
            }
        }
    }
    fn set(self, name: &CStr, value: &[u8]) -> i32 {
        let (p, n) = (value.as_ptr().cast(), value.len());
        // SAFETY: the value pointer and length match; name is a C string.
        unsafe {
            match self {
                Xt::Fd(fd) => libc::fsetxattr(fd, name.as_ptr(), p, n, 0),
                Xt::Path(c) => libc::lsetxattr(c.as_ptr(), name.as_ptr(), p, n, 0),
            }
        }
    }
}

/// Copy every extended attribute the target accepts (a file system without them, or a
/// namespace this process may not write, is skipped); only a full disk is an error.
fn copy_xattrs(from: Xt, to: Xt) -> io::Result<()> {
    let mut names = vec![0u8; 1024];
    let n = loop {
        let n = from.list(&mut names);
        if n >= 0 {
            break n as usize;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ERANGE) if names.len() < 1 << 20 => names.resize(names.len() * 8, 0),
            _ => return Ok(()),
        }
    };
    if n == 0 {
        return Ok(());
    }
    let mut value = vec![0u8; 4096];
    for name in names[..n].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let Ok(cname) = CString::new(name) else {
            continue;
        };
        let len = loop {
            let len = from.get(&cname, &mut value);
            if len >= 0 {
                break Some(len as usize);
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::ERANGE) if value.len() < 1 << 20 => value.resize(value.len() * 8, 0),
                _ => break None,
            }
        };
        let Some(len) = len else { continue };
        if to.set(&cname, &value[..len]) != 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) {
                return Err(e);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_structs_are_4096_bytes() {
        assert_eq!(size_of::<VolArgs>(), 4096);
        assert_eq!(size_of::<VolArgsV2>(), 4096);
        assert_eq!(libc::FICLONE as u32, iow(0x94, 9, size_of::<libc::c_int>()));
    }

    #[test]
    fn stat_start_time_is_field_22() {
        let line =
            "4242 (a b) c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat_start(line), Some(987654));
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat_start(&me).is_some());
        assert_eq!(
            self_start(std::process::id()),
            proc_start(std::process::id()).unwrap()
        );
    }

    #[test]
    fn entry_names() {
        assert_eq!(parse_entry_name("123-4"), Some((123, 4)));
        for bad in ["123", "-4", "123-", "a-1", "1-2-3", "1-+2", ".tmp"] {
            assert_eq!(parse_entry_name(bad), None, "{bad}");
        }
    }

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

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(
            unescape_mountinfo("/run/a\\040b\\134c\\011"),
            PathBuf::from("/run/a b\\c\t")
        );
        assert_eq!(unescape_mountinfo("/x\\04"), PathBuf::from("/x\\04"));
        assert_eq!(unescape_mountinfo("/plain"), PathBuf::from("/plain"));
    }

    #[test]
    fn file_system_names() {
        assert_eq!(fs_name(0xef53), "ext4");
        assert_eq!(fs_name(BTRFS_MAGIC), "btrfs");
        assert_eq!(fs_name(0x1234), "a file system of type 0x1234");
    }
}
