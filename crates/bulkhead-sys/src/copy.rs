//! Copying a directory tree (reflink or copy_file_range) with everything a root file system
//! holds, by directory descriptors on both sides: the source may belong to a user who swaps its
//! directories for symlinks while it is copied, and the destination's directory may be renamed
//! or replaced under us. Nothing is looked up by a path string: entries are stat'ed with
//! AT_SYMLINK_NOFOLLOW, opened with O_NOFOLLOW and checked against that stat, and every change
//! to the copy (mkdirat, fchown, fchmod, futimens, ...) goes through the descriptor of the
//! directory or file it is made in.

use crate::dir::open_subdir;
use crate::hostpath::reopen_dir;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat, Timespec, Timestamps};
use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A swapped entry is looked at again this many times before the copy gives up.
const RETRIES: usize = 16;

pub enum CopyFail {
    /// The first FICLONE failed in a way that means "this file system cannot reflink".
    NoReflink(io::Error),
    /// What failed, on which source path (the destination's, for its own directory).
    At(PathBuf, &'static str, io::Error),
}

/// Where the copy comes from and goes to.
pub struct CopyFrom<'a> {
    /// The source directory (any handle, O_PATH too).
    pub src: BorrowedFd<'a>,
    /// Its path, for messages.
    pub src_shown: &'a Path,
    /// The directory the copy is made in, and the copy's name there.
    pub dst_parent: BorrowedFd<'a>,
    pub dst_name: &'a OsStr,
    /// The copy's path, for messages.
    pub dst_shown: &'a Path,
}

/// Copy the tree `c.src` to `c.dst_name` in `c.dst_parent` (made here, mode 0700 until the
/// copy is done, when `make_dst`; else an existing empty directory, e.g. a fresh subvolume),
/// preserving type, mode, owner, times, symlinks, device nodes, FIFOs, sockets, hard links
/// within the tree and extended attributes. With `clone`, regular files share extents with the
/// source (FICLONE); else copy_file_range copies them (which itself shares extents where the
/// file system can). Stays on the source's file system, like `cp -ax` and like a btrfs
/// snapshot. On error the partial copy is left for the caller to remove.
pub fn copy_tree(c: &CopyFrom<'_>, clone: bool, make_dst: bool) -> Result<(), CopyFail> {
    let src = reopen_dir(c.src).map_err(at(c.src_shown, "cannot read"))?;
    let st = rustix::fs::fstat(&src).map_err(errno_at(c.src_shown, "cannot read"))?;
    if make_dst {
        rustix::fs::mkdirat(c.dst_parent, c.dst_name, Mode::from_raw_mode(0o700))
            .map_err(errno_at(c.dst_shown, "cannot create"))?;
    }
    let dst = open_subdir(c.dst_parent, c.dst_name).map_err(at(c.dst_shown, "cannot open"))?;
    let mut t = TreeCopy {
        clone,
        cloned_any: false,
        links: HashMap::new(),
        dev: st.st_dev,
        top: dst.try_clone().map_err(at(c.dst_shown, "cannot open"))?,
    };
    t.copy_dir(&src, &dst, Path::new(""), c.src_shown)?;
    fd_attrs(&src, &dst, &st).map_err(|(what, e)| CopyFail::At(c.src_shown.into(), what, e))
}

struct TreeCopy {
    clone: bool,
    cloned_any: bool,
    /// The first copy of each multiply-linked file: its directory (relative to the copy's
    /// top) and name.
    links: HashMap<(u64, u64), (PathBuf, CString)>,
    dev: u64,
    /// The copy's top directory.
    top: OwnedFd,
}

fn at<'a>(p: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> CopyFail + 'a {
    move |e| CopyFail::At(p.to_path_buf(), what, e)
}

fn errno_at<'a>(
    p: &'a Path,
    what: &'static str,
) -> impl FnOnce(rustix::io::Errno) -> CopyFail + 'a {
    move |e| CopyFail::At(p.to_path_buf(), what, e.into())
}

