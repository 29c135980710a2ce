//! Files bulkhead reads and writes by name: its own (the sandbox registry, leases, the guard's
//! status, the image store's record, a log), in directories bulkhead made or root chose, and
//! the system's (/etc/subuid, /proc, /sys). Read and written so that nothing planted under a
//! name is followed. A final symlink is never followed (O_NOFOLLOW), only a
//! regular file is read (a FIFO would hang, a device could be endless), reads are capped, and a
//! whole-file write goes to a new temporary file (O_EXCL, a unique name) renamed over the old.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

fn not_regular(st: &Stat) -> Option<io::Error> {
    let what = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => return None,
        FileType::Directory => "a directory",
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice | FileType::BlockDevice => "a device node",
        FileType::Socket => "a socket",
        _ => "not a regular file",
    };
    Some(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{what}, not a regular file"),
    ))
}

/// Read the regular file `path`, at most `max` bytes (larger: an error).
pub fn read(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if let Some(e) = not_regular(&st) {
        return Err(e);
    }
    // A proc file says size 0: start from a page or two, so that mountinfo comes in one
    // read instead of a dozen that grow from 32 bytes.
    let hint = if st.st_size > 0 {
        st.st_size as u64 + 1
    } else {
        8192
    };
    let mut buf = Vec::with_capacity(hint.min(max + 1) as usize);
    File::from(fd).take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(buf)
}

/// [`read`] as UTF-8 text.
pub fn read_string(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read(path, max)?).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

static TMP_SEQ: AtomicU32 = AtomicU32::new(0);

/// Replace `path` with `bytes` whole (a reader sees the old file or the new one): a new file
/// `.NAME.PID.N.tmp` beside it, made with O_EXCL|O_NOFOLLOW (nothing planted under that name is
/// written through, and two writers never share one), then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    let tmp_name = format!(
        "{}.{}.{}.tmp",
        tmp_name.to_string_lossy(),
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let tmp = dir.join(tmp_name);
    let mut f = create_new(&tmp, mode)?;
    let done = f
        .write_all(bytes)
        .and_then(|()| rustix::fs::rename(&tmp, path).map_err(Into::into));
    if done.is_err() {
        let _ = rustix::fs::unlink(&tmp);
    }
    done
}

/// Create the new file `path` for writing (O_CREAT|O_EXCL: never an existing file, never
/// through a symlink).
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    Ok(File::from(fd))
}

/// Open (creating it if missing) the lock file `path` for flock: read-write, not through a
/// symlink, a regular file.
pub fn open_lock(path: &Path, mode: u32) -> io::Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    if let Some(e) = not_regular(&rustix::fs::fstat(&fd)?) {
        return Err(e);
    }
    Ok(File::from(fd))
}

/// Open the log `path` to append to, creating it (0640) if missing. An existing file must be a
/// regular file of root's (or this process's user's) with one link: a file another user made
/// there, or a hard link to some other file, is refused rather than written to.
pub fn open_append_log(path: &Path) -> io::Result<File> {
    // The directory by the host path rule (no link another user owns on the way: such a link
    // in a parent could point the log at /etc), the file relative to it, never through a link.
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => (
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            },
            n,
        ),
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is not a file's path: give the path of a file in a directory root owns",
            ))
        }
    };
    let dir = crate::hostpath::HostPath::open(dir)
        .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))?;
    let fd = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o640),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => io::Error::new(
            io::ErrorKind::PermissionDenied,
            "is a symbolic link: a log is never written through one (give the file's own path)",
        ),
        e => e.into(),
    })?;
    let st = rustix::fs::fstat(&fd)?;
    if let Some(e) = not_regular(&st) {
        return Err(e);
    }
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != 0 && st.st_uid != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "owned by UID {}, not root: another user made it, and could read or redirect what is written",
                st.st_uid
            ),
        ));
    }
    if st.st_nlink > 1 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "has {} hard links: it may be another file's name too",
                st.st_nlink
            ),
        ));
    }
    // Back to blocking writes (O_NONBLOCK was for the open of a FIFO planted there).
    rustix::fs::fcntl_setfl(&fd, OFlags::APPEND)?;
    Ok(File::from(fd))
}

/// Make the directory `path` and its missing parents (bulkhead's own directories).
pub fn ensure_dir(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
}

/// Make the directory `path` (its parent must exist; an existing one is an error).
pub fn create_dir(path: &Path, mode: u32) -> io::Result<()> {
    rustix::fs::mkdir(path, Mode::from_raw_mode(mode)).map_err(Into::into)
}

/// The names in the directory `path` (not followed if a symlink), without `.` and `..`.
pub fn names(path: &Path) -> io::Result<Vec<OsString>> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    names_in(fd.as_fd())
}

/// The names in the directory open (for reading) as `fd`, without `.` and `..`.
pub fn names_in(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(fd)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(std::ffi::OsStr::from_bytes(n).to_os_string());
        }
    }
    Ok(out)
}

/// The status of `path` itself (a symlink is not followed): None when it does not exist.
pub fn lstat(path: &Path) -> io::Result<Option<Stat>> {
    match rustix::fs::statat(rustix::fs::CWD, path, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether `path` exists (as anything; a symlink is not followed).
pub fn exists(path: &Path) -> bool {
    lstat(path).is_ok_and(|s| s.is_some())
}

/// Whether `path` is a directory (a symlink is not followed).
pub fn is_dir(path: &Path) -> bool {
    lstat(path)
        .is_ok_and(|s| s.is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory))
}

/// Remove the file `path` (a symlink itself, never what it points to); a missing one is fine.
pub fn remove_file(path: &Path) -> io::Result<()> {
    match rustix::fs::unlink(path) {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        r => r.map_err(Into::into),
    }
}

/// Remove the empty directory `path`; a missing one is fine.
pub fn remove_dir(path: &Path) -> io::Result<()> {
    match rustix::fs::rmdir(path) {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        r => r.map_err(Into::into),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planted_names_are_not_followed() {
        let d = std::env::temp_dir().join(format!("bh-statefile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let f = d.join("status.json");
        std::os::unix::fs::symlink(&victim, &f).unwrap();
        assert!(read(&f, 100).is_err(), "a symlink is not read through");
        assert!(open_append_log(&f).is_err(), "nor appended through");
        // The write replaces the link itself; the victim is untouched.
        write_atomic(&f, b"{}", 0o644).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(read(&f, 100).unwrap(), b"{}");
        assert!(read(&f, 1).is_err(), "capped");
        // A temporary file planted under an old fixed name changes nothing.
        std::os::unix::fs::symlink(&victim, d.join("status.tmp")).unwrap();
        write_atomic(&f, b"{\"a\":1}", 0o644).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // A hard link is not a log.
        std::fs::hard_link(&victim, d.join("log")).unwrap();
        let e = open_append_log(&d.join("log")).unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        let mut log = open_append_log(&d.join("new.log")).unwrap();
        log.write_all(b"line\n").unwrap();
        assert_eq!(names(&d).unwrap().len(), 5);
        let _ = std::fs::remove_dir_all(&d);
    }
}
