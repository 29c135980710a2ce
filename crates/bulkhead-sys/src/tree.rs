//! Directory trees: open and create by path, copy a tree (reflink, copy_file_range) with
//! everything a root file system holds, and remove one without leaving its file system.

pub use crate::dir::open_dir;
use crate::dir::{cpath, mkdir};
pub use crate::remove::remove_tree;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub enum CopyFail {
    /// The first FICLONE failed in a way that means "this file system cannot reflink".
    NoReflink(io::Error),
    /// What failed, on which source path.
    At(PathBuf, &'static str, io::Error),
}

/// Copy `src` to the directory `dst` (made here when `make_dst`, else an existing empty
/// directory, e.g. a fresh subvolume), preserving type, mode,
/// owner, times, symlinks, device nodes, FIFOs, sockets, hard links within the tree and
/// extended attributes. With `clone`, regular files share extents with the source (FICLONE);
/// else copy_file_range copies them (which itself shares extents where the file system can).
/// Stays on the source's file system, like `cp -ax` and like a btrfs snapshot. On error the
/// partial copy is left for the caller to remove.
pub fn copy_tree(
    src: &Path,
    dst: &Path,
    clone: bool,
    make_dst: bool,
) -> std::result::Result<(), CopyFail> {
    let md = std::fs::metadata(src).map_err(|e| CopyFail::At(src.into(), "cannot read", e))?;
    if make_dst {
        mkdir(dst, 0o700).map_err(|e| CopyFail::At(dst.into(), "cannot create", e))?;
    }
    let mut t = TreeCopy {
        clone,
        cloned_any: false,
        links: HashMap::new(),
        dev: md.dev(),
    };
    t.copy_dir(src, dst)?;
    t.attrs(src, dst, &md)
}

struct TreeCopy {
    clone: bool,
    cloned_any: bool,
    links: HashMap<(u64, u64), PathBuf>,
    dev: u64,
}

fn at<'a>(p: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> CopyFail + 'a {
    move |e| CopyFail::At(p.to_path_buf(), what, e)
}

impl TreeCopy {
    fn copy_dir(&mut self, src: &Path, dst: &Path) -> std::result::Result<(), CopyFail> {
        let rd = std::fs::read_dir(src).map_err(at(src, "cannot read"))?;
        // Files first, then subdirectories: a reflink trial meets its first file at once.
        let mut dirs = Vec::new();
        for e in rd {
            let e = e.map_err(at(src, "cannot read"))?;
            let name = e.file_name();
            let s = src.join(&name);
            let d = dst.join(&name);
            let md = e.metadata().map_err(at(&s, "cannot read"))?;
            let ft = md.file_type();
            if ft.is_dir() {
                dirs.push((s, d, md));
                continue;
            }
            if md.nlink() > 1 {
                if let Some(first) = self.links.get(&(md.dev(), md.ino())) {
                    std::fs::hard_link(first, &d).map_err(at(&s, "cannot link"))?;
                    continue;
                }
            }
            if ft.is_file() {
                self.copy_file(&s, &d, &md)?;
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&s).map_err(at(&s, "cannot read"))?;
                std::os::unix::fs::symlink(&target, &d).map_err(at(&s, "cannot copy"))?;
                self.attrs(&s, &d, &md)?;
            } else {
                let c = cpath(&d).map_err(at(&s, "cannot copy"))?;
                // SAFETY: a valid C string; mode and device come from lstat.
                if unsafe { libc::mknod(c.as_ptr(), md.mode(), md.rdev()) } != 0 {
                    return Err(at(&s, "cannot copy")(io::Error::last_os_error()));
                }
                self.attrs(&s, &d, &md)?;
            }
            if md.nlink() > 1 {
                self.links.insert((md.dev(), md.ino()), d);
            }
        }
        for (s, d, md) in dirs {
            mkdir(&d, 0o700).map_err(at(&s, "cannot copy"))?;
            // Another file system (a mount, a nested subvolume) stays an empty directory.
            if md.dev() == self.dev {
                self.copy_dir(&s, &d)?;
            }
            self.attrs(&s, &d, &md)?;
        }
        Ok(())
    }

    fn copy_file(
        &mut self,
        s: &Path,
        d: &Path,
        md: &std::fs::Metadata,
    ) -> std::result::Result<(), CopyFail> {
        let from = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(s)
            .map_err(at(s, "cannot read"))?;
        let to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(d)
            .map_err(at(s, "cannot copy"))?;
        if md.len() > 0 {
            if self.clone {
                if let Err(e) = rustix::fs::ioctl_ficlone(&to, &from).map_err(io::Error::from) {
                    let unsupported = matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP | libc::EINVAL | libc::EXDEV | libc::ENOTTY)
                    );
                    return Err(if unsupported && !self.cloned_any {
                        if e.raw_os_error() == Some(libc::EXDEV) {
                            CopyFail::At(s.into(), "cannot reflink", e)
                        } else {
                            CopyFail::NoReflink(e)
                        }
                    } else {
                        CopyFail::At(s.into(), "cannot reflink", e)
                    });
                }
                self.cloned_any = true;
            } else {
                // std's copy uses copy_file_range, with sendfile and read/write fallbacks
                // (copy_file_range refuses some pairs of file systems with EXDEV).
                std::io::copy(&mut &from, &mut &to).map_err(at(s, "cannot copy"))?;
            }
        }
        std::os::unix::fs::fchown(&to, Some(md.uid()), Some(md.gid()))
            .map_err(at(s, "cannot set the owner of the copy of"))?;
        to.set_permissions(std::fs::Permissions::from_mode(md.mode() & 0o7777))
            .map_err(at(s, "cannot set the mode of the copy of"))?;
        copy_xattrs(Xt::Fd(from.as_raw_fd()), Xt::Fd(to.as_raw_fd()))
            .map_err(at(s, "cannot copy the attributes of"))?;
        let times = timespecs(md);
        // SAFETY: a valid descriptor and two timespecs.
        if unsafe { libc::futimens(to.as_raw_fd(), times.as_ptr()) } != 0 {
            return Err(at(s, "cannot set the times of the copy of")(
                io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Owner, mode (not for symlinks), extended attributes and times, by path.
    fn attrs(
        &self,
        s: &Path,
        d: &Path,
        md: &std::fs::Metadata,
    ) -> std::result::Result<(), CopyFail> {
        std::os::unix::fs::lchown(d, Some(md.uid()), Some(md.gid()))
            .map_err(at(s, "cannot set the owner of the copy of"))?;
        let symlink = md.file_type().is_symlink();
        if !symlink {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(md.mode() & 0o7777))
                .map_err(at(s, "cannot set the mode of the copy of"))?;
        }
        let cs = cpath(s).map_err(at(s, "cannot read"))?;
        let cd = cpath(d).map_err(at(s, "cannot copy"))?;
        copy_xattrs(Xt::Path(&cs), Xt::Path(&cd))
            .map_err(at(s, "cannot copy the attributes of"))?;
        let times = timespecs(md);
        // SAFETY: a valid C string and two timespecs.
        if unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                cd.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } != 0
        {
            return Err(at(s, "cannot set the times of the copy of")(
                io::Error::last_os_error(),
            ));
        }
        Ok(())
    }
}

