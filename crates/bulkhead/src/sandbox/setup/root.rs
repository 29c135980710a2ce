//! The sandbox's root: the mount point pivot_root moves into, made from the snapshot (an
//! overlay on a tmpfs, or a bind of the on-disk copy) or from ROOTFS itself, ID-mapped with
//! `--private-users`.

use super::{cstr, Op, Target};
use crate::sandbox::SandboxSpec;
use crate::snapshot::{mount_point, Method, Snapshot};
use bulkhead_plan::sandbox::tmpfs_options;
use bulkhead_sys::error::Result;
use std::path::{Path, PathBuf};

pub struct Root {
    /// The mount point pivot_root moves into.
    pub path: PathBuf,
    /// The operations that make it a mount point.
    pub ops: Vec<Op>,
    /// What the parent ID-maps before the clone (`--private-users`).
    pub idmap_source: Option<PathBuf>,
}

pub fn root(spec: &SandboxSpec, rootfs: &Path, snap: Option<&Snapshot>) -> Result<Root> {
    let userns = spec.private_users.is_some();
    match snap {
        Some(s) if s.method == Method::Overlay => overlay(s, userns, spec.sizes.overlay),
        // The ID-mapped copy goes on the shared mount point: the snapshot's own path is in a
        // directory only the host's root may enter, and the sandbox is not that root.
        Some(s) if userns => Ok(Root {
            path: mount_point(),
            ops: vec![Op::AttachIdmapped {
                target: Target::Abs(cstr(mount_point())?),
            }],
            idmap_source: Some(s.root.clone()),
        }),
        Some(s) => Ok(Root {
            path: s.root.clone(),
            ops: vec![Op::BindTree {
                src: cstr(&s.root)?,
                target: Target::Abs(cstr(&s.root)?),
                read_only: false,
                noatime: true,
                nodev: true,
            }],
            idmap_source: None,
        }),
        None if userns => {
            let mut ops = vec![Op::AttachIdmapped {
                target: Target::Abs(cstr(mount_point())?),
            }];
            if !spec.writable {
                ops.push(Op::Mount {
                    src: None,
                    target: Target::Abs(cstr(mount_point())?),
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
                path: mount_point(),
                ops,
                idmap_source: Some(rootfs.to_path_buf()),
            })
        }
        None => Ok(Root {
            path: rootfs.to_path_buf(),
            ops: vec![Op::BindTree {
                src: cstr(rootfs)?,
                target: Target::Abs(cstr(rootfs)?),
                read_only: !spec.writable && !spec.ephemeral,
                noatime: false,
                nodev: true,
            }],
            idmap_source: None,
        }),
    }
}

/// An overlay: a tmpfs on the shared state directory (in the sandbox's own mount namespace)
/// holding the upper and work layers, the source (or its ID-mapped copy) below.
fn overlay(s: &Snapshot, userns: bool, size: u64) -> Result<Root> {
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
    let (lower, idmap_source) = if userns {
        ops.push(Op::AttachIdmapped {
            target: Target::Abs(cstr(st.join("lower"))?),
        });
        (st.join("lower"), Some(s.lower.clone()))
    } else {
        (s.lower.clone(), None)
    };
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
