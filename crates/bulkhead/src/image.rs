//! Root file system images for sandboxes, and the btrfs store that holds them.
//!
//! An image is a directory named by a plain name in the images directory: the mount point of
//! the image store when one is recorded (a loop-mounted btrfs file, so images are subvolumes
//! and sandboxes start from a snapshot in constant time), else `/var/lib/bulkhead/images`.
//! Snapshots of an image are made beside it (see [`crate::snapshot`]), hidden by their
//! `.#bulkhead-` names, which `list` skips.

use crate::snapshot;
use bulkhead_sys::btrfs::{self, BTRFS_MAGIC};
use bulkhead_sys::dir::private_dir;
use bulkhead_sys::error::{errno_text, io_failed, Diagnostic, Error, Result};
use bulkhead_sys::statfs::fs_magic;
use bulkhead_sys::tree::{self, CopyFail};
use bulkhead_sys::units::human_bytes;
use std::collections::HashSet;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use bulkhead_sys::paths::{
    default_images_dir, store_record_path, DEFAULT_IMAGES_DIR, DEFAULT_STORE_RECORD,
};
/// mkfs.btrfs refuses smaller devices (DUP metadata, btrfs-progs 5.15 and later).
pub const MIN_STORE_SIZE: u64 = 114_294_784;

/// What `image store create` wrote down, so `store mount` can bring it back after a reboot.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoreRecord {
    /// The btrfs image file.
    pub file: PathBuf,
    /// Where it is mounted: the images directory.
    pub mount: PathBuf,
    pub size: u64,
    /// Seconds since the epoch.
    pub created: u64,
}

/// One image.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Image {
    pub name: String,
    pub path: PathBuf,
    /// Bytes allocated, counted like du (hard links once, one file system).
    pub size: u64,
    /// Seconds since the epoch (birth time where the file system keeps it, else mtime).
    pub created: Option<u64>,
    pub subvolume: bool,
}

/// The store as it is now.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StoreStatus {
    pub record_path: PathBuf,
    pub record: StoreRecord,
    pub mounted: bool,
    pub loop_device: Option<String>,
    /// Bytes used and available on the mounted file system.
    pub used: Option<u64>,
    pub free: Option<u64>,
    pub images: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// The store was mounted (or unmounted) now.
    Now,
    /// It already was.
    Already,
}

/// The recorded store, if any.
pub fn read_store() -> Result<Option<StoreRecord>> {
    let path = store_record_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_failed("cannot read the image store record", &path, e)),
    };
    toml::from_str(&text).map(Some).map_err(|e| {
        Error::invalid(
            Diagnostic::error(format!("not an image store record: {}", e.message()))
                .at(path.display().to_string())
                .hint("fix or remove the file (bulkhead image store create writes it)"),
        )
    })
}

/// Where images live now: the store's mount point (which must be mounted), else the default
/// directory. It is kept 0700 (root's alone): an image's setuid binaries are nobody's way to
/// root.
pub fn images_dir() -> Result<PathBuf> {
    let dir = where_images_live()?;
    if dir.is_dir() {
        // Best effort here (an older install made it 0755); import and the store insist.
        let _ = private_dir(&dir);
    }
    Ok(dir)
}

fn where_images_live() -> Result<PathBuf> {
    match read_store()? {
        Some(rec) => {
            if mounted_loop(&rec)?.is_none() {
                return Err(Error::failed(format!(
                    "the image store {} is not mounted at {}",
                    rec.file.display(),
                    rec.mount.display()
                ))
                .with_hint("mount it: bulkhead image store mount"));
            }
            Ok(rec.mount)
        }
        None => Ok(default_images_dir()),
    }
}

/// Whether images are btrfs subvolumes here (the images directory is on btrfs).
pub fn images_on_btrfs() -> bool {
    images_dir().is_ok_and(|d| fs_magic(&d) == Some(BTRFS_MAGIC))
}

/// Image names are plain names: `[A-Za-z0-9][A-Za-z0-9._-]*`, at most 128 characters.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        return Ok(());
    }
    Err(Error::invalid(
        Diagnostic::error(format!("'{name}' is not an image name")).hint(
            "use letters, digits, '.', '_' and '-', starting with a letter or digit (at most 128)",
        ),
    ))
}

