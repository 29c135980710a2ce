//! The trees a sandbox's binds attach, cloned by the parent before the clone3: open_tree of
//! the descriptor the caller opened and decided on (never of a path), with the bind's flags
//! set on the detached copy (mount_setattr). The child, in its new mount namespace, only
//! attaches them (move_mount): a mount of the host's namespace cannot be cloned from there,
//! and a detached tree can be moved into any namespace.
//!
//! The copy is made a slave of the source's peer group (or private if the source is not
//! shared): mounts made on the host under a bound directory still show in the sandbox, as
//! they did when the child cloned the tree after `mount --make-rslave /`, and nothing the
//! sandbox mounts on it propagates back to the host.

use super::{Failure, Op, Program};
use crate::error::{errno_text, Error};
use crate::exit::RUN_FAILED;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One detached tree per `Op::BindTree`, in the order of `root_ops` then `ops` (None for
/// the other operations).
pub(super) struct Trees {
    pub(super) root: Vec<Option<OwnedFd>>,
    pub(super) ops: Vec<Option<OwnedFd>>,
}

impl Trees {
    pub(super) fn prepare(p: &Program) -> Result<Trees, Failure> {
        let each = |ops: &[Op]| ops.iter().map(tree_of).collect::<Result<Vec<_>, _>>();
        Ok(Trees {
            root: each(&p.root_ops)?,
            ops: each(&p.ops)?,
        })
    }

    /// The raw descriptors, for the child (which works with raw numbers), -1 for none.
    pub(super) fn raw(v: &[Option<OwnedFd>]) -> Vec<RawFd> {
        v.iter()
            .map(|t| t.as_ref().map_or(-1, |t| t.as_raw_fd()))
            .collect()
    }
}

fn tree_of(op: &Op) -> Result<Option<OwnedFd>, Failure> {
    let Op::BindTree {
        src,
        read_only,
        noatime,
        nodev,
        ..
    } = op
    else {
        return Ok(None);
    };
    let shown = src.shown.to_string_lossy();
    let fail = |what: &str| {
        let e = std::io::Error::last_os_error();
        Failure::new(
            RUN_FAILED,
            Error::failed(format!("{what} {shown}: {}", errno_text(&e))),
        )
    };
    // SAFETY: open_tree on a descriptor the caller holds (Program::held), with an empty C
    // string and AT_EMPTY_PATH; the result is checked and owned below.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            src.fd,
            c"".as_ptr(),
            libc::OPEN_TREE_CLONE
                | libc::OPEN_TREE_CLOEXEC
                | (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
        )
    } as RawFd;
    if tree < 0 {
        return Err(fail("cannot bind"));
    }
    // SAFETY: open_tree just returned this descriptor; nothing else owns it.
    let tree = unsafe { OwnedFd::from_raw_fd(tree) };
    let mut attr = libc::mount_attr {
        attr_set: 0,
        attr_clr: 0,
        propagation: libc::MS_SLAVE,
        userns_fd: 0,
    };
    if *read_only {
        attr.attr_set |= libc::MOUNT_ATTR_RDONLY;
    }
    if *noatime {
        attr.attr_clr |= libc::MOUNT_ATTR__ATIME;
        attr.attr_set |= libc::MOUNT_ATTR_NOATIME;
    }
    if *nodev {
        attr.attr_set |= libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOSUID;
    }
    // SAFETY: mount_setattr on our detached tree with a valid mount_attr of the size given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            &raw const attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r != 0 {
        return Err(fail("cannot set the mount flags of"));
    }
    Ok(Some(tree))
}
