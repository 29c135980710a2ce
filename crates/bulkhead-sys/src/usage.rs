//! The space a directory tree takes, like `du -sx`: allocated blocks, hard links counted once,
//! one file system, walked by directory descriptors (a symlink is never followed).

use crate::hostpath::reopen_dir;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd};

/// Allocated bytes of the tree open as `dir`, itself included.
pub fn usage(dir: BorrowedFd<'_>) -> u64 {
    let Ok(top) = rustix::fs::fstat(dir) else {
        return 0;
    };
    top.st_blocks as u64 * 512 + walk(dir, top.st_dev, &mut HashSet::new())
}

fn walk(dir: BorrowedFd<'_>, dev: u64, seen: &mut HashSet<(u64, u64)>) -> u64 {
    let Ok(list) = reopen_dir(dir) else {
        return 0;
    };
    let Ok(entries) = rustix::fs::Dir::read_from(&list) else {
        return 0;
    };
    let mut sum = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let Ok(st) = rustix::fs::statat(&list, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        if st.st_nlink > 1 && !is_dir && !seen.insert((st.st_dev, st.st_ino)) {
            continue;
        }
        sum += st.st_blocks as u64 * 512;
        if is_dir && st.st_dev == dev {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            if let Ok(sub) = rustix::fs::openat(&list, name, flags, Mode::empty()) {
                if rustix::fs::fstat(&sub).is_ok_and(|s| s.st_ino == st.st_ino) {
                    sum += walk(sub.as_fd(), dev, seen);
                }
            }
        }
    }
    sum
}
