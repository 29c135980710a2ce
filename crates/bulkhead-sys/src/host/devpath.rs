//! A device argument of an I/O directive (`IOReadBandwidthMax = "/var/lib/postgresql 10M"`)
//! as the whole disk the kernel's I/O controllers act on, resolved the way systemd's
//! `lookup_block_device()` (src/core/cgroup.c) does it:
//!
//! 1. `/dev/block/MAJ:MIN` is taken as written (no device node needed);
//! 2. any other path is opened once (O_PATH; symlinks are followed as stat(2) follows them,
//!    /dev/disk/by-id/... names are symlinks) and decided on by fstat of that descriptor: a
//!    character device is refused, a block device is itself, any other file stands for the
//!    block device its file system is on (st_dev); btrfs, whose st_dev is anonymous, is
//!    asked for its device through the same descriptor (single-device btrfs only, as in
//!    systemd: a multi-device one has no one disk);
//! 3. device-mapper layers (LUKS, LVM on one disk) are followed down while every device below
//!    is on the same disk (systemd's `block_get_originating()`);
//! 4. a partition becomes its whole disk (`block_get_whole_disk()`): io.max, io.weight,
//!    io.latency and io.cost take whole disks only.

use super::block::DevNum;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// Where a device argument leads.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Disk {
    /// The whole disk.
    pub dev: DevNum,
    /// How the path led there, for `plan show`: `on ext4 of sda2 (8:2), a partition of sda
    /// (8:0)`; empty when the path named the disk itself.
    pub via: String,
}

impl DevNum {
    /// Resolve what systemd accepts for I/O directives: a block device node, or any path on a
    /// file system (then the disk backing it), down to the whole disk (see
    /// [`resolve_device_path`], which also says how it got there).
    pub fn resolve(path: &Path) -> Result<DevNum, String> {
        resolve_device_path(&path.to_string_lossy()).map(|d| d.dev)
    }

    /// The whole disk a partition belongs to (itself when it is one).
    pub fn whole_disk(self) -> DevNum {
        whole_disk_in(self, Path::new("/sys"))
    }
}

/// Resolve a device argument on this machine (see the module's text).
pub fn resolve_device_path(path: &str) -> Result<Disk, String> {
    resolve_in(path, Path::new("/sys"))
}

/// The disk behind a file already open (by [`crate::hostpath::HostPath`], say): steps 2 to 4
/// on the descriptor, the name never looked up again; `shown` names it in messages.
pub fn resolve_device_fd(fd: BorrowedFd<'_>, shown: &str) -> Result<Disk, String> {
    let sys = Path::new("/sys");
    let mut via = Vec::new();
    let first = backing_fd(fd, shown, sys, &mut via)?;
    known(first, shown, sys)?;
    let dev = chase(first, sys, &mut via);
    Ok(Disk {
        dev,
        via: via.join(", "),
    })
}

fn known(dev: DevNum, path: &str, sys: &Path) -> Result<(), String> {
    if sys.join(format!("dev/block/{dev}")).exists() {
        return Ok(());
    }
    Err(format!(
        "'{path}' leads to device {dev}, which the kernel does not know as a block device"
    ))
}

fn resolve_in(path: &str, sys: &Path) -> Result<Disk, String> {
    let mut via = Vec::new();
    let first = match parse_dev_block(path) {
        Some(d) => d,
        None => backing(path, sys, &mut via)?,
    };
    known(first, path, sys)?;
    let dev = chase(first, sys, &mut via);
    Ok(Disk {
        dev,
        via: via.join(", "),
    })
}

/// `/dev/block/8:0` -> 8:0, as systemd's device_path_parse_major_minor() reads it.
fn parse_dev_block(path: &str) -> Option<DevNum> {
    let (a, b) = path.strip_prefix("/dev/block/")?.split_once(':')?;
    Some(DevNum {
        major: a.parse().ok()?,
        minor: b.parse().ok()?,
    })
}

fn errno(e: rustix::io::Errno) -> String {
    crate::error::errno_text(&std::io::Error::from(e))
}

/// The block device a path is or is on (step 2).
fn backing(path: &str, sys: &Path, via: &mut Vec<String>) -> Result<DevNum, String> {
    use rustix::fs::{open, Mode, OFlags};
    let fd = open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("cannot open '{path}': {}", errno(e)))?;
    backing_fd(fd.as_fd(), path, sys, via)
}

