//! Ownership marks: bulkhead only changes or removes cgroups it created itself.
//!
//! The mark is the extended attribute `trusted.bulkhead` on the cgroup directory (only root
//! can set `trusted.*`, so it cannot be forged by the processes inside). Where a hierarchy
//! refuses extended attributes, a marker file under /run/bulkhead/owned stands in for it;
//! both live exactly as long as the cgroup (until reboot).

use bulkhead_sys::xattr;
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

/// Mark `dir` as created by bulkhead.
pub fn set(dir: &Path) -> std::io::Result<()> {
    match xattr::set(dir, XATTR, VALUE) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            let f = marker_file(dir);
            std::fs::create_dir_all(bulkhead_sys::paths::owned_marks_dir())?;
            std::fs::write(f, VALUE)
        }
        r => r,
    }
}

/// Whether `dir` carries bulkhead's mark.
pub fn is_ours(dir: &Path) -> bool {
    xattr::get(dir, XATTR, 64).is_some_and(|v| v == VALUE) || marker_file(dir).exists()
}

/// Forget the marker file of a removed cgroup (the xattr goes with the directory).
pub fn clear(dir: &Path) {
    let _ = std::fs::remove_file(marker_file(dir));
}
