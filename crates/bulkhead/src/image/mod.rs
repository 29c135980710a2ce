//! Root file system images for sandboxes, and the btrfs store that holds them (`store`).
//!
//! An image is a directory named by a plain name in the images directory: the mount point of
//! the image store when one is recorded (a loop-mounted btrfs file, so images are subvolumes
//! and sandboxes start from a snapshot in constant time), else `/var/lib/bulkhead/images`.
//! Snapshots of an image are made beside it (see [`crate::snapshot`]), hidden by their
//! `.#bulkhead-` names, which `list` skips.
//!
//! The host path rule holds here (see [`bulkhead_sys::hostpath`]; clippy's
//! `disallowed_methods`, configured in this crate's clippy.toml, keeps path-taking calls out):
//! the tree or tarball to import is opened once and read only through that descriptor, the
//! images directory is opened once (root's, 0700) and every image is made, named, measured and
//! removed relative to it.

#![deny(clippy::disallowed_methods)]

mod store;

pub use store::{
    default_images_dir, read_store, store_create, store_mount, store_record_path, store_status,
    store_umount, Done, StoreRecord, StoreStatus, DEFAULT_IMAGES_DIR, DEFAULT_STORE_RECORD,
    MIN_STORE_SIZE,
};

use crate::snapshot;
use bulkhead_sys::btrfs::{self, BTRFS_MAGIC};
use bulkhead_sys::dir::private_dir;
use bulkhead_sys::error::{errno_text, io_failed, Diagnostic, Error, Result};
use bulkhead_sys::hostpath::HostPath;
use bulkhead_sys::statefile;
use bulkhead_sys::statfs::ino_and_magic;
use bulkhead_sys::tree::{self, CopyFail, CopyFrom};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Where images live now: the store's mount point (which must be mounted), else the default
/// directory. It is kept 0700 (root's alone): an image's setuid binaries are nobody's way to
/// root.
pub fn images_dir() -> Result<PathBuf> {
    let dir = where_images_live()?;
    if statefile::is_dir(&dir) {
        // Best effort here (an older install made it 0755); import and the store insist.
        let _ = private_dir(&dir);
    }
    Ok(dir)
}

/// The images directory, opened (made if `create`, and if missing): root's, 0700.
fn open_images_dir(create: bool) -> Result<(PathBuf, Option<OwnedFd>)> {
    let dir = where_images_live()?;
    if !create && !statefile::is_dir(&dir) {
        return Ok((dir, None));
    }
    if create {
        statefile::ensure_dir(&dir, 0o700).map_err(|e| io_failed("cannot create", &dir, e))?;
    }
    let fd = private_dir(&dir).map_err(|e| io_failed("cannot make private (0700)", &dir, e))?;
    Ok((dir, Some(fd)))
}