/// Step 2 on an open descriptor (`path` only names it in messages).
fn backing_fd(
    fd: BorrowedFd<'_>,
    path: &str,
    sys: &Path,
    via: &mut Vec<String>,
) -> Result<DevNum, String> {
    use rustix::fs::{fstat, fstatfs, open, FileType, Mode, OFlags};
    let st = fstat(fd).map_err(|e| format!("cannot stat '{path}': {}", errno(e)))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    match kind {
        FileType::CharacterDevice => {
            return Err(format!(
                "'{path}' is a character device; the I/O controllers need a block device"
            ))
        }
        FileType::BlockDevice => return Ok(DevNum::from_raw(st.st_rdev)),
        _ => {}
    }
    let magic = fstatfs(fd).map(|s| s.f_type as u32).unwrap_or(0);
    let fs = crate::statfs::fs_name(magic);
    let dev = DevNum::from_raw(st.st_dev);
    if dev.major != 0 {
        via.push(format!("on {fs} of {}", label(dev, sys)));
        return Ok(dev);
    }
    let file_or_dir = matches!(kind, FileType::RegularFile | FileType::Directory);
    if magic != crate::statfs::BTRFS_MAGIC || !file_or_dir {
        return Err(format!(
            "'{path}' is on {fs}, a file system with no block device behind it (device {dev})"
        ));
    }
    // btrfs: ask the file system through the descriptor already open (reopened for reading:
    // an O_PATH descriptor takes no ioctl).
    let rd = open(
        format!("/proc/self/fd/{}", fd.as_raw_fd()),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| {
        format!(
            "cannot open '{path}' to ask btrfs for its device: {}",
            errno(e)
        )
    })?;
    let (count, devices) = crate::btrfs::devices(rd.as_raw_fd()).map_err(|e| {
        format!(
            "cannot ask btrfs for the device of '{path}': {}",
            crate::error::errno_text(&e)
        )
    })?;
    if count != 1 {
        return Err(format!(
            "'{path}' is on a btrfs spread over {count} devices ({}); the I/O controllers act on one disk at a time",
            devices
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let Some(node) = devices.first() else {
        return Err(format!("btrfs names no device for '{path}'"));
    };
    let dev = rustix::fs::stat(node)
        .ok()
        .filter(|s| FileType::from_raw_mode(s.st_mode) == FileType::BlockDevice)
        .map(|s| DevNum::from_raw(s.st_rdev))
        .ok_or_else(|| {
            format!(
                "'{path}' is on btrfs, whose device {} is not a block device node here",
                node.display()
            )
        })?;
    via.push(format!("on btrfs of {}", label(dev, sys)));
    Ok(dev)
}

/// Steps 3 and 4: down through device-mapper layers on one disk, then to the whole disk.
fn chase(mut dev: DevNum, sys: &Path, via: &mut Vec<String>) -> DevNum {
    // A bound on the layers followed (a loop in a broken sysfs cannot hang).
    for _ in 0..16 {
        let Some(next) = below(dev, sys) else { break };
        via.push(format!(
            "{} is mapped onto {}",
            label(dev, sys),
            label(next, sys)
        ));
        dev = next;
    }
    let whole = whole_disk_in(dev, sys);
    if whole != dev {
        via.push(format!("a partition of {}", label(whole, sys)));
    }
    whole
}

/// The one device a stacked device (dm, md) sits on: its `slaves/`, when they are all on one
/// disk (dm-verity's data and hash partitions, say); None when there are none or they are on
/// several disks (then the stacked device itself is what the controllers see).
fn below(dev: DevNum, sys: &Path) -> Option<DevNum> {
    let dir = sys.join(format!("dev/block/{dev}/slaves"));
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut first: Option<(DevNum, DevNum)> = None;
    for n in names.iter().take(256) {
        let Some(d) = read_devnum(&sys.join(format!("class/block/{n}/dev"))) else {
            continue;
        };
        let whole = whole_disk_in(d, sys);
        match first {
            None => first = Some((d, whole)),
            Some((_, w)) if w != whole => return None,
            Some(_) => {}
        }
    }
    first.map(|(d, _)| d)
}

/// The whole disk of a partition, as block_get_whole_disk(): a device with a request queue is
/// one; a partition's parent is, when it has one.
fn whole_disk_in(dev: DevNum, sys: &Path) -> DevNum {
    let base = sys.join(format!("dev/block/{dev}"));
    if base.join("queue").exists() || !base.join("partition").exists() {
        return dev;
    }
    match read_devnum(&base.join("../dev")) {
        Some(p) if sys.join(format!("dev/block/{p}/queue")).exists() => p,
        _ => dev,
    }
}

fn read_devnum(p: &PathBuf) -> Option<DevNum> {
    let t = std::fs::read_to_string(p).ok()?;
    let (a, b) = t.trim().split_once(':')?;
    Some(DevNum {
        major: a.parse().ok()?,
        minor: b.parse().ok()?,
    })
}

/// `sda2 (8:2)`, or `8:2` where sysfs has no name for it.
fn label(dev: DevNum, sys: &Path) -> String {
    match std::fs::read_link(sys.join(format!("dev/block/{dev}"))) {
        Ok(l) => match l.file_name() {
            Some(n) => format!("{} ({dev})", n.to_string_lossy()),
            None => dev.to_string(),
        },
        Err(_) => dev.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// A sysfs with sda (8:0) and its partition sda2 (8:2), sdb (8:16), a dm-crypt dm-0
    /// (253:0) on sda2 and an LVM dm-1 (253:1) striped over sda2 and sdb.
    fn fake_sys() -> PathBuf {
        let root = std::env::temp_dir().join(format!("bulkhead-devpath-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let dev = |rel: &str, num: &str, queue: bool, part: bool| {
            let d = root.join("devices").join(rel);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("dev"), format!("{num}\n")).unwrap();
            if queue {
                fs::create_dir_all(d.join("queue")).unwrap();
            }
            if part {
                fs::write(d.join("partition"), "2\n").unwrap();
            }
            let name = Path::new(rel)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            fs::create_dir_all(root.join("dev/block")).unwrap();
            fs::create_dir_all(root.join("class/block")).unwrap();
            symlink(&d, root.join(format!("dev/block/{num}"))).unwrap();
            symlink(&d, root.join(format!("class/block/{name}"))).unwrap();
            d
        };
        dev("sda", "8:0", true, false);
        dev("sda/sda2", "8:2", false, true);
        dev("sdb", "8:16", true, false);
        let dm0 = dev("dm-0", "253:0", true, false);
        fs::create_dir_all(dm0.join("slaves")).unwrap();
        symlink(root.join("devices/sda/sda2"), dm0.join("slaves/sda2")).unwrap();
        let dm1 = dev("dm-1", "253:1", true, false);
        fs::create_dir_all(dm1.join("slaves")).unwrap();
        symlink(root.join("devices/sda/sda2"), dm1.join("slaves/sda2")).unwrap();
        symlink(root.join("devices/sdb"), dm1.join("slaves/sdb")).unwrap();
        root
    }

    #[test]
    fn partitions_and_device_mapper_lead_to_the_whole_disk() {
        let sys = fake_sys();
        let d = |a, b| DevNum { major: a, minor: b };
        let mut via = vec![];
        assert_eq!(chase(d(8, 2), &sys, &mut via), d(8, 0));
        assert_eq!(via, ["a partition of sda (8:0)"]);
        let mut via = vec![];
        assert_eq!(chase(d(253, 0), &sys, &mut via), d(8, 0));
        assert_eq!(
            via,
            [
                "dm-0 (253:0) is mapped onto sda2 (8:2)",
                "a partition of sda (8:0)"
            ]
        );
        // Striped over two disks: the dm device is what the controllers see.
        let mut via = vec![];
        assert_eq!(chase(d(253, 1), &sys, &mut via), d(253, 1));
        assert!(via.is_empty());
        let r = resolve_in("/dev/block/8:2", &sys).unwrap();
        assert_eq!(r.dev, d(8, 0));
        assert!(resolve_in("/dev/block/9:9", &sys)
            .unwrap_err()
            .contains("does not know"));
        fs::remove_dir_all(&sys).unwrap();
    }

    #[test]
    fn this_machines_paths() {
        // A directory on a disk file system leads to a disk /sys knows.
        let root = resolve_device_path("/").unwrap();
        assert!(Path::new(&format!("/sys/dev/block/{}", root.dev)).exists());
        assert!(!root.via.is_empty(), "{root:?}");
        let e = resolve_device_path("/dev/null").unwrap_err();
        assert!(e.contains("character device"), "{e}");
        let e = resolve_device_path("/proc/self").unwrap_err();
        assert!(e.contains("no block device behind it"), "{e}");
        let e = resolve_device_path("/no/such/path").unwrap_err();
        assert!(e.contains("cannot open '/no/such/path'"), "{e}");
    }
}
