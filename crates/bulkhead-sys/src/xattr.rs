//! Extended attributes on paths (without following a final symlink is not needed here: the
//! paths are cgroup directories bulkhead names itself).

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