fn kind(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// An entry of the source, open and of the type its stat said (a regular file or a
/// directory), or None when it changed since (look again).
fn open_checked(dir: &OwnedFd, name: &CStr, st: &Stat) -> io::Result<Option<OwnedFd>> {
    let flags = match kind(st) {
        FileType::Directory => OFlags::RDONLY | OFlags::DIRECTORY,
        // O_NONBLOCK: a FIFO swapped in is opened without waiting for a writer.
        _ => OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
    };
    let fd = match rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR | rustix::io::Errno::NOENT) => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    let now = rustix::fs::fstat(&fd)?;
    if (now.st_dev, now.st_ino, kind(&now)) != (st.st_dev, st.st_ino, kind(st)) {
        return Ok(None);
    }
    Ok(Some(fd))
}

/// The names in a directory, without `.` and `..`.
fn entries(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    let list = reopen_dir(dir.as_fd())?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(&list)? {
        let e = e?;
        let n = e.file_name();
        if n != c"." && n != c".." {
            out.push(n.to_owned());
        }
    }
    Ok(out)
}

/// One entry of a directory being copied, as [`TreeCopy::look`] found it.
struct Entry<'a> {
    /// The directories it is copied from and into.
    src: &'a OwnedFd,
    dst: &'a OwnedFd,
    name: &'a CStr,
    st: &'a Stat,
    /// For a regular file or a directory: a descriptor checked to be that very file.
    fd: Option<OwnedFd>,
    /// Where `dst` is below the copy's top.
    rel: &'a Path,
    /// The entry's path, for messages.
    shown: &'a Path,
}

impl TreeCopy {
    /// Copy the contents of `src` into `dst`; `rel` is where `dst` is below the copy's top.
    fn copy_dir(
        &mut self,
        src: &OwnedFd,
        dst: &OwnedFd,
        rel: &Path,
        shown: &Path,
    ) -> Result<(), CopyFail> {
        let names = entries(src).map_err(at(shown, "cannot read"))?;
        // Files first, then subdirectories: a reflink trial meets its first file at once.
        let mut dirs = Vec::new();
        for name in names {
            let s = shown.join(OsStr::from_bytes(name.to_bytes()));
            let is_dir = rustix::fs::statat(src, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| kind(&st) == FileType::Directory);
            if is_dir {
                dirs.push((name, s));
                continue;
            }
            self.visit(src, dst, &name, rel, &s)?;
        }
        for (name, s) in dirs {
            // Looked at now: it may have changed while the files were copied.
            self.visit(src, dst, &name, rel, &s)?;
        }
        Ok(())
    }

    /// Copy the entry `name` of `src` into `dst` as it is now (nothing if it is gone).
    fn visit(
        &mut self,
        src: &OwnedFd,
        dst: &OwnedFd,
        name: &CStr,
        rel: &Path,
        shown: &Path,
    ) -> Result<(), CopyFail> {
        let Some((st, fd)) = self.look(src, name, shown)? else {
            return Ok(());
        };
        self.entry(Entry {
            src,
            dst,
            name,
            st: &st,
            fd,
            rel,
            shown,
        })
    }

    /// Copy one entry: a directory with its contents, or anything else.
    fn entry(&mut self, e: Entry<'_>) -> Result<(), CopyFail> {
        let (FileType::Directory, Some(sub)) = (kind(e.st), e.fd.as_ref()) else {
            return self.copy_entry(e);
        };
        let Entry {
            dst,
            name,
            st,
            rel,
            shown,
            ..
        } = e;
        let dname = OsStr::from_bytes(name.to_bytes());
        rustix::fs::mkdirat(dst, dname, Mode::from_raw_mode(0o700))
            .map_err(errno_at(shown, "cannot copy"))?;
        let dsub = open_subdir(dst.as_fd(), dname).map_err(at(shown, "cannot copy"))?;
        // Another file system (a mount, a nested subvolume) stays an empty directory.
        if st.st_dev == self.dev {
            self.copy_dir(sub, &dsub, &rel.join(dname), shown)?;
        }
        fd_attrs(sub, &dsub, st).map_err(|(what, e)| CopyFail::At(shown.into(), what, e))
    }

