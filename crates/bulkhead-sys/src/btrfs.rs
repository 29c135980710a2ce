//! btrfs through its ioctls: snapshots and subvolumes (create, destroy, read-only), and the
//! subvolume's id, flags and generation.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub use crate::statfs::{BTRFS_MAGIC, XFS_MAGIC};
/// The inode number of every btrfs subvolume's root directory.
pub const FIRST_FREE_OBJECTID: u64 = 256;

/// `_IOW(ty, nr, size)` as <asm-generic/ioctl.h> computes it.
const fn iow(ty: u32, nr: u32, size: usize) -> u32 {
    (1 << 30) | ((size as u32) << 16) | (ty << 8) | nr
}
// <linux/btrfs.h>: BTRFS_IOCTL_MAGIC 0x94.
const BTRFS_IOC_SUBVOL_CREATE: u32 = 0x5000_940e; // struct btrfs_ioctl_vol_args
const BTRFS_IOC_SNAP_DESTROY: u32 = 0x5000_940f; // struct btrfs_ioctl_vol_args
const BTRFS_IOC_SNAP_CREATE_V2: u32 = 0x5000_9417; // struct btrfs_ioctl_vol_args_v2
/// _IOR(0x94, 60, struct btrfs_ioctl_get_subvol_info_args), 504 bytes (Linux 4.18+).
const BTRFS_IOC_GET_SUBVOL_INFO: u32 = 0x81f8_943c;
const SUBVOL_INFO_SIZE: usize = 504;
/// BTRFS_ROOT_SUBVOL_RDONLY in the root item's flags.
pub const ROOT_SUBVOL_RDONLY: u64 = 1;
const _: () = assert!(iow(0x94, 14, size_of::<VolArgs>()) == BTRFS_IOC_SUBVOL_CREATE);
const _: () = assert!(iow(0x94, 15, size_of::<VolArgs>()) == BTRFS_IOC_SNAP_DESTROY);
const _: () = assert!(iow(0x94, 23, size_of::<VolArgsV2>()) == BTRFS_IOC_SNAP_CREATE_V2);

/// struct btrfs_ioctl_vol_args: 4096 bytes.
#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; 4088],
}

/// struct btrfs_ioctl_vol_args_v2: 4096 bytes (the union after `flags` is unused here).
#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; 4040],
}

