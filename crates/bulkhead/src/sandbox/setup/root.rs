//! The sandbox's root: the mount point pivot_root moves into, made from the snapshot (an
//! overlay on a tmpfs, or a bind of the on-disk copy) or from ROOTFS itself, ID-mapped with
//! `--private-users`.
//!
//! Every root is mounted on a directory bulkhead owns (the shared mount point, or the
//! overlay's state directory), in the sandbox's own mount namespace, and made from a
//! descriptor the parent holds: ROOTFS as `validate` opened it, the copy as the snapshot made
//! it. No path of the user's is resolved again by the child, so a rename and a symlink
//! swapped in meanwhile cannot give the sandbox another tree (the host's `/` included).

use super::{cstr, hold, HostRef, Op, Target};
use crate::sandbox::{Opened, SandboxSpec};
use crate::snapshot::{mount_point, Method, Snapshot};
use bulkhead_plan::sandbox::tmpfs_options;
use bulkhead_sys::error::{io_failed, Result};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

pub struct Root {
    /// The mount point pivot_root moves into.
    pub path: PathBuf,
    /// The operations that make it a mount point.
    pub ops: Vec<Op>,
    /// What the parent ID-maps before the clone (`--private-users`).
    pub idmap_source: Option<HostRef>,
}

pub fn root(
    spec: &SandboxSpec,
    opened: &Opened,
    snap: Option<&Snapshot>,
    held: &mut Vec<OwnedFd>,
) -> Result<Root> {
    let userns = spec.private_users.is_some();
    let mp = mount_point();
    match snap {
        Some(s) if s.method == Method::Overlay => overlay(s, userns, spec.sizes.overlay, held),
        // The ID-mapped copy goes on the shared mount point: the snapshot's own path is in a
        // directory only the host's root may enter, and the sandbox is not that root.
        Some(s) if userns => Ok(Root {
            ops: vec![Op::AttachIdmapped {
                target: Target::Abs(cstr(&mp)?),
            }],
            idmap_source: Some(snapshot_ref(s, held)?),
            path: mp,
        }),
        Some(s) => Ok(Root {
            ops: vec![Op::BindTree {
                src: snapshot_ref(s, held)?,
                target: Target::Abs(cstr(&mp)?),
                read_only: false,
                noatime: true,
                nodev: true,
            }],
            idmap_source: None,
            path: mp,
        }),
        None if userns => {
            let mut ops = vec![Op::AttachIdmapped {
                target: Target::Abs(cstr(&mp)?),
            }];
            if !spec.writable {
                ops.push(Op::Mount {
                    src: None,
                    target: Target::Abs(cstr(&mp)?),
                    fstype: None,
                    flags: libc::MS_BIND
                        | libc::MS_REMOUNT
                        | libc::MS_RDONLY
                        | libc::MS_NODEV
                        | libc::MS_NOSUID,
                    data: None,
                });
            }
            Ok(Root {
                path: mp,
                ops,
                idmap_source: Some(hold(&opened.root, &opened.root_path, held)?),
            })
        }
        None => Ok(Root {
            ops: vec![Op::BindTree {
                src: hold(&opened.root, &opened.root_path, held)?,
                target: Target::Abs(cstr(&mp)?),
                read_only: !spec.writable && !spec.ephemeral,
                noatime: false,
                nodev: true,
            }],
            idmap_source: None,
            path: mp,
        }),
    }
}

/// The tree the snapshot gives (the copy, or an overlay's lower layer), held for the child.
fn snapshot_ref(s: &Snapshot, held: &mut Vec<OwnedFd>) -> Result<HostRef> {
    let fd = s
        .tree()
        .try_clone()
        .map_err(|e| io_failed("cannot open", &s.root, e))?;
    let shown = if s.method == Method::Overlay {
        &s.lower
    } else {
        &s.root
    };
    Ok(HostRef::hold(fd, cstr(shown)?, held))
}

/// An overlay: a tmpfs on the shared state directory (in the sandbox's own mount namespace)
/// holding the upper and work layers, the source (or its ID-mapped copy) below. The source
/// is a tree the parent cloned from the descriptor it holds, attached on the state
/// directory's `lower` (an overlay cannot take a layer from another mount namespace by
/// `/proc/self/fd/N`, nor, before Linux 6.15, from a detached mount).
fn overlay(s: &Snapshot, userns: bool, size: u64, held: &mut Vec<OwnedFd>) -> Result<Root> {
    let st = &s.state_dir;
    let mut ops = vec![Op::Mount {
        src: Some(cstr("bulkhead")?),
        target: Target::Abs(cstr(st)?),
        fstype: Some(cstr("tmpfs")?),
        flags: libc::MS_NOSUID | libc::MS_NODEV,
        data: Some(cstr(tmpfs_options("0755", size))?),
    }];
    for d in ["upper", "work", "root", "lower"] {
        ops.push(Op::Mkdir {
            path: cstr(st.join(d))?,
            mode: 0o755,
        });
    }
    // The source, as the snapshot holds it, attached on `lower` first: the overlay names a
    // directory of bulkhead's own tmpfs, never the user's path.
    let source = snapshot_ref(s, held)?;
    let idmap_source = if userns {
        ops.push(Op::AttachIdmapped {
            target: Target::Abs(cstr(st.join("lower"))?),
        });
        Some(source)
    } else {
        ops.push(Op::BindTree {
            src: source,
            target: Target::Abs(cstr(st.join("lower"))?),
            read_only: true,
            noatime: false,
            nodev: true,
        });
        None
    };
    let lower = st.join("lower");
    // No inode index, no persistent UUID, no xino: a throw-away upper layer on tmpfs needs
    // none of them, and each costs work at mount time.
    let mut data = format!(
        "lowerdir={},upperdir={},workdir={},index=off,uuid=off,xino=off",
        lower.display(),
        st.join("upper").display(),
        st.join("work").display()
    );
    if userns {
        data.push_str(",userxattr");
    }
    ops.push(Op::Mount {
        src: Some(cstr("overlay")?),
        target: Target::Abs(cstr(&s.root)?),
        fstype: Some(cstr("overlay")?),
        // The image's device nodes and setuid bits do nothing in the sandbox.
        flags: libc::MS_NODEV | libc::MS_NOSUID,
        data: Some(cstr(data)?),
    });
    Ok(Root {
        path: s.root.clone(),
        ops,
        idmap_source,
    })
}
