//! The one rule for host paths (issue 25): a path that root receives from a plan, an argument
//! or an image (a `--bind` source, a `-D` root, an image to import) is opened once, decided on
//! by `fstat` of that descriptor, and used only through it. Never checked by name and then used
//! by name again: between the two, whoever owns a directory on the way can swap what the name
//! means (a symlink to a device, to root's files, to `/`).
//!
//! Opening: `openat2(RESOLVE_NO_SYMLINKS)`, one system call, when the path has no symlink; else
//! one component at a time with `O_NOFOLLOW`, following a symlink only when root (or this
//! process's user) owns it, as the kernel's `protected_symlinks` does in sticky directories and
//! systemd's safe transitions do. A symlink another user owns is refused, naming it: its owner
//! could point it anywhere. The descriptor is an `O_PATH` handle: opening it reads nothing and
//! never opens a device.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

/// Why a path could not be opened by the rule.
#[derive(Debug)]
pub enum DirError {
    Io(PathBuf, io::Error),
    /// Someone other than root (or this process's user) can change what `path` names.
    Untrusted {
        path: PathBuf,
        why: String,
    },
}

impl std::fmt::Display for DirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirError::Io(p, e) => write!(f, "{}: {}", p.display(), crate::error::errno_text(e)),
            DirError::Untrusted { path, why } => write!(f, "{} {why}", path.display()),
        }
    }
}

impl DirError {
    /// The OS error, when there is one (ENOENT: the caller says what a missing path means).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            DirError::Io(_, e) => e.raw_os_error(),
            DirError::Untrusted { .. } => None,
        }
    }
}

/// A host file or directory opened by the rule: an `O_PATH` handle and what `fstat` said of it.
#[derive(Debug)]
pub struct HostPath {
    fd: OwnedFd,
    st: Stat,
    shown: PathBuf,
}

impl HostPath {
    /// Open `path` by the rule (see the module's documentation).
    pub fn open(path: &Path) -> Result<HostPath, DirError> {
        let fd = open_no_foreign_links(path, None)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| DirError::Io(path.into(), e.into()))?;
        Ok(HostPath {
            fd,
            st,
            shown: path.to_path_buf(),
        })
    }

    /// The handle (`O_PATH`): for `*at` calls, `open_tree`, `fstat`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The path as it was given (for messages).
    pub fn shown(&self) -> &Path {
        &self.shown
    }

    /// What the kernel says the handle is now (its d_path through /proc/self/fd), for messages
    /// and names derived from it; the path as given when /proc cannot tell.
    pub fn real_path(&self) -> PathBuf {
        real_path(self.fd.as_fd()).unwrap_or_else(|| self.shown.clone())
    }

    pub fn stat(&self) -> &Stat {
        &self.st
    }

    pub fn is_dir(&self) -> bool {
        FileType::from_raw_mode(self.st.st_mode) == FileType::Directory
    }

    pub fn is_file(&self) -> bool {
        FileType::from_raw_mode(self.st.st_mode) == FileType::RegularFile
    }

    pub fn is_block_device(&self) -> bool {
        FileType::from_raw_mode(self.st.st_mode) == FileType::BlockDevice
    }

    /// A character or block device node: binding one is the plan's explicit allow.
    pub fn is_device(&self) -> bool {
        matches!(
            FileType::from_raw_mode(self.st.st_mode),
            FileType::CharacterDevice | FileType::BlockDevice
        )
    }

    /// The host's own root directory (`/`, or a bind of it).
    pub fn is_host_root(&self) -> bool {
        rustix::fs::stat("/")
            .is_ok_and(|r| (r.st_dev, r.st_ino) == (self.st.st_dev, self.st.st_ino))
    }

    /// A second handle on the same file, owned by the caller.
    pub fn dup(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// The directory opened for reading (listing, ioctls): the same inode, not the name again.
    pub fn open_dir(&self) -> io::Result<OwnedFd> {
        reopen_dir(self.fd.as_fd())
    }

    /// Whether `name` in this directory is a directory itself (not followed if a symlink).
    pub fn has_dir(&self, name: &str) -> bool {
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
    }
}

/// The directory open as `fd`, opened again for reading (listing, ioctls, fgetxattr).
pub fn reopen_dir(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        fd,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

/// What the kernel calls the file open as `fd` (readlink of /proc/self/fd/N), None when it is
/// unreachable or deleted.
pub fn real_path(fd: BorrowedFd<'_>) -> Option<PathBuf> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let target = rustix::fs::readlink(link, Vec::new()).ok()?;
    let p = PathBuf::from(OsString::from_vec(target.into_bytes()));
    (p.is_absolute() && !p.as_os_str().as_encoded_bytes().ends_with(b" (deleted)")).then_some(p)
}

pub(crate) fn components(p: &Path) -> impl Iterator<Item = OsString> + '_ {
    p.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_os_string()),
        Component::ParentDir => Some("..".into()),
        _ => None,
    })
}

/// A directory check for [`open_no_foreign_links`]: may refuse the directory `at`.
pub(crate) type CheckDir<'a> = &'a mut dyn FnMut(&Stat, &Path) -> Result<(), DirError>;