/// ioctl(2) with a request and an argument of the size the request encodes.
///
/// # Safety
/// `arg` must point to a buffer of the size and layout `req` expects (or be the integer
/// argument it takes), valid for the call.
unsafe fn ioctl(fd: RawFd, req: u32, arg: *mut libc::c_void) -> io::Result<()> {
    // SAFETY: the caller passes an argument of the size and layout `req` encodes (see
    // above). GET_SUBVOL_INFO returns a positive value on success.
    if unsafe { libc::ioctl(fd, req as libc::Ioctl, arg) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A writable snapshot of the subvolume open (for reading) as `src_fd`, named `name` in the
/// directory open (for reading) as `parent` (same file system).
pub fn snapshot_at(src_fd: BorrowedFd<'_>, parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let name = name.as_bytes();
    if name.is_empty() || name.len() > 4039 {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    let src_fd = src_fd.as_raw_fd();
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut args: Box<VolArgsV2> = Box::new(unsafe { std::mem::zeroed() });
    args.fd = src_fd as i64;
    args.name[..name.len()].copy_from_slice(name);
    // SAFETY: the argument is the struct or buffer this request takes, sized as it encodes.
    unsafe {
        ioctl(
            parent.as_raw_fd(),
            BTRFS_IOC_SNAP_CREATE_V2,
            (&raw mut *args).cast(),
        )
    }
}

/// A new empty subvolume `name` in the directory open (for reading) as `parent`.
pub fn subvolume_create_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    vol_ioctl(parent, BTRFS_IOC_SUBVOL_CREATE, name.as_bytes())
}

/// Destroy the subvolume `name` in the directory open as `parent` (one ioctl; ENOTEMPTY when
/// it still holds subvolumes; the tree remover empties those first).
pub fn destroy_at(parent: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    vol_ioctl(parent, BTRFS_IOC_SNAP_DESTROY, name)
}

/// A request that takes struct btrfs_ioctl_vol_args naming `name` in `parent`.
fn vol_ioctl(parent: BorrowedFd<'_>, req: u32, name: &[u8]) -> io::Result<()> {
    if name.is_empty() || name.len() > 4087 {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut args: Box<VolArgs> = Box::new(unsafe { std::mem::zeroed() });
    args.name[..name.len()].copy_from_slice(name);
    // SAFETY: `req` is one of the requests that take this struct, sized as they encode (the
    // assertions above).
    unsafe { ioctl(parent.as_raw_fd(), req, (&raw mut *args).cast()) }
}

/// `path` is the root directory of a btrfs subvolume (a symlink is not followed).
pub fn is_subvolume(path: &Path) -> bool {
    let Ok(Some(st)) = crate::statefile::lstat(path) else {
        return false;
    };
    rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
        && st.st_ino == FIRST_FREE_OBJECTID
        && crate::statfs::fs_magic(path) == Some(BTRFS_MAGIC)
}

/// The directory open as `fd` is the root of a btrfs subvolume.
pub fn is_subvolume_fd(fd: BorrowedFd<'_>) -> bool {
    crate::statfs::ino_and_magic(fd)
        .is_ok_and(|(ino, magic)| ino == FIRST_FREE_OBJECTID && magic == BTRFS_MAGIC)
}

/// (subvolume id, root item flags, ctransid) of the subvolume `fd` is the root of.
pub fn subvol_info(fd: RawFd) -> io::Result<(u64, u64, u64)> {
    let mut buf = vec![0u8; SUBVOL_INFO_SIZE];
    // SAFETY: the argument is the struct or buffer this request takes, sized as it encodes.
    unsafe { ioctl(fd, BTRFS_IOC_GET_SUBVOL_INFO, buf.as_mut_ptr().cast()) }?;
    let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().unwrap());
    Ok((u64_at(0), u64_at(288), u64_at(344)))
}

/// Make the subvolume open (for reading) as `fd` read-only (BTRFS_IOC_SUBVOL_SETFLAGS): an
/// image then gets a pool of snapshots made ahead of time.
pub fn set_read_only(fd: BorrowedFd<'_>) -> io::Result<()> {
    // _IOW(0x94, 26, __u64); BTRFS_SUBVOL_RDONLY is bit 1 in this ioctl's flags.
    const BTRFS_IOC_SUBVOL_SETFLAGS: u32 = 0x4008_941a;
    let f = fd;
    let mut flags: u64 = 1 << 1;
    // SAFETY: the argument is the struct or buffer this request takes, sized as it encodes.
    unsafe {
        ioctl(
            f.as_raw_fd(),
            BTRFS_IOC_SUBVOL_SETFLAGS,
            (&raw mut flags).cast(),
        )
    }
}

/// _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args): 1024 bytes.
const BTRFS_IOC_FS_INFO: u32 = 0x8400_941f;
/// _IOWR(0x94, 30, struct btrfs_ioctl_dev_info_args): 4096 bytes.
const BTRFS_IOC_DEV_INFO: u32 = 0xd000_941e;
const FS_INFO_SIZE: usize = 1024;
const DEV_INFO_SIZE: usize = 4096;
/// Where `path` (BTRFS_DEVICE_PATH_NAME_MAX bytes) starts in btrfs_ioctl_dev_info_args.
const DEV_INFO_PATH: usize = 3072;
const _: () = assert!(ior(0x94, 31, FS_INFO_SIZE) == BTRFS_IOC_FS_INFO);
const _: () = assert!(iowr(0x94, 30, DEV_INFO_SIZE) == BTRFS_IOC_DEV_INFO);

const fn ior(ty: u32, nr: u32, size: usize) -> u32 {
    (2 << 30) | ((size as u32) << 16) | (ty << 8) | nr
}

const fn iowr(ty: u32, nr: u32, size: usize) -> u32 {
    (3 << 30) | ((size as u32) << 16) | (ty << 8) | nr
}

/// The devices of the btrfs file system open as `fd` (any file or directory on it, opened
/// for reading): how many there are, and the path of each (BTRFS_IOC_FS_INFO, then
/// BTRFS_IOC_DEV_INFO for every device id up to `max_id`, as systemd's
/// btrfs_get_block_device() does). At most 64 devices are listed.
pub fn devices(fd: RawFd) -> io::Result<(u64, Vec<std::path::PathBuf>)> {
    let mut info = vec![0u8; FS_INFO_SIZE];
    // SAFETY: the argument is the struct or buffer this request takes, sized as it encodes.
    unsafe { ioctl(fd, BTRFS_IOC_FS_INFO, info.as_mut_ptr().cast()) }?;
    let u64_at = |b: &[u8], o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
    let (max_id, count) = (u64_at(&info, 0), u64_at(&info, 8));
    let mut paths = Vec::new();
    for id in 1..=max_id.min(4096) {
        if paths.len() as u64 >= count.min(64) {
            break;
        }
        let mut dev = vec![0u8; DEV_INFO_SIZE];
        dev[..8].copy_from_slice(&id.to_ne_bytes());
        // SAFETY: the argument is the struct or buffer this request takes, sized as it encodes.
        match unsafe { ioctl(fd, BTRFS_IOC_DEV_INFO, dev.as_mut_ptr().cast()) } {
            Ok(()) => {}
            // A removed device leaves a hole in the ids.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => continue,
            Err(e) => return Err(e),
        }
        let name = &dev[DEV_INFO_PATH..];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        paths.push(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(
            &name[..end],
        )));
    }
    Ok((count, paths))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_structs_are_4096_bytes() {
        assert_eq!(size_of::<VolArgs>(), 4096);
        assert_eq!(size_of::<VolArgsV2>(), 4096);
        assert_eq!(libc::FICLONE as u32, iow(0x94, 9, size_of::<libc::c_int>()));
    }
}