fn timespecs(md: &std::fs::Metadata) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: md.atime(),
            tv_nsec: md.atime_nsec(),
        },
        libc::timespec {
            tv_sec: md.mtime(),
            tv_nsec: md.mtime_nsec(),
        },
    ]
}

/// Where extended attributes are read or written: an open file or a path (not followed).
#[derive(Clone, Copy)]
enum Xt<'a> {
    Fd(RawFd),
    Path(&'a CStr),
}

impl Xt<'_> {
    fn list(self, buf: &mut [u8]) -> isize {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: the buffer pointer and length match.
        unsafe {
            match self {
                Xt::Fd(fd) => libc::flistxattr(fd, p, n),
                Xt::Path(c) => libc::llistxattr(c.as_ptr(), p, n),
            }
        }
    }
    fn get(self, name: &CStr, buf: &mut [u8]) -> isize {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: the buffer pointer and length match; name is a C string.
        unsafe {
            match self {
                Xt::Fd(fd) => libc::fgetxattr(fd, name.as_ptr(), p, n),
                Xt::Path(c) => libc::lgetxattr(c.as_ptr(), name.as_ptr(), p, n),
            }
        }
    }
    fn set(self, name: &CStr, value: &[u8]) -> i32 {
        let (p, n) = (value.as_ptr().cast(), value.len());
        // SAFETY: the value pointer and length match; name is a C string.
        unsafe {
            match self {
                Xt::Fd(fd) => libc::fsetxattr(fd, name.as_ptr(), p, n, 0),
                Xt::Path(c) => libc::lsetxattr(c.as_ptr(), name.as_ptr(), p, n, 0),
            }
        }
    }
}

/// Copy every extended attribute the target accepts (a file system without them, or a
/// namespace this process may not write, is skipped); only a full disk is an error.
fn copy_xattrs(from: Xt, to: Xt) -> io::Result<()> {
    let mut names = vec![0u8; 1024];
    let n = loop {
        let n = from.list(&mut names);
        if n >= 0 {
            break n as usize;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ERANGE) if names.len() < 1 << 20 => names.resize(names.len() * 8, 0),
            _ => return Ok(()),
        }
    };
    if n == 0 {
        return Ok(());
    }
    let mut value = vec![0u8; 4096];
    for name in names[..n].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let Ok(cname) = CString::new(name) else {
            continue;
        };
        let len = loop {
            let len = from.get(&cname, &mut value);
            if len >= 0 {
                break Some(len as usize);
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::ERANGE) if value.len() < 1 << 20 => value.resize(value.len() * 8, 0),
                _ => break None,
            }
        };
        let Some(len) = len else { continue };
        if to.set(&cname, &value[..len]) != 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) {
                return Err(e);
            }
        }
    }
    Ok(())
}
