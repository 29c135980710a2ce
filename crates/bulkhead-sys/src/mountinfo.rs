//! /proc/self/mountinfo: mount points below a directory, lazily detached.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// Mount points at or below `dir` in this mount namespace, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape)
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
pub fn unescape(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            let value = oct.iter().try_fold(0u16, |v, c| {
                (b'0'..=b'7')
                    .contains(c)
                    .then(|| v * 8 + u16::from(c - b'0'))
            });
            // The kernel writes at most \377; anything else is taken literally.
            if let Some(byte) = value.and_then(|v| u8::try_from(v).ok()) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    PathBuf::from(OsString::from_vec(out))
}

/// Unmount the file system mounted at `point` (a mount point root chose, e.g. the image
/// store's), lazily with `detach`. UMOUNT_NOFOLLOW: a symlink put in its place is not
/// followed to another mount.
pub fn unmount(point: &Path, detach: bool) -> std::io::Result<()> {
    let mut flags = rustix::mount::UnmountFlags::NOFOLLOW;
    if detach {
        flags |= rustix::mount::UnmountFlags::DETACH;
    }
    rustix::mount::unmount(point, flags).map_err(Into::into)
}

/// Lazily unmount everything at or below `dir`; returns what was unmounted.
pub fn detach_under(dir: &Path) -> Vec<PathBuf> {
    let mut done = Vec::new();
    for m in mounts_under(dir) {
        // A mount point stacked twice is listed twice; the second detach may find nothing.
        if rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH).is_ok() {
            done.push(m);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn escapes() {
        assert_eq!(
            unescape("/run/a\\040b\\134c\\011"),
            PathBuf::from("/run/a b\\c\t")
        );
        assert_eq!(unescape("/x\\04"), PathBuf::from("/x\\04"));
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
    }

    #[test]
    fn unescape_keeps_bytes() {
        assert_eq!(
            unescape("/mnt/datenbank-ü\\040pg"),
            std::path::Path::new("/mnt/datenbank-ü pg")
        );
        assert_eq!(unescape("/x\\377y").as_os_str().as_bytes(), b"/x\xffy");
        assert_eq!(unescape("/end\\040"), std::path::Path::new("/end "));
        // Not an escape the kernel writes: kept as it is, never a panic.
        assert_eq!(unescape("/a\\777b"), std::path::Path::new("/a\\777b"));
        assert_eq!(unescape("/a\\ü"), std::path::Path::new("/a\\ü"));
        assert_eq!(unescape("/a\\04"), std::path::Path::new("/a\\04"));
    }
}
