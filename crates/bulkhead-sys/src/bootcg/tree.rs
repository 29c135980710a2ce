//! Removing a cgroup and every cgroup below it through directory descriptors, deepest first.
//!
//! A booted container makes cgroups below its own as it likes; on a v1 hierarchy nothing
//! bounds how deep (cgroup2 has `cgroup.max.depth`, v1 has no such file), and with long names
//! even 16 levels of cgroup2 pass PATH_MAX, so a removal by path fails (ENAMETOOLONG) where
//! the tree is deepest. This walk never builds a path for a system call: it holds the
//! directory it is in, opens a child relative to it, and comes back up with `openat(fd,
//! "..")`, checked to be the directory it came from (device and inode). At most two
//! descriptors are open at a time, however deep the tree; the names of the directories on the
//! way down are kept in memory. Only directories are removed (`unlinkat(AT_REMOVEDIR)`): a
//! cgroup's files go with it, and nothing else lives in a cgroup file system. What cannot be
//! removed is returned, one [`Left`] for the deepest cgroup that stayed on each branch (the
//! cgroups above it stay too, and are not listed again).

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use std::ffi::{CStr, CString, OsStr};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// How long EBUSY (a task that has exited but is still leaving its cgroup) is waited out, in
/// all, over one walk: a cgroup that still holds a process stays busy, and a tree of
/// thousands of them must not take thousands of such waits.
const PATIENCE: Duration = Duration::from_millis(3000);
const STEP: Duration = Duration::from_millis(10);

/// A directory that is not empty at its removal (a cgroup made meanwhile) is listed again
/// this many times before it is given up.
const RELISTS: usize = 8;

/// A cgroup the walk could not remove.
#[derive(Debug)]
pub struct Left {
    /// Where it is, for a message (shortened when past [`SHOWN_MAX`] bytes).
    pub shown: String,
    /// How many levels below the tree's top it is (0: the top itself).
    pub depth: usize,
    pub error: io::Error,
}

impl fmt::Display for Left {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.shown, self.error)
    }
}

/// A path in a message is shortened past this many bytes (the tree's top, its first and last
/// names, and how deep): a full path past PATH_MAX would be kilobytes of `x/x/x`.
pub const SHOWN_MAX: usize = 512;

/// One directory on the way down.
struct Level {
    /// Its name in the directory above.
    name: CString,
    /// Its device and inode: `..` of the level below must be this.
    id: (u64, u64),
    /// Its subdirectories not walked yet.
    todo: Vec<CString>,
    /// A subdirectory stayed, so this one cannot go either.
    blocked: bool,
    /// How many times it was listed.
    listed: usize,
}