    /// The entry `name` of `src` as it is now: its status and, for a regular file or a
    /// directory, a descriptor checked to be that very file. None: it is gone.
    fn look(
        &self,
        src: &OwnedFd,
        name: &CStr,
        shown: &Path,
    ) -> Result<Option<(Stat, Option<OwnedFd>)>, CopyFail> {
        for _ in 0..RETRIES {
            let st = match rustix::fs::statat(src, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => return Ok(None),
                Err(e) => return Err(errno_at(shown, "cannot read")(e)),
            };
            if !matches!(kind(&st), FileType::Directory | FileType::RegularFile) {
                return Ok(Some((st, None)));
            }
            match open_checked(src, name, &st).map_err(at(shown, "cannot read"))? {
                Some(fd) => return Ok(Some((st, Some(fd)))),
                None => continue,
            }
        }
        Err(CopyFail::At(
            shown.into(),
            "cannot copy",
            io::Error::other("it kept changing while it was being copied"),
        ))
    }

    /// Copy one entry that is not a directory.
    fn copy_entry(&mut self, e: Entry<'_>) -> Result<(), CopyFail> {
        let Entry {
            src,
            dst,
            name,
            st,
            fd,
            rel,
            shown,
        } = e;
        let linked = st.st_nlink > 1;
        if linked {
            if let Some((dir, first)) = self.links.get(&(st.st_dev, st.st_ino)) {
                let from = self.dir_below_top(dir).map_err(at(shown, "cannot link"))?;
                rustix::fs::linkat(&from, first.as_c_str(), dst, name, AtFlags::empty())
                    .map_err(errno_at(shown, "cannot link"))?;
                return Ok(());
            }
        }
        match (kind(st), fd) {
            (FileType::RegularFile, Some(from)) => self.copy_file(&from, dst, name, st, shown)?,
            (FileType::RegularFile, None) => return Ok(()),
            (FileType::Symlink, _) => {
                let target = rustix::fs::readlinkat(src, name, Vec::new())
                    .map_err(errno_at(shown, "cannot read"))?;
                rustix::fs::symlinkat(target.as_c_str(), dst, name)
                    .map_err(errno_at(shown, "cannot copy"))?;
                at_attrs(src, dst, name, st).map_err(|(w, e)| CopyFail::At(shown.into(), w, e))?;
            }
            _ => {
                // Device nodes, FIFOs and sockets: made, never opened.
                let ft = kind(st);
                let perm = Mode::from_raw_mode(st.st_mode & 0o7777);
                rustix::fs::mknodat(dst, name, ft, perm, st.st_rdev)
                    .map_err(errno_at(shown, "cannot copy"))?;
                at_attrs(src, dst, name, st).map_err(|(w, e)| CopyFail::At(shown.into(), w, e))?;
            }
        }
        if linked {
            self.links
                .insert((st.st_dev, st.st_ino), (rel.to_path_buf(), name.to_owned()));
        }
        Ok(())
    }

    /// A directory of the copy, by its path below the top: never leaving it, never through a
    /// symlink (the copy is ours, but checked all the same).
    fn dir_below_top(&self, rel: &Path) -> io::Result<OwnedFd> {
        let rel: &Path = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        rustix::fs::openat2(
            &self.top,
            rel,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV,
        )
        .map_err(Into::into)
    }

