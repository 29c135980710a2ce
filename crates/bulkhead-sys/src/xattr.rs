//! Extended attributes: on cgroup directories bulkhead names itself (by path: following a
//! final symlink does not matter there), and copied from one file to another (a tree copy).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::path::Path;

/// Set `name` to `value` on `path`.
pub fn set(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    rustix::fs::setxattr(path, name, value, rustix::fs::XattrFlags::empty()).map_err(Into::into)
}

/// The value of `name` on `path` (up to `max` bytes), None when it is not set.
pub fn get(path: &Path, name: &str, max: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; max];
    let n = rustix::fs::getxattr(path, name, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Where extended attributes are read or written: an open file (not O_PATH) or a path whose
/// last component is not followed (the l*xattr calls).
#[derive(Clone, Copy)]
pub enum At<'a> {
    Fd(RawFd),
    Path(&'a CStr),
}

impl At<'_> {
    fn list(self, buf: &mut [u8]) -> isize {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: the buffer pointer and length match.
        unsafe {
            match self {
                At::Fd(fd) => libc::flistxattr(fd, p, n),
                At::Path(c) => libc::llistxattr(c.as_ptr(), p, n),
            }
        }
    }
    fn get(self, name: &CStr, buf: &mut [u8]) -> isize {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: the buffer pointer and length match; name is a C string.
        unsafe {
            match self {
                At::Fd(fd) => libc::fgetxattr(fd, name.as_ptr(), p, n),
                At::Path(c) => libc::lgetxattr(c.as_ptr(), name.as_ptr(), p, n),
            }
        }
    }
    fn set(self, name: &CStr, value: &[u8]) -> i32 {
        let (p, n) = (value.as_ptr().cast(), value.len());
        // SAFETY: the value pointer and length match; name is a C string.
        unsafe {
            match self {
                At::Fd(fd) => libc::fsetxattr(fd, name.as_ptr(), p, n, 0),
                At::Path(c) => libc::lsetxattr(c.as_ptr(), name.as_ptr(), p, n, 0),
            }
        }
    }
}

/// Copy every extended attribute the target accepts (a file system without them, or a
/// namespace this process may not write, is skipped); only a full disk is an error.
pub fn copy_all(from: At, to: At) -> io::Result<()> {
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