/// Open `path` (`O_PATH`) with no symlink on the way that someone other than root or this
/// process's user owns. With `check_dir`, every directory passed through (from `/` or the
/// working directory on) is shown to it, and it may refuse one.
pub(crate) fn open_no_foreign_links(
    path: &Path,
    mut check_dir: Option<CheckDir<'_>>,
) -> Result<OwnedFd, DirError> {
    let io_at = |p: &Path| {
        let p = p.to_path_buf();
        move |e: rustix::io::Errno| DirError::Io(p, e.into())
    };
    if check_dir.is_none() {
        // The common case, one system call: no symlink at all.
        match rustix::fs::openat2(
            rustix::fs::CWD,
            path,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(fd) => return Ok(fd),
            // A symlink on the way (or a kernel without openat2, or a rename racing with the
            // lookup): the walk decides.
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOSYS | rustix::io::Errno::AGAIN) => {}
            Err(e) => return Err(io_at(path)(e)),
        }
    }
    let (mut cur, mut at) = open_top(path.is_absolute(), &mut check_dir)?;
    let mut todo: VecDeque<OsString> = components(path).collect();
    let me = rustix::process::geteuid().as_raw();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        let shown = at.join(&c);
        let next = rustix::fs::openat(
            &cur,
            c.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_at(&shown))?;
        let st = rustix::fs::fstat(&next).map_err(io_at(&shown))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                if st.st_uid != 0 && st.st_uid != me {
                    return Err(DirError::Untrusted {
                        path: shown,
                        why: format!("is a symlink owned by UID {}, not root", st.st_uid),
                    });
                }
                hops += 1;
                if hops > 40 {
                    return Err(DirError::Io(
                        shown,
                        io::Error::from_raw_os_error(libc::ELOOP),
                    ));
                }
                let target =
                    rustix::fs::readlinkat(&next, "", Vec::new()).map_err(io_at(&shown))?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                if target.is_absolute() {
                    (cur, at) = open_top(true, &mut check_dir)?;
                }
                for (i, t) in components(&target).enumerate() {
                    todo.insert(i, t);
                }
            }
            FileType::Directory => {
                if c == ".." {
                    at.pop();
                } else {
                    at.push(&c);
                }
                if let Some(check) = check_dir.as_mut() {
                    check(&st, &at)?;
                }
                cur = next;
            }
            _ if todo.is_empty() => return Ok(next),
            _ => {
                return Err(DirError::Io(
                    shown,
                    io::Error::from_raw_os_error(libc::ENOTDIR),
                ))
            }
        }
    }
    Ok(cur)
}

/// Where a walk starts: `/` or the working directory (checked too, with a check).
fn open_top(
    absolute: bool,
    check_dir: &mut Option<CheckDir<'_>>,
) -> Result<(OwnedFd, PathBuf), DirError> {
    let (start, shown) = if absolute { ("/", "/") } else { (".", "") };
    let fail = |e: rustix::io::Errno| DirError::Io(start.into(), e.into());
    let fd =
        rustix::fs::open(start, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).map_err(fail)?;
    if let Some(check) = check_dir.as_mut() {
        let st = rustix::fs::fstat(&fd).map_err(fail)?;
        check(&st, Path::new(start))?;
    }
    Ok((fd, PathBuf::from(shown)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bh-hostpath-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("dir")).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn roots_symlinks_are_followed_and_others_refused() {
        let d = scratch("links");
        std::fs::write(d.join("dir/file"), "x").unwrap();
        symlink("dir", d.join("rootlink")).unwrap();
        let plain = HostPath::open(&d.join("dir/file")).unwrap();
        assert!(!plain.is_dir() && !plain.is_device());
        let via = HostPath::open(&d.join("rootlink/file")).unwrap();
        assert_eq!(via.stat().st_ino, plain.stat().st_ino);
        assert_eq!(via.real_path(), d.join("dir/file"));
        // A link another user owns is refused, named, wherever it is on the way (only root can
        // make one: the unprivileged check lane says so, CI runs this as root).
        if rustix::process::geteuid().is_root() {
            links_of_others_are_refused(&d);
        } else {
            bulkhead_testkit::prereq::missing("a link another user owns (needs root to make one)");
        }
        let dev = HostPath::open(Path::new("/dev/null")).unwrap();
        assert!(dev.is_device());
        assert!(HostPath::open(Path::new("/")).unwrap().is_host_root());
        assert!(!HostPath::open(&d).unwrap().is_host_root());
        assert!(matches!(
            HostPath::open(&d.join("missing")),
            Err(DirError::Io(_, e)) if e.raw_os_error() == Some(libc::ENOENT)
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    fn links_of_others_are_refused(d: &Path) {
        symlink("/dev/null", d.join("theirs")).unwrap();
        rustix::fs::chownat(
            rustix::fs::CWD,
            d.join("theirs"),
            Some(rustix::process::Uid::from_raw(65534)),
            None,
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
        for p in [d.join("theirs"), d.join("theirs/x")] {
            match HostPath::open(&p) {
                Err(DirError::Untrusted { path, why }) => {
                    assert_eq!(path, d.join("theirs"));
                    assert!(why.contains("UID 65534"), "{why}");
                }
                other => panic!("{}: {other:?}", p.display()),
            }
        }
    }
}
