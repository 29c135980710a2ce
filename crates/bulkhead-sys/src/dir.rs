//! Directories by path: open one (by the host path rule, [`crate::hostpath`]), make a private
//! one, and open the parent of a path bulkhead chose.

use crate::hostpath::{open_no_foreign_links, reopen_dir, DirError};
use rustix::fs::{FileType, Mode, OFlags};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn dir_error(e: DirError) -> io::Error {
    match e {
        DirError::Io(_, e) => e,
        DirError::Untrusted { path, why } => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} {why}", path.display()),
        ),
    }
}

/// Open a directory for reading, by the host path rule (no symlink another user owns on the
/// way, [`crate::hostpath`]).
pub fn open_dir(p: &Path) -> io::Result<OwnedFd> {
    let fd = open_no_foreign_links(p, None).map_err(dir_error)?;
    reopen_dir(fd.as_fd())
}

/// The parent directory, opened for reading by the host path rule, and the last component as
/// bytes of at most `max` bytes.
pub(crate) fn parent_and_name(p: &Path, max: usize) -> io::Result<(OwnedFd, Vec<u8>)> {
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

/// Make `dir` a directory only root can enter (0700, owned by root), creating it if missing;
/// refuse a symlink or a directory someone else owns (someone prepared it for us). Returns it
/// opened for reading: use it through the descriptor, not by name.
pub fn private_dir(dir: &Path) -> io::Result<OwnedFd> {
    let (parent, name) = parent_and_name(dir, 255)?;
    private_dir_at(parent.as_fd(), OsStr::from_bytes(&name))
}

/// The directory `name` in the directory open as `dir`, opened for reading; not followed if
/// it is a symlink (ELOOP), refused if it is not a directory (ENOTDIR).
pub fn open_subdir(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

/// [`private_dir`] for `name` in the directory open as `parent`.
pub fn private_dir_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let refused = || {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            "not a directory owned by root (a symlink, or another user's directory)",
        )
    };
    let fd = match open_subdir(parent, name) {
        Ok(fd) => fd,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            return Err(refused())
        }
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory || st.st_uid != 0 {
        return Err(refused());
    }
    if st.st_mode & 0o077 != 0 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
    }
    Ok(fd)
}
