//! Unix socket files `serve` makes as root (listeners, notify sockets). They are made only in
//! a directory nobody but root can change ([`trusted::open_trusted_dir`]), their mode is set
//! through the umask at bind time (the file never exists with a wider mode, and nothing is
//! changed by path afterwards), and their owner is set without following a symlink.
// System calls only through bulkhead-sys (clippy.toml's list, issue 27).
#![deny(clippy::disallowed_methods)]

use bulkhead_sys::trusted::{self, DirError};
use rustix::fs::AtFlags;
use socket2::{SockAddr, Socket};
use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// The socket file's directory (trusted) and its name there.
pub struct Place {
    pub dir: OwnedFd,
    pub name: OsString,
}

/// Open the directory of the socket file `path` when it can be trusted.
pub fn place(path: &Path) -> Result<Place, DirError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(DirError::Io(
            path.to_path_buf(),
            io::Error::from_raw_os_error(libc::EINVAL),
        ));
    };
    Ok(Place {
        dir: trusted::open_trusted_dir(parent)?,
        name: name.to_os_string(),
    })
}

/// Bind `sock` to `path`; with `mode`, the file gets exactly its permission bits. The umask
/// is process-wide: `serve` binds before it starts any thread that makes files.
pub fn bind(sock: &Socket, path: &Path, mode: Option<u32>) -> io::Result<()> {
    let addr = SockAddr::unix(path)?;
    let Some(m) = mode else {
        return sock.bind(&addr);
    };
    bulkhead_sys::process::with_umask(!m & 0o777, || sock.bind(&addr))
}

/// Set the owner of the file `place` names; a symlink put in its place is changed itself,
/// never what it points to.
pub fn chown(place: &Place, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    if uid.is_none() && gid.is_none() {
        return Ok(());
    }
    rustix::fs::chownat(
        &place.dir,
        place.name.as_os_str(),
        uid.map(rustix::fs::Uid::from_raw),
        gid.map(rustix::fs::Gid::from_raw),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(Into::into)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests set the scene by name
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn chown_changes_a_symlink_put_in_the_sockets_place_not_its_target() {
        let d = std::env::temp_dir().join(format!("bh-sockfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = d.join("s.sock");
        let victim = d.join("victim");
        std::fs::write(&victim, "x").unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        let at = place(&p).unwrap();
        if bulkhead_sys::process::is_root() {
            chown(&at, Some(65534), None).unwrap();
            assert_eq!(std::fs::metadata(&victim).unwrap().uid(), 0);
            assert_eq!(std::fs::symlink_metadata(&p).unwrap().uid(), 65534);
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
