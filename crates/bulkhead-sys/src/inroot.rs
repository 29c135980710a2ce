//! Reading a file of an untrusted tree (an image, a sandbox's root) from the host: the path
//! is resolved with openat2(RESOLVE_IN_ROOT), so `..` and symlinks, absolute ones too, stay
//! inside the tree; only a regular file is read (a FIFO would hang us, a device node could be
//! endless or the host's own disk), and at most `max` bytes of it. A socket in the tree (a
//! sandboxed target's backend) is reached the same way, through a handle on it.

use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Why a file of the tree was not read.
#[derive(Debug)]
pub enum InRootError {
    /// Opening or reading failed (ENOENT included: the caller decides what a missing file
    /// means).
    Io(io::Error),
    /// Not a regular file: what it is instead ("a FIFO", "a directory", ...).
    NotRegular(&'static str),
    /// Larger than the cap.
    TooLarge(u64),
}

impl std::fmt::Display for InRootError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InRootError::Io(e) => write!(f, "{e}"),
            InRootError::NotRegular(what) => write!(f, "{what}, not a regular file"),
            InRootError::TooLarge(max) => write!(f, "larger than {max} bytes"),
        }
    }
}

/// Open the directory at the top of the tree (a path bulkhead or its user chose).
pub fn open_root(root: &Path) -> io::Result<OwnedFd> {
    rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

/// Whether two handles are on the same file (device and inode).
pub fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> io::Result<bool> {
    let (x, y) = (rustix::fs::fstat(a)?, rustix::fs::fstat(b)?);
    Ok(x.st_dev == y.st_dev && x.st_ino == y.st_ino)
}

/// A handle (O_PATH) on `path` of the tree open as `root`, looked up as if `root` were `/`:
/// absolute symlinks, `..` and mount points all stay inside, /proc magic links are refused.
/// For what cannot be read as a file (a unix socket to connect to through [`fd_path`]).
pub fn open_in_root(root: BorrowedFd<'_>, path: &Path) -> io::Result<OwnedFd> {
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(
            root,
            path,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        ) {
            // A rename inside the tree raced with the lookup: the kernel asks to try again.
            Err(rustix::io::Errno::AGAIN) if tries < 8 => tries += 1,
            r => return r.map_err(Into::into),
        }
    }
}

/// Whether a handle is on a socket file.
pub fn is_socket(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let st = rustix::fs::fstat(fd)?;
    Ok(rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket)
}

/// The /proc/self/fd path through which this process reaches what `fd` is open on, for calls
/// that only take a path (connect(2) to a unix socket).
pub fn fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Read `rel` (relative to the tree's top, `/` meaning the top) of the tree open as `root`.
pub fn read_in_root(root: BorrowedFd<'_>, rel: &str, max: u64) -> Result<Vec<u8>, InRootError> {
    let fd = rustix::fs::openat2(
        root,
        rel,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| InRootError::Io(e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| InRootError::Io(e.into()))?;
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    let what = match kind {
        rustix::fs::FileType::RegularFile => None,
        rustix::fs::FileType::Directory => Some("a directory"),
        rustix::fs::FileType::Fifo => Some("a FIFO"),
        rustix::fs::FileType::CharacterDevice => Some("a character device"),
        rustix::fs::FileType::BlockDevice => Some("a block device"),
        rustix::fs::FileType::Socket => Some("a socket"),
        _ => Some("not a regular file"),
    };
    if let Some(what) = what {
        return Err(InRootError::NotRegular(what));
    }
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut buf)
        .map_err(InRootError::Io)?;
    if buf.len() as u64 > max {
        return Err(InRootError::TooLarge(max));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("inroot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("etc")).unwrap();
        d
    }

    #[test]
    fn symlinks_resolve_inside_the_tree() {
        let d = scratch("links");
        std::fs::write(d.join("secret"), "inside\n").unwrap();
        // Absolute and climbing links both land in the tree, never on the host's files.
        symlink("/secret", d.join("etc/abs")).unwrap();
        symlink("../../../../secret", d.join("etc/up")).unwrap();
        let root = open_root(&d).unwrap();
        assert_eq!(
            read_in_root(root.as_fd(), "etc/abs", 100).unwrap(),
            b"inside\n"
        );
        assert_eq!(
            read_in_root(root.as_fd(), "etc/up", 100).unwrap(),
            b"inside\n"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_handle_in_the_tree_never_names_a_host_file() {
        let d = scratch("handles");
        std::fs::write(d.join("inside"), "in").unwrap();
        let outside = d.with_extension("outside");
        std::fs::write(&outside, "out").unwrap();
        symlink("/inside", d.join("etc/x")).unwrap();
        symlink(&outside, d.join("etc/host")).unwrap();
        let root = open_root(&d).unwrap();
        let x = open_in_root(root.as_fd(), Path::new("/etc/x")).unwrap();
        assert_eq!(std::fs::read_to_string(fd_path(x.as_fd())).unwrap(), "in");
        assert!(!is_socket(x.as_fd()).unwrap());
        assert!(open_in_root(root.as_fd(), Path::new("/etc/host")).is_err());
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }

    #[test]
    fn fifos_devices_and_big_files_are_refused() {
        let d = scratch("kinds");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("etc/fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        symlink("/dev/zero", d.join("etc/zero")).unwrap();
        std::fs::write(d.join("etc/big"), vec![b'x'; 2000]).unwrap();
        let root = open_root(&d).unwrap();
        assert!(matches!(
            read_in_root(root.as_fd(), "etc/fifo", 100),
            Err(InRootError::NotRegular("a FIFO"))
        ));
        // /dev/zero inside the tree does not exist: the link cannot reach the host's.
        assert!(matches!(
            read_in_root(root.as_fd(), "etc/zero", 100),
            Err(InRootError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
        assert!(matches!(
            read_in_root(root.as_fd(), "etc/big", 1000),
            Err(InRootError::TooLarge(1000))
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