/// Remove the cgroup `name` in the directory open as `parent` with every cgroup below it,
/// deepest first; `top` is its path, for messages only. A tree that is not there is no error.
pub fn remove_tree_at(parent: BorrowedFd<'_>, name: &OsStr, top: &Path) -> Result<(), Vec<Left>> {
    let mut left = Vec::new();
    let mut patience = PATIENCE;
    let at = |depth: usize, shown: String, error: io::Error| Left {
        shown,
        depth,
        error,
    };
    let Ok(name) = CString::new(name.as_bytes()) else {
        return Err(vec![at(
            0,
            top.display().to_string(),
            io::Error::from_raw_os_error(libc::EINVAL),
        )]);
    };
    let mut cur = match open_dir(parent, &name) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(vec![at(0, top.display().to_string(), e)]),
    };
    let dev = id_of(&cur)
        .map_err(|e| vec![at(0, top.display().to_string(), e)])?
        .0;
    let mut stack =
        vec![Level::open(name, &cur).map_err(|e| vec![at(0, top.display().to_string(), e)])?];
    loop {
        let depth = stack.len() - 1;
        if let Some(child) = stack[depth].todo.pop() {
            let fd = match open_dir(cur.as_fd(), &child) {
                Ok(fd) => fd,
                // Gone already, or not a directory (a cgroup file system has none of those).
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                    continue
                }
                Err(e) => {
                    left.push(at(depth + 1, shown(top, &stack, Some(&child)), e));
                    stack[depth].blocked = true;
                    continue;
                }
            };
            let opened = id_of(&fd).and_then(|id| {
                if id.0 != dev {
                    // Another file system mounted here: never walked into.
                    return Err(io::Error::from_raw_os_error(libc::EXDEV));
                }
                Level::open(child.clone(), &fd)
            });
            match opened {
                Ok(next) => {
                    stack.push(next);
                    cur = fd;
                }
                Err(e) => {
                    left.push(at(depth + 1, shown(top, &stack, Some(&child)), e));
                    stack[depth].blocked = true;
                }
            }
            continue;
        }
        // Every subdirectory walked: this directory goes (unless one of them stayed), from the
        // directory above, reached through `..` and checked to be the one the walk came from.
        let up = if depth == 0 {
            None
        } else {
            let expected = stack[depth - 1].id;
            let back = open_dir(cur.as_fd(), c"..").and_then(|fd| {
                if id_of(&fd)? == expected {
                    Ok(fd)
                } else {
                    Err(io::Error::other(
                        "its parent is no longer the directory the walk came down from",
                    ))
                }
            });
            match back {
                Ok(fd) => Some(fd),
                Err(e) => {
                    // Lost the way back up: stop here, and say where.
                    left.push(at(depth, shown(top, &stack, None), e));
                    return Err(left);
                }
            }
        };
        if !stack[depth].blocked {
            let dir_above = up.as_ref().map_or(parent, |fd| fd.as_fd());
            match rmdir_patiently(dir_above, &stack[depth].name, &mut patience) {
                Ok(()) => {}
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOTEMPTY)
                        && stack[depth].listed < RELISTS =>
                {
                    // A cgroup made since it was listed: walk it again.
                    match stack[depth].relist(&cur) {
                        Ok(()) => continue,
                        Err(e) => {
                            left.push(at(depth, shown(top, &stack, None), e));
                            stack[depth].blocked = true;
                        }
                    }
                }
                Err(e) => {
                    left.push(at(depth, shown(top, &stack, None), e));
                    stack[depth].blocked = true;
                }
            }
        }
        let blocked = stack.pop().is_some_and(|l| l.blocked);
        match (stack.last_mut(), up) {
            (Some(above), Some(fd)) => {
                above.blocked |= blocked;
                cur = fd;
            }
            _ => break,
        }
    }
    if left.is_empty() {
        Ok(())
    } else {
        Err(left)
    }
}

impl Level {
    /// The level of the directory open as `fd`, named `name` in the one above, listed.
    fn open(name: CString, fd: &OwnedFd) -> io::Result<Level> {
        let mut level = Level {
            name,
            id: id_of(fd)?,
            todo: Vec::new(),
            blocked: false,
            listed: 0,
        };
        level.relist(fd)?;
        Ok(level)
    }

    /// List the subdirectories of the directory open as `fd` into `todo`.
    fn relist(&mut self, fd: &OwnedFd) -> io::Result<()> {
        self.listed += 1;
        let mut todo = Vec::new();
        for entry in Dir::read_from(fd)? {
            let entry = entry?;
            let n = entry.file_name();
            if n == c"." || n == c".." {
                continue;
            }
            let dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => rustix::fs::statat(fd, n, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
                _ => false,
            };
            if dir {
                todo.push(n.to_owned());
            }
        }
        self.todo = todo;
        Ok(())
    }
}