/// The directory for `spawn -D`: a value with '/' or naming an existing directory is a path;
/// anything else is an image name.
pub fn resolve_image(name_or_path: &str) -> Result<PathBuf> {
    let p = Path::new(name_or_path);
    if name_or_path.contains('/') || p.is_dir() {
        return Ok(p.to_path_buf());
    }
    if check_name(name_or_path).is_err() {
        return Err(Error::invalid(
            Diagnostic::error(format!(
                "'{name_or_path}' is neither a directory nor an image name"
            ))
            .hint("give a root file system directory, or an image name from bulkhead image list"),
        ));
    }
    let dir = images_dir()?;
    let path = dir.join(name_or_path);
    if path.is_dir() {
        return Ok(path);
    }
    Err(Error::invalid(
        Diagnostic::error(format!(
            "no image named '{name_or_path}' in {}, and no directory {name_or_path} here",
            dir.display()
        ))
        .hint(format!(
            "bulkhead image list shows the images; bulkhead image import SRC {name_or_path} makes one"
        )),
    ))
}

// ---------------------------------------------------------------------------------------
// The store

/// Create the store: `file` of `size` bytes, formatted as btrfs, loop-mounted at `mount`
/// (default the images directory), and recorded. Bad input changes nothing; a failure
/// midway undoes every step.
pub fn store_create(file: &Path, size: u64, mount: Option<&Path>) -> Result<StoreRecord> {
    let record_path = store_record_path();
    if let Some(rec) = read_store()? {
        return Err(Error::invalid(
            Diagnostic::error(format!(
                "an image store is already recorded: {} at {}",
                rec.file.display(),
                rec.mount.display()
            ))
            .at(record_path.display().to_string())
            .hint(format!(
                "use it, or retire it first: bulkhead image store umount; rm {}",
                record_path.display()
            )),
        ));
    }
    let file = std::path::absolute(file).map_err(|e| io_failed("cannot use", file, e))?;
    let mount = mount.map(PathBuf::from).unwrap_or_else(default_images_dir);
    let mount = std::path::absolute(&mount).map_err(|e| io_failed("cannot use", &mount, e))?;
    for (what, p) in [("PATH", &file), ("--mount", &mount)] {
        if p.to_str().is_none() {
            return Err(Error::invalid(
                Diagnostic::error(format!("{what} {} is not valid UTF-8", p.display()))
                    .hint("the store record is TOML: choose a UTF-8 path"),
            ));
        }
    }
    if std::fs::symlink_metadata(&file).is_ok() {
        return Err(Error::invalid(
            Diagnostic::error(format!("{} exists already", file.display()))
                .hint("give a new file name; bulkhead never formats an existing file"),
        ));
    }
    let parent = file.parent().unwrap_or(Path::new("/"));
    if !parent.is_dir() {
        return Err(Error::invalid(
            Diagnostic::error(format!("{} is not a directory", parent.display()))
                .hint("create it first, or put the store file elsewhere"),
        ));
    }
    if size < MIN_STORE_SIZE {
        return Err(Error::invalid(
            Diagnostic::error(format!(
                "--size {} is too small: mkfs.btrfs needs at least {} ({MIN_STORE_SIZE} bytes)",
                human_bytes(size),
                human_bytes(MIN_STORE_SIZE)
            ))
            .hint("give --size 1G or more; images need room too"),
        ));
    }
    let free = available_bytes(parent).map_err(|e| io_failed("cannot statvfs", parent, e))?;
    if size > free {
        return Err(Error::invalid(
            Diagnostic::error(format!(
                "--size {} ({size} bytes) does not fit: the file system holding {} has {} ({free} bytes) free",
                human_bytes(size),
                parent.display(),
                human_bytes(free)
            ))
            .hint("give a smaller --size, or put the store file on another file system"),
        ));
    }
    let mkfs = find_tool("mkfs.btrfs").ok_or_else(|| {
        Error::invalid(
            Diagnostic::error("mkfs.btrfs is not installed")
                .hint("apt install btrfs-progs (dnf install btrfs-progs)"),
        )
    })?;
    if file.starts_with(&mount) {
        return Err(Error::invalid(
            Diagnostic::error(format!(
                "{} is inside the mount point {}, where the store would hide it",
                file.display(),
                mount.display()
            ))
            .hint("put the store file outside --mount"),
        ));
    }
    check_mount_dir(&mount)?;

    let mut undo = Undo::default();
    let result = (|| {
        allocate(&file, size, &mut undo)?;
        let out = Command::new(&mkfs)
            .args(["-q", "-L", "bulkhead-images"])
            .arg(&file)
            .output()
            .map_err(|e| io_failed("cannot run", &mkfs, e))?;
        if !out.status.success() {
            return Err(Error::failed(format!(
                "mkfs.btrfs {} failed: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        undo.dirs = create_dirs(&mount)?;
        loop_mount(&file, &mount)?;
        undo.mounted = Some((file.clone(), mount.clone()));
        let rec = StoreRecord {
            file: file.clone(),
            mount: mount.clone(),
            size,
            created: now_secs(),
        };
        write_record(&record_path, &rec)?;
        Ok(rec)
    })();
    if result.is_ok() {
        undo.disarm();
    }
    result
}

/// Everything `store_create` did so far, undone on drop unless disarmed.
#[derive(Default)]
struct Undo {
    file: Option<PathBuf>,
    dirs: Vec<PathBuf>,
    mounted: Option<(PathBuf, PathBuf)>,
}

impl Undo {
    fn disarm(&mut self) {
        self.file = None;
        self.dirs.clear();
        self.mounted = None;
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        if let Some((file, mount)) = self.mounted.take() {
            if nix::mount::umount2(&mount, nix::mount::MntFlags::empty()).is_err() {
                let _ = nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH);
            }
            let _ = detach_loops(&file);
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
        if let Some(f) = self.file.take() {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn allocate(file: &Path, size: u64, undo: &mut Undo) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .map_err(|e| io_failed("cannot create", file, e))?;
    undo.file = Some(file.to_path_buf());
    if let Err(e) = rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, size) {
        let e = io::Error::from(e);
        if e.raw_os_error() == Some(libc::ENOSPC) {
            return Err(Error::failed(format!(
                "the file system holding {} has no room for {}",
                file.display(),
                human_bytes(size)
            ))
            .with_hint("give a smaller --size"));
        }
        // A file system without fallocate: a sparse file does.
        f.set_len(size)
            .map_err(|e| io_failed("cannot size", file, e))?;
    }
    Ok(())
}

/// The mount point must be an empty directory that nothing is mounted on, or not exist.
fn check_mount_dir(mount: &Path) -> Result<()> {
    let bad = |m: String, h: &str| Err(Error::invalid(Diagnostic::error(m).hint(h)));
    match std::fs::symlink_metadata(mount) {
        Err(_) => Ok(()),
        Ok(md) if !md.is_dir() => bad(
            format!("--mount {} is not a directory", mount.display()),
            "give a directory (it is created when missing)",
        ),
        Ok(_) if is_mount_point(mount) => bad(
            format!("something is already mounted at {}", mount.display()),
            "unmount it, or give another --mount",
        ),
        Ok(_) => match std::fs::read_dir(mount).map(|mut d| d.next().is_none()) {
            Ok(true) => Ok(()),
            _ => bad(
                format!("--mount {} is not empty", mount.display()),
                "the store would hide what is there: move it away, or give another --mount",
            ),
        },
    }
}

fn is_mount_point(p: &Path) -> bool {
    mountinfo().iter().any(|m| m.point == p)
}

/// Create `dir` and its missing parents; returns the ones created, outermost first.
fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut d = dir;
    while std::fs::symlink_metadata(d).is_err() {
        missing.push(d.to_path_buf());
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    missing.reverse();
    for (i, m) in missing.iter().enumerate() {
        if let Err(e) = std::fs::create_dir(m) {
            for made in missing[..i].iter().rev() {
                let _ = std::fs::remove_dir(made);
            }
            return Err(io_failed("cannot create", m, e));
        }
    }
    Ok(missing)
}

fn write_record(path: &Path, rec: &StoreRecord) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_failed("cannot create", parent, e))?;
    }
    let text = format!(
        "# The bulkhead image store, written by `bulkhead image store create`.\n{}",
        toml::to_string(rec).map_err(|e| Error::failed(format!("cannot write the record: {e}")))?
    );
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io_failed("cannot write", path, e)
        })
}

