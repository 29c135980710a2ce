//! Directories by path: open one, make one (a private one too), and open the parent of a
//! path bulkhead chose.

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub(crate) fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path contains a NUL byte"))
}

/// Open a directory (following symlinks: for paths bulkhead chose).
pub fn open_dir(p: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(
        p,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

pub(crate) fn mkdir(p: &Path, mode: libc::mode_t) -> io::Result<()> {
    rustix::fs::mkdir(p, rustix::fs::Mode::from_raw_mode(mode)).map_err(Into::into)
}

/// The parent directory, opened, and the last component as bytes of at most `max` bytes.
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
/// refuse a symlink or a directory someone else owns (someone prepared it for us).
pub fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let md = std::fs::symlink_metadata(dir)?;
    if !md.is_dir() || md.uid() != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "not a directory owned by root (a symlink, or another user's directory)",
        ));
    }
    if md.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}