fn where_images_live() -> Result<PathBuf> {
    match read_store()? {
        Some(rec) => {
            if store::mounted_loop(&rec)?.is_none() {
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
    matches!(open_images_dir(false), Ok((_, Some(fd))) if on_btrfs(fd.as_fd()))
}

fn on_btrfs(dir: BorrowedFd<'_>) -> bool {
    ino_and_magic(dir).is_ok_and(|(_, magic)| magic == BTRFS_MAGIC)
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
    if name_or_path.contains('/') || HostPath::open(p).is_ok_and(|h| h.is_dir()) {
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
    if statefile::is_dir(&path) {
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
    let (img, dir) = import_tree(src, name)?;
    if read_only {
        let fail = |e: io::Error| io_failed("cannot make the image read-only:", &img.path, e);
        let fd = open_entry(dir.as_fd(), OsStr::new(name), OFlags::RDONLY).map_err(fail)?;
        snapshot::set_read_only(fd.as_fd()).map_err(fail)?;
    }
    Ok(img)
}

/// `name` in the directory `dir`, opened with `flags` (a directory, not followed).
fn open_entry(dir: BorrowedFd<'_>, name: &OsStr, flags: OFlags) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        flags | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

/// The source of an import, opened once: a directory or a tarball.
fn open_source(src: &Path) -> Result<(HostPath, bool)> {
    let bad = |what: String, hint: String| Error::invalid(Diagnostic::error(what).hint(hint));
    let opened = HostPath::open(src).map_err(|e| {
        bad(
            format!("cannot import {}: {e}", src.display()),
            "give a root file system directory or a tarball (.tar, .tar.gz, .tar.zst, .tar.xz)"
                .into(),
        )
    })?;
    if opened.is_dir() {
        return Ok((opened, false));
    }
    let n = src.to_string_lossy();
    if !opened.is_file() || !TAR_ENDINGS.iter().any(|e| n.ends_with(e)) {
        return Err(bad(
            format!("{} is neither a directory nor a tarball", src.display()),
            format!("tarballs end in {}", TAR_ENDINGS.join(", ")),
        ));
    }
    if store::find_tool("tar").is_none() {
        return Err(bad("tar is not installed".into(), "apt install tar".into()));
    }
    Ok((opened, true))
}

fn import_tree(src: &Path, name: &str) -> Result<(Image, OwnedFd)> {
    check_name(name)?;
    let (source, tarball) = open_source(src)?;
    let (dir, dirfd) = open_images_dir(true)?;
    let Some(dirfd) = dirfd else {
        return Err(Error::failed(format!("cannot open {}", dir.display())));
    };
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
    if rustix::fs::statat(&dirfd, name, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        return Err(exists());
    }
    if !tarball {
        let s = source.real_path();
        let d = bulkhead_sys::hostpath::real_path(dirfd.as_fd()).unwrap_or_else(|| dir.clone());
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
    sweep_stale_imports(dirfd.as_fd(), &dir);
    let tmp_name = format!(".#import-{name}-{}", std::process::id());
    let tmp = dir.join(&tmp_name);
    let _ = tree::remove_tree_at(dirfd.as_fd(), OsStr::new(&tmp_name), &tmp);
    if on_btrfs(dirfd.as_fd()) {
        btrfs::subvolume_create_at(dirfd.as_fd(), OsStr::new(&tmp_name))
            .map_err(|e| io_failed("cannot create the btrfs subvolume", &tmp, e))?;
    } else {
        rustix::fs::mkdirat(&dirfd, tmp_name.as_str(), Mode::from_raw_mode(0o755))
            .map_err(|e| io_failed("cannot create", &tmp, e.into()))?;
    }
    let filled = if tarball {
        open_entry(dirfd.as_fd(), OsStr::new(&tmp_name), OFlags::PATH)
            .map_err(|e| io_failed("cannot open", &tmp, e))
            .and_then(|into| untar(&source, into))
    } else {
        copy_in(&source, dirfd.as_fd(), &tmp_name, &tmp, &dir)
    };
    let renamed = filled.and_then(|()| {
        rustix::fs::renameat_with(
            &dirfd,
            tmp_name.as_str(),
            &dirfd,
            name,
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|e| {
            if e == rustix::io::Errno::EXIST {
                exists()
            } else {
                io_failed("cannot rename", &tmp, e.into())
            }
        })
    });
    if let Err(e) = renamed {
        let _ = tree::remove_tree_at(dirfd.as_fd(), OsStr::new(&tmp_name), &tmp);
        return Err(e);
    }
    Ok((describe(dirfd.as_fd(), name, &dest), dirfd))
}

/// Copy the directory `source` into `tmp_name` (an empty directory or subvolume) of `dir`.
fn copy_in(
    source: &HostPath,
    dir: BorrowedFd<'_>,
    tmp_name: &str,
    tmp: &Path,
    shown_dir: &Path,
) -> Result<()> {
    let from = CopyFrom {
        src: source.fd(),
        src_shown: source.shown(),
        dst_parent: dir,
        dst_name: OsStr::new(tmp_name),
        dst_shown: tmp,
    };
    tree::copy_tree(&from, false, false).map_err(|e| match e {
        CopyFail::At(p, what, e) => match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::failed(format!(
                "the file system holding {} is full (while copying {})",
                shown_dir.display(),
                p.display()
            ))
            .with_hint("make room, or create a bigger image store"),
            _ => Error::failed(format!("{what} {}: {}", p.display(), errno_text(&e))),
        },
        CopyFail::NoReflink(e) => Error::failed(format!(
            "cannot copy {}: {}",
            source.shown().display(),
            errno_text(&e)
        )),
    })
}

/// GNU tar, not the `tar` crate: it already handles gzip, xz, zstd and bzip2 (by content),
/// hard links, sparse files, device nodes, extended attributes, and refuses members that
/// would land outside the directory (absolute names, `..`); it is on every host. The tarball
/// and the directory are handed to it as the descriptors this process opened (fds 3 and 4,
/// named /proc/self/fd/3 and /proc/self/fd/4): tar never resolves the user's path again.
fn untar(src: &HostPath, into: OwnedFd) -> Result<()> {
    let dup = |fd: BorrowedFd<'_>| {
        bulkhead_sys::fd::dup_above(fd, 100).map_err(|e| io_failed("cannot open", src.shown(), e))
    };
    let fds = [dup(src.fd())?, dup(into.as_fd())?];
    let mut cmd = Command::new("tar");
    cmd.args([
        "--extract",
        "--numeric-owner",
        "--same-owner",
        "--same-permissions",
        "--xattrs",
        "--xattrs-include=*",
        "--file",
        "/proc/self/fd/3",
        "--directory",
        "/proc/self/fd/4",
    ]);
    bulkhead_sys::process::pass_fds_before_exec(&mut cmd, &fds, libc::SIGKILL);
    let out = cmd
        .output()
        .map_err(|e| io_failed("cannot run", Path::new("tar"), e))?;
    drop(fds);
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let full = err.contains("No space left") || err.contains("Disk quota");
    let d = Diagnostic::error(format!(
        "cannot unpack {}: {}",
        src.shown().display(),
        err.lines().take(3).collect::<Vec<_>>().join("; ")
    ));
    Err(Error::failed_with(if full {
        d.hint("the image directory is full: make room, or create a bigger image store")
    } else {
        d.hint("check the tarball (tar -tf), and that its compressor is installed (gzip, xz, zstd)")
    }))
}

/// Half imports of processes that died (`.#import-NAME-PID`).
fn sweep_stale_imports(dir: BorrowedFd<'_>, shown: &Path) {
    let Ok(list) = bulkhead_sys::hostpath::reopen_dir(dir) else {
        return;
    };
    for name in statefile::names_in(list.as_fd()).unwrap_or_default() {
        let Some(n) = name.to_str() else { continue };
        let Some(rest) = n.strip_prefix(".#import-") else {
            continue;
        };
        let Some(pid) = rest.rsplit('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !bulkhead_sys::process::alive(pid) {
            let _ = tree::remove_tree_at(dir, &name, &shown.join(&name));
        }
    }
}

/// The images, by name.
pub fn list() -> Result<Vec<Image>> {
    let (dir, fd) = open_images_dir(false)?;
    match fd {
        Some(fd) => list_in(fd.as_fd(), &dir).map_err(|e| io_failed("cannot read", &dir, e)),
        None => Ok(Vec::new()),
    }
}

/// The images in the directory open as `dir` (named `shown`).
fn list_in(dir: BorrowedFd<'_>, shown: &Path) -> io::Result<Vec<Image>> {
    let list = bulkhead_sys::hostpath::reopen_dir(dir)?;
    let mut out = Vec::new();
    for n in statefile::names_in(list.as_fd())? {
        let Some(name) = n.to_str() else {
            continue;
        };
        let is_dir = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
        if name.starts_with('.') || !is_dir {
            continue;
        }
        out.push(describe(dir, name, &shown.join(name)));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The image `name` of the directory open as `dir`.
fn describe(dir: BorrowedFd<'_>, name: &str, path: &Path) -> Image {
    let fd = open_entry(dir, OsStr::new(name), OFlags::PATH).ok();
    let created = fd.as_ref().and_then(|fd| {
        let want = StatxFlags::BTIME | StatxFlags::MTIME;
        let st = rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, want).ok()?;
        let born = (st.stx_mask & StatxFlags::BTIME.bits() != 0).then_some(st.stx_btime.tv_sec);
        u64::try_from(born.unwrap_or(st.stx_mtime.tv_sec)).ok()
    });
    Image {
        name: name.to_string(),
        path: path.to_path_buf(),
        size: fd
            .as_ref()
            .map(|fd| bulkhead_sys::usage::usage(fd.as_fd()))
            .unwrap_or(0),
        created,
        subvolume: fd
            .as_ref()
            .is_some_and(|fd| btrfs::is_subvolume_fd(fd.as_fd())),
    }
}

/// Remove the image `name`.
pub fn remove(name: &str) -> Result<Image> {
    check_name(name)?;
    let (dir, fd) = open_images_dir(false)?;
    let is_dir = fd.as_ref().is_some_and(|fd| {
        rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
    });
    let (Some(fd), true) = (fd, is_dir) else {
        return Err(no_such_image(name, &dir));
    };
    let path = dir.join(name);
    let image = describe(fd.as_fd(), name, &path);
    snapshot::drop_pool_at(fd.as_fd(), &dir, OsStr::new(name));
    tree::remove_tree_at(fd.as_fd(), OsStr::new(name), &path).map_err(|(p, e)| {
        Error::failed(format!(
            "cannot remove the image {name}: {}: {}",
            p.display(),
            errno_text(&e)
        ))
    })?;
    Ok(image)
}

fn no_such_image(name: &str, dir: &Path) -> Error {
    let known: Vec<String> = match open_images_dir(false) {
        Ok((_, Some(fd))) => list_in(fd.as_fd(), dir)
            .unwrap_or_default()
            .into_iter()
            .map(|i| i.name)
            .collect(),
        _ => Vec::new(),
    };
    let hint = if known.is_empty() {
        format!("there are no images in {}", dir.display())
    } else {
        let near = bulkhead_plan::nearest(name, &known)
            .map(|k| format!("did you mean {k}? "))
            .unwrap_or_default();
        format!("{near}images: {}", known.join(", "))
    };
    Error::invalid(
        Diagnostic::error(format!("no image named '{name}' in {}", dir.display())).hint(hint),
    )
}

/// `YYYY-MM-DD HH:MM` in UTC.
pub fn format_time(secs: u64) -> String {
    let (y, m, d, h, mi, _) = bulkhead_sys::units::civil(secs);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}")
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