/// `mount -o loop`: util-linux finds a free loop device (retrying when another process takes
/// it first), sets it to detach itself at the last close, and detaches it if mounting fails.
fn loop_mount(file: &Path, mount: &Path) -> Result<()> {
    let out = Command::new("mount")
        .args(["-t", "btrfs", "-o", "loop,noatime,nosuid,nodev"])
        .arg(file)
        .arg(mount)
        .output()
        .map_err(|e| io_failed("cannot run", Path::new("mount"), e))?;
    if !out.status.success() {
        return Err(Error::failed(format!(
            "cannot mount {} at {}: {}",
            file.display(),
            mount.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    // nosuid,nodev: setuid bits and device nodes of images do nothing from the host path;
    // 0700: no host user reaches the images at all.
    private_dir(mount).map_err(|e| io_failed("cannot make private (0700)", mount, e))
}

/// Mount the recorded store (after a reboot). Already mounted: `Done::Already`.
pub fn store_mount() -> Result<(StoreRecord, Done)> {
    let rec = require_store()?;
    if mounted_loop(&rec)?.is_some() {
        return Ok((rec, Done::Already));
    }
    if !rec.file.is_file() {
        return Err(Error::failed(format!(
            "the image store file {} is missing",
            rec.file.display()
        ))
        .with_hint(format!(
            "restore it, or forget the store: rm {}",
            store_record_path().display()
        )));
    }
    // A loop device left attached without its mount would make btrfs see the file system twice.
    detach_loops(&rec.file)?;
    let created = create_dirs(&rec.mount)?;
    if let Err(e) = loop_mount(&rec.file, &rec.mount) {
        for d in created.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
        return Err(e);
    }
    Ok((rec, Done::Now))
}

/// Unmount the store and detach its loop device; the file stays.
pub fn store_umount() -> Result<(StoreRecord, Done)> {
    let rec = require_store()?;
    if mounted_loop(&rec)?.is_none() {
        detach_loops(&rec.file)?;
        return Ok((rec, Done::Already));
    }
    if let Err(e) = nix::mount::umount2(&rec.mount, nix::mount::MntFlags::empty()) {
        return Err(Error::failed(format!(
            "cannot unmount the image store at {}: {}",
            rec.mount.display(),
            e.desc()
        ))
        .with_hint(if e == nix::errno::Errno::EBUSY {
            format!(
                "sandboxes or shells still use it (fuser -vm {}); stop them first",
                rec.mount.display()
            )
        } else {
            "run as root".to_string()
        }));
    }
    detach_loops(&rec.file)?;
    Ok((rec, Done::Now))
}

pub fn store_status() -> Result<Option<StoreStatus>> {
    let Some(rec) = read_store()? else {
        return Ok(None);
    };
    let loop_device = mounted_loop(&rec)?;
    let mounted = loop_device.is_some();
    let (mut used, mut free, mut images) = (None, None, None);
    if mounted {
        if let Ok((total, avail)) = statvfs(&rec.mount) {
            free = Some(avail);
            used = Some(total.saturating_sub(avail));
        }
        images = Some(list_in(&rec.mount).map(|l| l.len()).unwrap_or(0));
    }
    Ok(Some(StoreStatus {
        record_path: store_record_path(),
        record: rec,
        mounted,
        loop_device,
        used,
        free,
        images,
    }))
}

fn require_store() -> Result<StoreRecord> {
    read_store()?.ok_or_else(|| {
        Error::invalid(
            Diagnostic::error(format!(
                "no image store is recorded (in {})",
                store_record_path().display()
            ))
            .hint(
                "create one: bulkhead image store create --size 10G /var/lib/bulkhead/images.btrfs",
            ),
        )
    })
}

struct MountLine {
    point: PathBuf,
    fstype: String,
    source: String,
}

fn mountinfo() -> Vec<MountLine> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = bulkhead_sys::mountinfo::unescape(left.split(' ').nth(4)?);
            let mut r = right.split(' ');
            Some(MountLine {
                point,
                fstype: r.next()?.to_string(),
                source: r.next()?.to_string(),
            })
        })
        .collect()
}

/// The loop device the store is mounted from, when its mount point shows it; an error when
/// something else is mounted there.
fn mounted_loop(rec: &StoreRecord) -> Result<Option<String>> {
    let Some(m) = mountinfo().into_iter().rev().find(|m| m.point == rec.mount) else {
        return Ok(None);
    };
    let dev = m.source.rsplit('/').next().unwrap_or("");
    let backing = loop_backing_file(dev);
    let file = std::fs::canonicalize(&rec.file).unwrap_or_else(|_| rec.file.clone());
    if m.fstype == "btrfs" && backing.as_deref() == Some(file.as_path()) {
        return Ok(Some(m.source));
    }
    Err(Error::failed(format!(
        "{} is mounted at {}, not the image store {}",
        m.source,
        rec.mount.display(),
        rec.file.display()
    ))
    .with_hint(format!("unmount it (umount {})", rec.mount.display())))
}

fn loop_backing_file(dev: &str) -> Option<PathBuf> {
    if !dev.starts_with("loop") {
        return None;
    }
    let t = std::fs::read_to_string(format!("/sys/block/{dev}/loop/backing_file")).ok()?;
    let t = t.trim_end_matches('\n');
    Some(PathBuf::from(t.strip_suffix(" (deleted)").unwrap_or(t)))
}

/// Loop devices backed by `file`.
fn loops_of(file: &Path) -> Vec<String> {
    let file = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut out: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|d| loop_backing_file(d).as_deref() == Some(file.as_path()))
        .map(|d| format!("/dev/{d}"))
        .collect();
    out.sort();
    out
}