/// Open the directory `name` in `dir` (never through a symlink).
fn open_dir(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

fn id_of(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// rmdir `name` in `dir`; EBUSY is retried while `patience` lasts. Gone already is done.
fn rmdir_patiently(dir: BorrowedFd<'_>, name: &CStr, patience: &mut Duration) -> io::Result<()> {
    loop {
        match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(rustix::io::Errno::BUSY) if !patience.is_zero() => {
                std::thread::sleep(STEP);
                *patience = patience.saturating_sub(STEP);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The path of the directory at the top of `stack` (and `child` in it), as `top` and the names
/// below it; past [`SHOWN_MAX`] bytes, `TOP/FIRST/.../LAST (N levels below TOP)`.
fn shown(top: &Path, stack: &[Level], child: Option<&CStr>) -> String {
    let names: Vec<&CStr> = stack
        .iter()
        .skip(1)
        .map(|l| l.name.as_c_str())
        .chain(child)
        .collect();
    let text = |n: &CStr| String::from_utf8_lossy(n.to_bytes()).into_owned();
    let top = top.display().to_string();
    let full: usize = top.len() + names.iter().map(|n| n.to_bytes().len() + 1).sum::<usize>();
    if full <= SHOWN_MAX {
        let mut out = top;
        for n in &names {
            out.push('/');
            out.push_str(&text(n));
        }
        return out;
    }
    let first = names.first().map(|n| text(n)).unwrap_or_default();
    let last = names.last().map(|n| text(n)).unwrap_or_default();
    let cut = |s: String| match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    };
    format!(
        "{top}/{}/.../{} ({} levels below {top})",
        cut(first),
        cut(last),
        names.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("bulkhead-cgtree-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn open(p: &Path) -> OwnedFd {
        rustix::fs::open(
            p,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    /// A chain of directories past PATH_MAX (made by descriptors, as the walk removes it),
    /// with siblings on the way, is removed; a plain file stops its directory (on a cgroup
    /// file system there are none to remove: the files go with the directory) and is named.
    #[test]
    fn a_tree_past_path_max_is_removed_by_descriptors() {
        let d = scratch("deep");
        let base = open(&d);
        rustix::fs::mkdirat(&base, "top", Mode::from_raw_mode(0o755)).unwrap();
        let mut cur = open_dir(base.as_fd(), c"top").unwrap();
        let name = "n".repeat(200);
        for i in 0..40 {
            rustix::fs::mkdirat(&cur, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
            if i % 10 == 0 {
                rustix::fs::mkdirat(&cur, "side", Mode::from_raw_mode(0o755)).unwrap();
            }
            cur = rustix::fs::openat(
                &cur,
                name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
        }
        drop(cur);
        remove_tree_at(base.as_fd(), OsStr::new("top"), &d.join("top")).unwrap();
        assert!(!d.join("top").exists());
        // A file at the bottom of a deep chain: the chain stays, the message names the
        // deepest directory that stayed, shortened.
        rustix::fs::mkdirat(&base, "top", Mode::from_raw_mode(0o755)).unwrap();
        let mut cur = open_dir(base.as_fd(), c"top").unwrap();
        for _ in 0..30 {
            rustix::fs::mkdirat(&cur, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
            cur = open_dir(cur.as_fd(), &CString::new(name.clone()).unwrap()).unwrap();
        }
        rustix::fs::openat(
            &cur,
            "file",
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        drop(cur);
        let left = remove_tree_at(base.as_fd(), OsStr::new("top"), &d.join("top")).unwrap_err();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].depth, 30);
        assert_eq!(left[0].error.raw_os_error(), Some(libc::ENOTEMPTY));
        let top = d.join("top").display().to_string();
        assert!(
            left[0].shown.starts_with(&format!("{top}/nnn"))
                && left[0].shown.ends_with(&format!("(30 levels below {top})")),
            "{}",
            left[0].shown
        );
        assert!(left[0].shown.len() < SHOWN_MAX, "{}", left[0].shown);
        let _ = std::process::Command::new("rm").arg("-rf").arg(&d).status();
    }

    #[test]
    fn a_missing_tree_is_no_error() {
        let d = scratch("missing");
        let base = open(&d);
        remove_tree_at(base.as_fd(), OsStr::new("nothing"), &d.join("nothing")).unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }
}