    fn copy_file(
        &mut self,
        from: &OwnedFd,
        dst: &OwnedFd,
        name: &CStr,
        st: &Stat,
        shown: &Path,
    ) -> Result<(), CopyFail> {
        let to = rustix::fs::openat(
            dst,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(errno_at(shown, "cannot copy"))?;
        if st.st_size > 0 {
            if self.clone {
                if let Err(e) = rustix::fs::ioctl_ficlone(&to, from).map_err(io::Error::from) {
                    let unsupported = matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP | libc::EINVAL | libc::EXDEV | libc::ENOTTY)
                    );
                    return Err(if unsupported && !self.cloned_any {
                        if e.raw_os_error() == Some(libc::EXDEV) {
                            CopyFail::At(shown.into(), "cannot reflink", e)
                        } else {
                            CopyFail::NoReflink(e)
                        }
                    } else {
                        CopyFail::At(shown.into(), "cannot reflink", e)
                    });
                }
                self.cloned_any = true;
            } else {
                // Back to blocking reads (the source was opened O_NONBLOCK).
                rustix::fs::fcntl_setfl(from, OFlags::empty())
                    .map_err(errno_at(shown, "cannot read"))?;
                // std's copy uses copy_file_range, with sendfile and read/write fallbacks
                // (copy_file_range refuses some pairs of file systems with EXDEV).
                let mut r =
                    std::fs::File::from(from.try_clone().map_err(at(shown, "cannot read"))?);
                let mut w = std::fs::File::from(to.try_clone().map_err(at(shown, "cannot copy"))?);
                std::io::copy(&mut r, &mut w).map_err(at(shown, "cannot copy"))?;
            }
        }
        fd_attrs(from, &to, st).map_err(|(what, e)| CopyFail::At(shown.into(), what, e))
    }
}

fn times(st: &Stat) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec as i64,
        },
        last_modification: Timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec as i64,
        },
    }
}