/// Detach the loop devices of `file`: they detach themselves after the unmount (autoclear),
/// which may take a moment; what is left is detached here.
fn detach_loops(file: &Path) -> Result<()> {
    for _ in 0..50 {
        if loops_of(file).is_empty() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for dev in loops_of(file) {
        let out = Command::new("losetup")
            .arg("-d")
            .arg(&dev)
            .output()
            .map_err(|e| io_failed("cannot run", Path::new("losetup"), e))?;
        if !out.status.success() && !loops_of(file).is_empty() {
            return Err(Error::failed(format!(
                "cannot detach {dev} from {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    Ok(())
}

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    found
}

fn statvfs(p: &Path) -> io::Result<(u64, u64)> {
    bulkhead_sys::statfs::space(p)
}

fn available_bytes(p: &Path) -> io::Result<u64> {
    statvfs(p).map(|(_, avail)| avail)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// Images

/// Tarball endings `import` accepts; GNU tar recognises the compression itself.
const TAR_ENDINGS: [&str; 9] = [
    ".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.xz", ".txz", ".tar.bz2", ".tbz2",
];

/// Import a directory or a tarball as the image `name`: a btrfs subvolume when the images
/// directory is on btrfs, else a plain directory. It is built under a hidden name and renamed
/// at the end, so a failure (or a crash) never leaves a half image under `name`.
pub fn import(src: &Path, name: &str, read_only: bool) -> Result<Image> {
    if read_only && !images_on_btrfs() {
        return Err(Error::invalid(
            Diagnostic::error(
                "--read-only needs the btrfs image store: images here are plain directories",
            )
            .hint("create the store first: bulkhead image store create --size 10G FILE"),
        ));
    }
    let img = import_tree(src, name)?;
    if read_only {
        snapshot::set_read_only(&img.path)
            .map_err(|e| io_failed("cannot make the image read-only:", &img.path, e))?;
    }
    Ok(img)
}

fn import_tree(src: &Path, name: &str) -> Result<Image> {
    check_name(name)?;
    let md = std::fs::metadata(src).map_err(|e| {
        Error::invalid(
            Diagnostic::error(format!(
                "cannot import {}: {}",
                src.display(),
                errno_text(&e)
            ))
            .hint(
                "give a root file system directory or a tarball (.tar, .tar.gz, .tar.zst, .tar.xz)",
            ),
        )
    })?;
    let tarball = if md.is_dir() {
        false
    } else if md.is_file() {
        let n = src.to_string_lossy();
        if !TAR_ENDINGS.iter().any(|e| n.ends_with(e)) {
            return Err(Error::invalid(
                Diagnostic::error(format!(
                    "{} is neither a directory nor a tarball",
                    src.display()
                ))
                .hint(format!("tarballs end in {}", TAR_ENDINGS.join(", "))),
            ));
        }
        if find_tool("tar").is_none() {
            return Err(Error::invalid(
                Diagnostic::error("tar is not installed").hint("apt install tar"),
            ));
        }
        true
    } else {
        return Err(Error::invalid(
            Diagnostic::error(format!(
                "{} is neither a directory nor a tarball",
                src.display()
            ))
            .hint("give a root file system directory or a tarball"),
        ));
    };
    let dir = images_dir()?;
    let dest = dir.join(name);
    let exists = || {
        Error::invalid(
            Diagnostic::error(format!(
                "an image named '{name}' exists already ({})",
                dest.display()
            ))
            .hint(format!(
                "remove it first (bulkhead image rm {name}), or choose another name"
            )),
        )
    };
    if std::fs::symlink_metadata(&dest).is_ok() {
        return Err(exists());
    }
    if !tarball {
        let s = std::fs::canonicalize(src).map_err(|e| io_failed("cannot resolve", src, e))?;
        let d = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        if d.starts_with(&s) {
            return Err(Error::invalid(
                Diagnostic::error(format!(
                    "{} contains the images directory {}: the copy would contain itself",
                    src.display(),
                    dir.display()
                ))
                .hint("import a directory outside it"),
            ));
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| io_failed("cannot create", &dir, e))?;
    private_dir(&dir).map_err(|e| io_failed("cannot make private (0700)", &dir, e))?;
    sweep_stale_imports(&dir);
    let tmp = dir.join(format!(".#import-{name}-{}", std::process::id()));
    let _ = remove_any(&tmp);
    let subvolume = fs_magic(&dir) == Some(BTRFS_MAGIC);
    if subvolume {
        btrfs::subvolume_create(&tmp)
            .map_err(|e| io_failed("cannot create the btrfs subvolume", &tmp, e))?;
    } else {
        std::fs::create_dir(&tmp).map_err(|e| io_failed("cannot create", &tmp, e))?;
    }
    let filled = if tarball {
        untar(src, &tmp)
    } else {
        tree::copy_tree(src, &tmp, false, false).map_err(|e| match e {
            CopyFail::At(p, what, e) => match e.raw_os_error() {
                Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::failed(format!(
                    "the file system holding {} is full (while copying {})",
                    dir.display(),
                    p.display()
                ))
                .with_hint("make room, or create a bigger image store"),
                _ => Error::failed(format!("{what} {}: {}", p.display(), errno_text(&e))),
            },
            CopyFail::NoReflink(e) => {
                Error::failed(format!("cannot copy {}: {}", src.display(), errno_text(&e)))
            }
        })
    };
    let renamed = filled.and_then(|()| {
        rename_noreplace(&tmp, &dest).map_err(|e| {
            if e.raw_os_error() == Some(libc::EEXIST) {
                exists()
            } else {
                io_failed("cannot rename", &tmp, e)
            }
        })
    });
    if let Err(e) = renamed {
        let _ = remove_any(&tmp);
        return Err(e);
    }
    Ok(describe(name, &dest))
}

/// GNU tar, not the `tar` crate: it already handles gzip, xz, zstd and bzip2 (by content),
/// hard links, sparse files, device nodes, extended attributes, and refuses members that
/// would land outside the directory (absolute names, `..`); it is on every host.
fn untar(src: &Path, into: &Path) -> Result<()> {
    let out = Command::new("tar")
        .args([
            "--extract",
            "--numeric-owner",
            "--same-owner",
            "--same-permissions",
            "--xattrs",
            "--xattrs-include=*",
            "--file",
        ])
        .arg(src)
        .arg("--directory")
        .arg(into)
        .output()
        .map_err(|e| io_failed("cannot run", Path::new("tar"), e))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let full = err.contains("No space left") || err.contains("Disk quota");
    let d = Diagnostic::error(format!(
        "cannot unpack {}: {}",
        src.display(),
        err.lines().take(3).collect::<Vec<_>>().join("; ")
    ));
    Err(Error::failed_with(if full {
        d.hint("the image directory is full: make room, or create a bigger image store")
    } else {
        d.hint("check the tarball (tar -tf), and that its compressor is installed (gzip, xz, zstd)")
    }))
}

fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        from,
        rustix::fs::CWD,
        to,
        rustix::fs::RenameFlags::NOREPLACE,
    )
    .map_err(Into::into)
}

/// Half imports of processes that died (`.#import-NAME-PID`).
fn sweep_stale_imports(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str() else { continue };
        let Some(rest) = n.strip_prefix(".#import-") else {
            continue;
        };
        let Some(pid) = rest.rsplit('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = remove_any(&e.path());
        }
    }
}

fn remove_any(p: &Path) -> std::result::Result<(), (PathBuf, io::Error)> {
    tree::remove_tree(p)
}

/// The images, by name.
pub fn list() -> Result<Vec<Image>> {
    let dir = images_dir()?;
    list_in(&dir).map_err(|e| io_failed("cannot read", &dir, e))
}

fn list_in(dir: &Path) -> io::Result<Vec<Image>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(name) = e.file_name().to_str().map(String::from) else {
            continue;
        };
        if name.starts_with('.') || !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        out.push(describe(&name, &e.path()));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn describe(name: &str, path: &Path) -> Image {
    let md = std::fs::symlink_metadata(path).ok();
    let created = md.as_ref().and_then(|m| {
        m.created()
            .or_else(|_| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
    });
    Image {
        name: name.to_string(),
        path: path.to_path_buf(),
        size: md.map(|m| du(path, m.dev())).unwrap_or(0),
        created,
        subvolume: btrfs::is_subvolume(path),
    }
}

/// Allocated bytes below `path`, like `du -sx`: hard links once.
fn du(path: &Path, dev: u64) -> u64 {
    fn walk(p: &Path, dev: u64, seen: &mut HashSet<(u64, u64)>) -> u64 {
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        let mut sum = 0;
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.nlink() > 1 && !md.is_dir() && !seen.insert((md.dev(), md.ino())) {
                continue;
            }
            sum += md.blocks() * 512;
            if md.is_dir() && md.dev() == dev {
                sum += walk(&e.path(), dev, seen);
            }
        }
        sum
    }
    let own = std::fs::symlink_metadata(path)
        .map(|m| m.blocks() * 512)
        .unwrap_or(0);
    own + walk(path, dev, &mut HashSet::new())
}

/// Remove the image `name`.
pub fn remove(name: &str) -> Result<Image> {
    check_name(name)?;
    let dir = images_dir()?;
    let path = dir.join(name);
    if !path.is_dir() {
        let known: Vec<String> = list_in(&dir)
            .unwrap_or_default()
            .into_iter()
            .map(|i| i.name)
            .collect();
        let hint = if known.is_empty() {
            format!("there are no images in {}", dir.display())
        } else {
            let near = bulkhead_plan::nearest(name, &known)
                .map(|k| format!("did you mean {k}? "))
                .unwrap_or_default();
            format!("{near}images: {}", known.join(", "))
        };
        return Err(Error::invalid(
            Diagnostic::error(format!("no image named '{name}' in {}", dir.display())).hint(hint),
        ));
    }
    let image = describe(name, &path);
    snapshot::drop_pool(&path);
    tree::remove_tree(&path).map_err(|(p, e)| {
        Error::failed(format!(
            "cannot remove the image {name}: {}: {}",
            p.display(),
            errno_text(&e)
        ))
    })?;
    Ok(image)
}

/// `YYYY-MM-DD HH:MM` in UTC.
pub fn format_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names() {
        for ok in ["busybox", "debian-12", "a", "A.b_c-d", "0day"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "-x",
            "_x",
            "a/b",
            "a b",
            "ü",
            &"x".repeat(129),
        ] {
            let e = check_name(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains("hint:"), "{e}");
        }
    }

    #[test]
    fn paths_are_paths() {
        assert_eq!(
            resolve_image("/srv/root").unwrap(),
            PathBuf::from("/srv/root")
        );
        assert_eq!(resolve_image("./x").unwrap(), PathBuf::from("./x"));
        assert_eq!(resolve_image(".").unwrap(), PathBuf::from("."));
        let e = resolve_image("no such:thing").unwrap_err();
        assert!(
            e.to_string()
                .contains("neither a directory nor an image name"),
            "{e}"
        );
    }

    #[test]
    fn dates() {
        assert_eq!(format_time(0), "1970-01-01 00:00");
        assert_eq!(format_time(951_782_400), "2000-02-29 00:00");
        assert_eq!(format_time(1_700_000_000), "2023-11-14 22:13");
    }

    #[test]
    fn records_round_trip() {
        let rec = StoreRecord {
            file: "/var/lib/bulkhead/images.btrfs".into(),
            mount: "/var/lib/bulkhead/images".into(),
            size: 10 << 30,
            created: 1_700_000_000,
        };
        let text = toml::to_string(&rec).unwrap();
        assert_eq!(toml::from_str::<StoreRecord>(&text).unwrap(), rec);
    }
}
