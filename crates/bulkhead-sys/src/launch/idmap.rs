//! `--private-users`: a user namespace with the sandbox's ID range mapped, and an ID-mapped
//! copy of a tree (the root, or an overlay's lower layer) made before the clone.

use super::{clone3, close, os_err, pipe, Failure, HostRef, IdRange};
use crate::error::{errno_text, Diagnostic, Error};
use crate::exit::RUN_FAILED;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A user namespace with `range` mapped, as an fd (for MOUNT_ATTR_IDMAP): a child makes it
/// and waits while its maps are written and the namespace is opened.
fn userns_fd(range: IdRange) -> Result<OwnedFd, Failure> {
    let (r, w) = pipe()?;
    // SAFETY: a fork-like clone from a single-threaded caller; the child only blocks on a
    // read and exits.
    let pid = unsafe { clone3(libc::CLONE_NEWUSER as u64, None) };
    if pid == 0 {
        close(w);
        let mut b = [0u8; 1];
        // SAFETY: in the child: one byte into a stack buffer, then _exit without unwinding.
        unsafe {
            libc::read(r, b.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    close(r);
    if pid < 0 {
        close(w);
        return Err(os_err("cannot create a user namespace"));
    }
    let pid = pid as libc::pid_t;
    let res = write_id_maps(pid, range).and_then(|_| {
        std::fs::File::open(format!("/proc/{pid}/ns/user"))
            .map(OwnedFd::from)
            .map_err(|_| os_err("cannot open the user namespace"))
    });
    close(w);
    crate::process::wait(pid, true);
    res
}

/// A detached copy of the tree open as `src` (a descriptor the caller opened by the host path
/// rule: the tree is cloned from it, not looked up by name again) whose IDs 0..size show as
/// base..base+size: nodev and nosuid (an image's device nodes and setuid bits do nothing), and
/// private, so that nothing mounted on it inside the sandbox propagates back to the host's
/// peer of `src` (open_tree makes the copy in the host's namespace, a peer of a shared source
/// mount).
pub fn idmapped_tree(src: &HostRef, range: IdRange) -> Result<OwnedFd, Failure> {
    let ns = userns_fd(range)?;
    let shown = src.shown.to_string_lossy();
    // SAFETY: open_tree on a descriptor the caller holds, with an empty C string and
    // AT_EMPTY_PATH; the result is checked.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            src.fd,
            c"".as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    } as i32;
    if tree < 0 {
        return Err(os_err(&format!("open_tree {shown}")));
    }
    // SAFETY: open_tree just returned this descriptor; nothing else owns it.
    let tree = unsafe { OwnedFd::from_raw_fd(tree) };
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOSUID,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: ns.as_raw_fd() as u64,
    };
    // SAFETY: mount_setattr on our open tree with a valid mount_attr of the size given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &raw const attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Failure::new(
            RUN_FAILED,
            Error::failed_with(
                Diagnostic::error(format!(
                    "cannot ID-map {shown} for --private-users: {}",
                    errno_text(&e)
                ))
                .hint("ID-mapped mounts need Linux 5.12+ and a file system that supports them (ext4, xfs, btrfs, tmpfs 6.3+)"),
            ),
        ));
    }
    Ok(tree)
}

/// Map IDs 0..size of the namespace of `pid` to base..base+size.
pub(super) fn write_id_maps(pid: libc::pid_t, r: IdRange) -> Result<(), Failure> {
    let w = |file: &str, text: &str| -> Result<(), Failure> {
        std::fs::write(format!("/proc/{pid}/{file}"), text).map_err(|e| {
            Failure::new(
                RUN_FAILED,
                Error::failed(format!(
                    "cannot write /proc/{pid}/{file}: {}",
                    errno_text(&e)
                )),
            )
        })
    };
    let map = format!("0 {} {}\n", r.base, r.size);
    w("uid_map", &map)?;
    w("setgroups", "allow")?;
    w("gid_map", &map)
}
