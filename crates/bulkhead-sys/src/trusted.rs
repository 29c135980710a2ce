//! Directories root can trust to make files in (unix socket files that others then connect
//! to): nobody but root can change what any component of their path names.

use crate::hostpath::open_no_foreign_links;
pub use crate::hostpath::DirError;
use rustix::fs::{FileType, Stat};
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Why the directory with this status is not trusted, if it is not: owned by someone else
/// than root or `me`, or writable by its group or others without the sticky bit (with it,
/// others cannot remove or rename root's files there, as in /tmp).
pub fn untrusted_dir(st: &Stat, me: u32) -> Option<String> {
    let mode = st.st_mode & 0o7777;
    if st.st_uid != 0 && st.st_uid != me {
        return Some(format!("is owned by UID {}, not root", st.st_uid));
    }
    if mode & 0o1000 == 0 {
        if mode & 0o002 != 0 {
            return Some(format!(
                "is writable by others and not sticky (mode {mode:04o})"
            ));
        }
        if mode & 0o020 != 0 {
            return Some(format!(
                "is writable by its group (GID {}) and not sticky (mode {mode:04o})",
                st.st_gid
            ));
        }
    }
    None
}

/// Open the directory `dir` (an absolute path) to make files in as root, when nobody but
/// root or this process's user can change what its path names: every directory from `/` on
/// passes [`untrusted_dir`], and a symlink on the way is followed only when root or this
/// user owns it (the kernel's protected_symlinks rule; systemd's safe path transitions).
/// Returns an O_PATH handle on the directory.
pub fn open_trusted_dir(dir: &Path) -> Result<OwnedFd, DirError> {
    let me = rustix::process::geteuid().as_raw();
    let mut check = |st: &Stat, at: &Path| match untrusted_dir(st, me) {
        Some(why) => Err(DirError::Untrusted {
            path: at.to_path_buf(),
            why,
        }),
        None => Ok(()),
    };
    let fd = open_no_foreign_links(dir, Some(&mut check))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| DirError::Io(dir.into(), e.into()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(DirError::Io(
            dir.into(),
            io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bh-trusted-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn directories_others_can_write_are_not_trusted() {
        let d = scratch("trust");
        std::fs::create_dir(d.join("open")).unwrap();
        std::fs::set_permissions(d.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::create_dir(d.join("sticky")).unwrap();
        std::fs::set_permissions(d.join("sticky"), std::fs::Permissions::from_mode(0o1777))
            .unwrap();
        std::fs::create_dir(d.join("group")).unwrap();
        std::fs::set_permissions(d.join("group"), std::fs::Permissions::from_mode(0o775)).unwrap();
        std::os::unix::fs::symlink("sticky", d.join("link")).unwrap();
        assert!(open_trusted_dir(&d.join("sticky")).is_ok());
        assert!(open_trusted_dir(&d.join("link")).is_ok());
        for (p, want) in [
            ("open", "writable by others"),
            ("group", "writable by its group"),
        ] {
            match open_trusted_dir(&d.join(p)) {
                Err(DirError::Untrusted { path, why }) => {
                    assert_eq!(path, d.join(p));
                    assert!(why.contains(want), "{why}");
                }
                other => panic!("{p}: {other:?}"),
            }
        }
        // Below an untrusted directory nothing is trusted, whatever its own mode.
        std::fs::create_dir(d.join("open/inner")).unwrap();
        assert!(matches!(
            open_trusted_dir(&d.join("open/inner")),
            Err(DirError::Untrusted { .. })
        ));
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// Why [`read_root_file`] gave no text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootFileError {
    /// The OS said no (ENOENT, EACCES, ELOOP for a symlink, ...), as text.
    Io(String),
    /// It is there but others could have changed it: why.
    Untrusted(String),
}

/// Read a configuration file root acts on (a plan with placement rules): opened once without
/// following a symlink at its last component, decided on by `fstat` of that descriptor
/// (a regular file owned by root, writable by nobody else) and read through it, at most
/// `max` bytes.
pub fn read_root_file(path: &Path, max: usize) -> Result<String, RootFileError> {
    use std::io::Read;
    let io = |e: io::Error| RootFileError::Io(crate::error::errno_text(&e));
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io(e.into()))?;
    let mode = st.st_mode & 0o7777;
    let why = if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        Some("is not a regular file".to_string())
    } else if st.st_uid != 0 {
        Some(format!("is owned by UID {}, not root", st.st_uid))
    } else if mode & 0o022 != 0 {
        Some(format!(
            "is writable by its group or others (mode {mode:04o})"
        ))
    } else {
        None
    };
    if let Some(why) = why {
        return Err(RootFileError::Untrusted(why));
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(max as u64)
        .read_to_string(&mut text)
        .map_err(io)?;
    Ok(text)
}
