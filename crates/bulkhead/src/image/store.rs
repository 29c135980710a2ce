//! The image store: a btrfs file system in a file, loop-mounted at the images directory, and
//! recorded (`store.toml`) so that `store mount` brings it back after a reboot. Its file and
//! mount point are root's choice (arguments of `image store create`); they are looked at
//! without following a final symlink, written with O_EXCL, and the images directory itself is
//! opened by the host path rule (see the parent module).

use super::list_in;
use bulkhead_sys::dir::private_dir;
use bulkhead_sys::error::{errno_text, io_failed, Diagnostic, Error, Result};
use bulkhead_sys::hostpath::HostPath;
use bulkhead_sys::mountinfo::{self, unmount};
use bulkhead_sys::statefile;
use bulkhead_sys::units::human_bytes;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use bulkhead_sys::paths::{
    default_images_dir, store_record_path, DEFAULT_IMAGES_DIR, DEFAULT_STORE_RECORD,
};
/// mkfs.btrfs refuses smaller devices (DUP metadata, btrfs-progs 5.15 and later).
pub const MIN_STORE_SIZE: u64 = 114_294_784;
/// A store record is a few lines of TOML.
const MAX_RECORD: u64 = 64 << 10;

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
    let text = match statefile::read_string(&path, MAX_RECORD) {
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

/// Create the store: `file` of `size` bytes, formatted as btrfs, loop-mounted at `mount`
/// (default the images directory), and recorded. Bad input changes nothing; a failure
/// midway undoes every step.
pub fn store_create(file: &Path, size: u64, mount: Option<&Path>) -> Result<StoreRecord> {
    let record_path = store_record_path();
    refuse_second_store(&record_path)?;
    let (file, mount) = store_paths(file, mount)?;
    check_file(&file, size)?;
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
    let rec = StoreRecord {
        file,
        mount,
        size,
        created: 0,
    };
    let result = make_store(rec, &mkfs, &record_path, &mut undo);
    if result.is_ok() {
        undo.disarm();
    }
    result
}

/// One store at a time: a recorded one is used or retired first.
fn refuse_second_store(record_path: &Path) -> Result<()> {
    let Some(rec) = read_store()? else {
        return Ok(());
    };
    Err(Error::invalid(
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
    ))
}

/// The store file and its mount point as absolute paths the TOML record can hold.
fn store_paths(file: &Path, mount: Option<&Path>) -> Result<(PathBuf, PathBuf)> {
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
    Ok((file, mount))
}

/// The store file is new, in a directory, and `size` is big enough for mkfs.btrfs and fits
/// the file system holding it.
fn check_file(file: &Path, size: u64) -> Result<()> {
    if statefile::exists(file) {
        return Err(Error::invalid(
            Diagnostic::error(format!("{} exists already", file.display()))
                .hint("give a new file name; bulkhead never formats an existing file"),
        ));
    }
    let parent = file.parent().unwrap_or(Path::new("/"));
    if !HostPath::open(parent).is_ok_and(|h| h.is_dir()) {
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
    Ok(())
}

/// The steps, each recorded in `undo` as it is done: allocate, format, mount, record.
fn make_store(
    mut rec: StoreRecord,
    mkfs: &Path,
    record_path: &Path,
    undo: &mut Undo,
) -> Result<StoreRecord> {
    allocate(&rec.file, rec.size, undo)?;
    let out = Command::new(mkfs)
        .args(["-q", "-L", "bulkhead-images"])
        .arg(&rec.file)
        .output()
        .map_err(|e| io_failed("cannot run", mkfs, e))?;
    if !out.status.success() {
        return Err(Error::failed(format!(
            "mkfs.btrfs {} failed: {}",
            rec.file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    undo.dirs = create_dirs(&rec.mount)?;
    loop_mount(&rec.file, &rec.mount)?;
    undo.mounted = Some((rec.file.clone(), rec.mount.clone()));
    rec.created = now_secs();
    write_record(record_path, &rec)?;
    Ok(rec)
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
            if unmount(&mount, false).is_err() {
                let _ = unmount(&mount, true);
            }
            let _ = detach_loops(&file);
        }
        for d in self.dirs.iter().rev() {
            let _ = statefile::remove_dir(d);
        }
        if let Some(f) = self.file.take() {
            let _ = statefile::remove_file(&f);
        }
    }
}

fn allocate(file: &Path, size: u64, undo: &mut Undo) -> Result<()> {
    let f = statefile::create_new(file, 0o600).map_err(|e| io_failed("cannot create", file, e))?;
    undo.file = Some(file.to_path_buf());
    if let Err(e) = bulkhead_sys::fd::allocate(&f, size) {
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
    match statefile::lstat(mount) {
        Err(_) | Ok(None) => Ok(()),
        Ok(Some(st)) if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => bad(
            format!("--mount {} is not a directory", mount.display()),
            "give a directory (it is created when missing)",
        ),
        Ok(_) if is_mount_point(mount) => bad(
            format!("something is already mounted at {}", mount.display()),
            "unmount it, or give another --mount",
        ),
        Ok(_) => match statefile::names(mount).map(|n| n.is_empty()) {
            Ok(true) => Ok(()),
            _ => bad(
                format!("--mount {} is not empty", mount.display()),
                "the store would hide what is there: move it away, or give another --mount",
            ),
        },
    }
}

fn is_mount_point(p: &Path) -> bool {
    mountinfo::top_at(p).is_some()
}

/// Create `dir` and its missing parents; returns the ones created, outermost first.
fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut d = dir;
    while !statefile::exists(d) {
        missing.push(d.to_path_buf());
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    missing.reverse();
    for (i, m) in missing.iter().enumerate() {
        if let Err(e) = statefile::create_dir(m, 0o755) {
            for made in missing[..i].iter().rev() {
                let _ = statefile::remove_dir(made);
            }
            return Err(io_failed("cannot create", m, e));
        }
    }
    Ok(missing)
}

fn write_record(path: &Path, rec: &StoreRecord) -> Result<()> {
    if let Some(parent) = path.parent() {
        statefile::ensure_dir(parent, 0o755).map_err(|e| io_failed("cannot create", parent, e))?;
    }
    let text = format!(
        "# The bulkhead image store, written by `bulkhead image store create`.\n{}",
        toml::to_string(rec).map_err(|e| Error::failed(format!("cannot write the record: {e}")))?
    );
    statefile::write_atomic(path, text.as_bytes(), 0o644)
        .map_err(|e| io_failed("cannot write", path, e))
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
    private_dir(mount)
        .map(drop)
        .map_err(|e| io_failed("cannot make private (0700)", mount, e))
}

/// Mount the recorded store (after a reboot). Already mounted: `Done::Already`.
pub fn store_mount() -> Result<(StoreRecord, Done)> {
    let rec = require_store()?;
    if mounted_loop(&rec)?.is_some() {
        return Ok((rec, Done::Already));
    }
    if !HostPath::open(&rec.file).is_ok_and(|h| h.is_file()) {
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
            let _ = statefile::remove_dir(d);
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
    if let Err(e) = unmount(&rec.mount, false) {
        return Err(Error::failed(format!(
            "cannot unmount the image store at {}: {}",
            rec.mount.display(),
            errno_text(&e)
        ))
        .with_hint(if e.raw_os_error() == Some(libc::EBUSY) {
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
        images = Some(
            private_dir(&rec.mount)
                .and_then(|fd| list_in(std::os::fd::AsFd::as_fd(&fd), &rec.mount))
                .map(|l| l.len())
                .unwrap_or(0),
        );
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

/// The loop device the store is mounted from, when its mount point shows it; an error when
/// something else is mounted there.
pub(super) fn mounted_loop(rec: &StoreRecord) -> Result<Option<String>> {
    let Some(m) = mountinfo::top_at(&rec.mount) else {
        return Ok(None);
    };
    let dev = m.source.rsplit('/').next().unwrap_or("");
    let backing = loop_backing_file(dev);
    let file = real_path(&rec.file);
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
    let t = statefile::read_string(
        Path::new(&format!("/sys/block/{dev}/loop/backing_file")),
        8192,
    )
    .ok()?;
    let t = t.trim_end_matches('\n');
    Some(PathBuf::from(t.strip_suffix(" (deleted)").unwrap_or(t)))
}

/// Loop devices backed by `file`.
fn loops_of(file: &Path) -> Vec<String> {
    let file = real_path(file);
    let Ok(names) = statefile::names(Path::new("/sys/block")) else {
        return Vec::new();
    };
    let mut out: Vec<String> = names
        .into_iter()
        .filter_map(|n| n.to_str().map(String::from))
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

pub(super) fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| HostPath::open(p).is_ok_and(|h| h.is_file()));
    found
}

/// What the kernel calls `p` (its symlinks resolved by the host path rule), or `p` itself.
fn real_path(p: &Path) -> PathBuf {
    HostPath::open(p)
        .map(|h| h.real_path())
        .unwrap_or_else(|_| p.to_path_buf())
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
