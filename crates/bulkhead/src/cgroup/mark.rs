//! Ownership marks: bulkhead only changes or removes cgroups it created itself.
//!
//! The mark is the extended attribute `trusted.bulkhead` on the cgroup directory (only root
//! can set `trusted.*`, so it cannot be forged by the processes inside). Where a hierarchy
//! refuses extended attributes, a marker file under /run/bulkhead/owned stands in for it;
//! both live exactly as long as the cgroup (until reboot).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const XATTR: &str = "trusted.bulkhead";
const VALUE: &[u8] = b"owner=bulkhead";

fn marker_file(dir: &Path) -> PathBuf {
    let escaped: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '%' } else { c })
        .collect();
    bulkhead_sys::paths::owned_marks_dir().join(escaped)
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("paths have no NUL bytes")
}

/// Mark `dir` as created by bulkhead.
pub fn set(dir: &Path) -> std::io::Result<()> {
    let p = cpath(dir);
    let name = CString::new(XATTR).unwrap();
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let rc = unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            VALUE.as_ptr().cast(),
            VALUE.len(),
            0,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        let f = marker_file(dir);
        std::fs::create_dir_all(f.parent().unwrap())?;
        return std::fs::write(f, VALUE);
    }
    Err(e)
}

/// Whether `dir` carries bulkhead's mark.
pub fn is_ours(dir: &Path) -> bool {
    let p = cpath(dir);
    let name = CString::new(XATTR).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n > 0 && &buf[..n as usize] == VALUE {
        return true;
    }
    marker_file(dir).exists()
}

/// Forget the marker file of a removed cgroup (the xattr goes with the directory).
pub fn clear(dir: &Path) {
    let _ = std::fs::remove_file(marker_file(dir));
}
