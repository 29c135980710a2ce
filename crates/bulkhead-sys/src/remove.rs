//! Removing a directory tree that an untrusted program may still change (a sandbox's
//! snapshot, an image): every step goes through a directory file descriptor of the tree,
//! never a path string. Entries are opened with O_NOFOLLOW and checked against what was
//! stat'ed, so a directory swapped for a symlink (or for another directory) during the walk
//! is removed as the link it has become, and the walk never leaves the tree or its file
//! system: mounts below are left alone (EBUSY), btrfs subvolumes inside are destroyed.

use crate::btrfs::{self, BTRFS_MAGIC, FIRST_FREE_OBJECTID};
use crate::dir::parent_and_name;
use crate::hostpath::reopen_dir;
use crate::mountinfo;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

type Failed = (PathBuf, io::Error);

/// A swapped entry is looked at again this many times before the walk gives up.
const RETRIES: usize = 16;

/// Remove the tree at `path` (a path bulkhead chose: its parent is opened by the host path
/// rule, [`crate::hostpath`]; what is inside is not trusted). A subvolume is destroyed; mounts
/// below it are detached first.
pub fn remove_tree(path: &Path) -> Result<(), Failed> {
    let fail = |e: io::Error| (path.to_path_buf(), e);
    let (parent, name) = parent_and_name(path, 255).map_err(fail)?;
    remove_tree_at(parent.as_fd(), OsStr::from_bytes(&name), path)
}

/// Remove the tree `name` in the directory open (for reading) as `parent`; `path` is where it
/// is, for messages and for detaching what is mounted below it.
pub fn remove_tree_at(parent: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<(), Failed> {
    let fail = |e: io::Error| (path.to_path_buf(), e);
    let name = CString::new(name.as_bytes())
        .map_err(|_| fail(io::Error::from_raw_os_error(libc::EINVAL)))?;
    let parent = parent.as_fd();
    match remove_entry(parent, &name, None, path) {
        Err((_, e)) if e.raw_os_error() == Some(libc::EBUSY) => {
            if mountinfo::detach_under(path).is_empty() {
                return Err(fail(e));
            }
            remove_entry(parent, &name, None, path)
        }
        r => r,
    }
}

/// Remove `name` in `dir`, staying on the device `dev` (None: the entry's own).
fn remove_entry(
    dir: BorrowedFd<'_>,
    name: &CStr,
    dev: Option<u64>,
    shown: &Path,
) -> Result<(), Failed> {
    let fail = |e: io::Error| (shown.to_path_buf(), e);
    for _ in 0..RETRIES {
        let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(fail(e.into())),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return ignore_missing(rustix::fs::unlinkat(dir, name, AtFlags::empty())).map_err(fail);
        }
        let fd = match rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // Swapped for a symlink or a file since the stat: look again.
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => continue,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(fail(e.into())),
        };
        let now = rustix::fs::fstat(&fd).map_err(|e| fail(e.into()))?;
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
            continue;
        }
        return remove_dir(dir, name, fd, &st, dev, shown);
    }
    Err(fail(io::Error::other(
        "the tree kept changing while it was being removed",
    )))
}

/// Remove the directory `name` in `dir`, open as `fd`, with its contents.
fn remove_dir(
    dir: BorrowedFd<'_>,
    name: &CStr,
    fd: OwnedFd,
    st: &Stat,
    dev: Option<u64>,
    shown: &Path,
) -> Result<(), Failed> {
    let fail = |e: io::Error| (shown.to_path_buf(), e);
    let subvolume = st.st_ino == FIRST_FREE_OBJECTID
        && rustix::fs::fstatfs(&fd).is_ok_and(|s| s.f_type as u32 == BTRFS_MAGIC);
    if dev.is_some_and(|d| d != st.st_dev) && !subvolume {
        // Another file system is mounted here: never descend; rmdir says EBUSY.
        return ignore_missing(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)).map_err(fail);
    }
    if subvolume {
        // One ioctl destroys it all, unless it holds subvolumes (ENOTEMPTY): empty it first.
        match btrfs::destroy_at(dir, name.to_bytes()) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            r => return r.map_err(fail),
        }
    }
    remove_contents(&fd, st.st_dev, shown)?;
    drop(fd);
    if subvolume {
        return match btrfs::destroy_at(dir, name.to_bytes()) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r.map_err(fail),
        };
    }
    ignore_missing(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)).map_err(fail)
}

/// Remove everything in the directory open as `fd` (device `dev`).
fn remove_contents(fd: &OwnedFd, dev: u64, shown: &Path) -> Result<(), Failed> {
    let fail = |e: io::Error| (shown.to_path_buf(), e);
    // A second descriptor to list it: reading moves the offset.
    let list = reopen_dir(fd.as_fd()).map_err(fail)?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&list).map_err(|e| fail(e.into()))? {
        let entry = entry.map_err(|e| fail(e.into()))?;
        let n = entry.file_name();
        if n != c"." && n != c".." {
            names.push(n.to_owned());
        }
    }
    for n in names {
        let child = shown.join(std::ffi::OsStr::from_bytes(n.to_bytes()));
        remove_entry(fd.as_fd(), &n, Some(dev), &child)?;
    }
    Ok(())
}

fn ignore_missing(r: rustix::io::Result<()>) -> io::Result<()> {
    match r {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        r => r.map_err(Into::into),
    }
}