type AttrFail = (&'static str, io::Error);

/// Owner, mode, extended attributes and times of the copy open as `to`, from `from` (both
/// open files or directories).
fn fd_attrs(from: &OwnedFd, to: &OwnedFd, st: &Stat) -> Result<(), AttrFail> {
    let uid = rustix::process::Uid::from_raw(st.st_uid);
    let gid = rustix::process::Gid::from_raw(st.st_gid);
    rustix::fs::fchown(to, Some(uid), Some(gid))
        .map_err(|e| ("cannot set the owner of the copy of", e.into()))?;
    // After the owner: chown clears the setuid and setgid bits.
    rustix::fs::fchmod(to, Mode::from_raw_mode(st.st_mode & 0o7777))
        .map_err(|e| ("cannot set the mode of the copy of", e.into()))?;
    crate::xattr::copy_all(
        crate::xattr::At::Fd(from.as_raw_fd()),
        crate::xattr::At::Fd(to.as_raw_fd()),
    )
    .map_err(|e| ("cannot copy the attributes of", e))?;
    rustix::fs::futimens(to, &times(st))
        .map_err(|e| ("cannot set the times of the copy of", e.into()))
}

/// The same for an entry that is not opened (a symlink, a device node, a FIFO, a socket):
/// relative to the directories holding it, the entry itself never followed.
fn at_attrs(src: &OwnedFd, dst: &OwnedFd, name: &CStr, st: &Stat) -> Result<(), AttrFail> {
    let uid = rustix::process::Uid::from_raw(st.st_uid);
    let gid = rustix::process::Gid::from_raw(st.st_gid);
    rustix::fs::chownat(dst, name, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| ("cannot set the owner of the copy of", e.into()))?;
    if kind(st) != FileType::Symlink {
        // A node this copy just made in its own directory: not a symlink (fchmodat follows).
        rustix::fs::chmodat(
            dst,
            name,
            Mode::from_raw_mode(st.st_mode & 0o7777),
            AtFlags::empty(),
        )
        .map_err(|e| ("cannot set the mode of the copy of", e.into()))?;
    }
    // The l*xattr calls take a path: the directory's /proc/self/fd link, then the name, which
    // they do not follow.
    let via = |dir: &OwnedFd| -> io::Result<CString> {
        let mut p = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
        p.extend_from_slice(name.to_bytes());
        CString::new(p).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    };
    let (s, d) = (
        via(src).map_err(|e| ("cannot read", e))?,
        via(dst).map_err(|e| ("cannot copy", e))?,
    );
    crate::xattr::copy_all(crate::xattr::At::Path(&s), crate::xattr::At::Path(&d))
        .map_err(|e| ("cannot copy the attributes of", e))?;
    rustix::fs::utimensat(dst, name, &times(st), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| ("cannot set the times of the copy of", e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bh-copy-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The copy's directory renamed away and replaced by a symlink to a victim mid-copy: every
    /// later write still lands in the copy (through the descriptors held), none in the victim.
    #[test]
    fn a_destination_swapped_mid_copy_is_never_written_through() {
        let d = scratch("dst");
        let src = d.join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        for i in 0..3000 {
            std::fs::write(src.join("sub").join(format!("f{i}")), "x").unwrap();
        }
        std::fs::set_permissions(src.join("sub"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let victim = d.join("victim");
        std::fs::create_dir_all(victim.join("sub")).unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o700)).unwrap();
        let holder = d.join("holder");
        std::fs::create_dir(&holder).unwrap();
        let copy = holder.join("copy");
        let racer = {
            let (copy, victim) = (copy.clone(), victim.clone());
            std::thread::spawn(move || {
                while !copy.join("sub").exists() {
                    std::thread::yield_now();
                }
                std::fs::rename(&copy, copy.with_extension("aside")).unwrap();
                symlink(&victim, &copy).unwrap();
            })
        };
        let s = rustix::fs::open(&src, OFlags::PATH, Mode::empty()).unwrap();
        let h = rustix::fs::open(&holder, OFlags::RDONLY, Mode::empty()).unwrap();
        let r = copy_tree(
            &CopyFrom {
                src: s.as_fd(),
                src_shown: &src,
                dst_parent: h.as_fd(),
                dst_name: OsStr::new("copy"),
                dst_shown: &copy,
            },
            false,
            true,
        );
        racer.join().unwrap();
        assert!(r.is_ok());
        assert_eq!(std::fs::read_dir(victim.join("sub")).unwrap().count(), 0);
        let md = std::fs::metadata(&victim).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o700, "the victim's mode changed");
        let v = std::fs::metadata(victim.join("sub")).unwrap();
        assert_ne!(
            v.mode() & 0o7777,
            0o777,
            "the victim's subdirectory was chmod'ed"
        );
        // All of it is in the copy, wherever its name is now.
        let aside = copy.with_extension("aside");
        assert_eq!(std::fs::read_dir(aside.join("sub")).unwrap().count(), 3000);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A source directory swapped for a symlink is copied as what it is when opened: the link
    /// as a link, never the tree it names.
    #[test]
    fn a_source_swapped_for_a_symlink_is_copied_as_a_link() {
        let d = scratch("src");
        let src = d.join("src");
        std::fs::create_dir_all(&src).unwrap();
        let secret = d.join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("file"), "root only").unwrap();
        symlink(&secret, src.join("link")).unwrap();
        let s = rustix::fs::open(&src, OFlags::PATH, Mode::empty()).unwrap();
        let h = rustix::fs::open(&d, OFlags::RDONLY, Mode::empty()).unwrap();
        let dst = d.join("dst");
        let from = CopyFrom {
            src: s.as_fd(),
            src_shown: &src,
            dst_parent: h.as_fd(),
            dst_name: OsStr::new("dst"),
            dst_shown: &dst,
        };
        assert!(copy_tree(&from, false, true).is_ok());
        let l = std::fs::symlink_metadata(dst.join("link")).unwrap();
        assert!(l.file_type().is_symlink());
        let _ = std::fs::remove_dir_all(&d);
    }
}
