//! What kind of file system holds a path or an open directory, and how full it is.

/// statfs f_type of btrfs.
pub const BTRFS_MAGIC: u32 = 0x9123_683e;
/// statfs f_type of XFS.
pub const XFS_MAGIC: u32 = 0x5846_5342;

use std::os::fd::AsFd;
use std::path::Path;

/// The file system type (statfs f_type) of the one holding `path`.
pub fn fs_magic(path: &Path) -> Option<u32> {
    rustix::fs::statfs(path).ok().map(|sf| sf.f_type as u32)
}

/// (inode number, file system type) of an open file.
pub fn ino_and_magic(fd: impl AsFd) -> std::io::Result<(u64, u32)> {
    let st = rustix::fs::fstat(&fd)?;
    let sf = rustix::fs::fstatfs(&fd)?;
    Ok((st.st_ino, sf.f_type as u32))
}

/// (total bytes, bytes available to unprivileged users) of the file system holding `p`.
pub fn space(p: &Path) -> std::io::Result<(u64, u64)> {
    let v = rustix::fs::statvfs(p)?;
    let frsize = v.f_frsize;
    Ok((v.f_blocks * frsize, v.f_bavail * frsize))
}

/// A file system's name from its type.
pub fn fs_name(magic: u32) -> String {
    match magic {
        0xef53 => "ext4",
        XFS_MAGIC => "xfs",
        BTRFS_MAGIC => "btrfs",
        0x0102_1994 => "tmpfs",
        0x794c_7630 => "overlayfs",
        0x2fc1_2fc1 => "zfs",
        0x6969 => "nfs",
        0xf2f5_2010 => "f2fs",
        0x7371_7368 => "squashfs",
        0x6573_5546 => "fuse",
        0x8584_58f6 => "ramfs",
        0x4d44 => "vfat",
        0xff53_4d42 | 0xfe53_4d42 => "cifs",
        other => return format!("a file system of type {other:#x}"),
    }
    .to_string()
}

/// Whether the kernel knows the file system type `name` (`overlay`): listed in
/// /proc/filesystems, or loadable. A module such as overlay is loaded on the first mount that
/// names it, so a fresh host does not list it yet; `fsopen(2)` asks for it the same way
/// (the kernel's request_module) without mounting anything.
pub fn filesystem_available(name: &str) -> bool {
    let listed = || {
        std::fs::read_to_string("/proc/filesystems")
            .is_ok_and(|t| t.lines().any(|l| l.split_whitespace().last() == Some(name)))
    };
    listed()
        || (rustix::mount::fsopen(name, rustix::mount::FsOpenFlags::FSOPEN_CLOEXEC).is_ok()
            && listed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_system_names() {
        assert_eq!(fs_name(0xef53), "ext4");
        assert_eq!(fs_name(BTRFS_MAGIC), "btrfs");
        assert_eq!(fs_name(0x1234), "a file system of type 0x1234");
    }
}
