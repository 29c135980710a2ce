//! The file systems inside the root: a fresh /proc, a read-only /sys, a minimal /dev, a
//! private /tmp, the user's binds and tmpfs mounts, and the /proc and /sys paths runc and
//! systemd-nspawn hide or make read-only.

use super::{cstr, hold, host_ref, in_root, Create, Op, Target};
use crate::sandbox::{Net, Opened, SandboxSpec};
use bulkhead_plan::sandbox::tmpfs_options;
use bulkhead_sys::error::Result;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::Path;

/// /proc files hidden behind /dev/null, directories behind an empty read-only tmpfs, and
/// paths made read-only: the set runc and systemd-nspawn use.
const MASKED_FILES: &[&str] = &[
    "proc/kcore",
    "proc/keys",
    "proc/timer_list",
    "proc/sched_debug",
    "proc/latency_stats",
];
const MASKED_DIRS: &[&str] = &[
    "proc/acpi",
    "proc/scsi",
    "sys/firmware",
    "sys/devices/virtual/powercap",
];
const READ_ONLY: &[&str] = &[
    "proc/bus",
    "proc/fs",
    "proc/irq",
    "proc/sys",
    "proc/sysrq-trigger",
];

/// The device nodes every program expects, and nothing that reaches hardware.
const DEVICES: &[(&str, u32, u32)] = &[
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

const NOSUID_NODEV: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV;

pub(super) fn mount(
    src: &str,
    target: Target,
    fstype: &str,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<Op> {
    Ok(Op::Mount {
        src: Some(cstr(src)?),
        target,
        fstype: Some(cstr(fstype)?),
        flags,
        data: data.map(cstr).transpose()?,
    })
}

pub fn proc_and_sys(
    ops: &mut Vec<Op>,
    spec: &SandboxSpec,
    mp: Create,
    held: &mut Vec<OwnedFd>,
) -> Result<()> {
    ops.push(mount(
        "proc",
        in_root(Path::new("proc"), mp)?,
        "proc",
        NOSUID_NODEV | libc::MS_NOEXEC,
        None,
    )?);
    if spec.net == Net::Host && spec.private_users.is_some() {
        // sysfs cannot be mounted for a network namespace the sandbox does not own.
        ops.push(Op::BindTree {
            src: host_ref("/sys", held)?,
            target: in_root(Path::new("sys"), mp)?,
            read_only: true,
            noatime: false,
            nodev: true,
        });
    } else {
        ops.push(mount(
            "sysfs",
            in_root(Path::new("sys"), mp)?,
            "sysfs",
            NOSUID_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
            None,
        )?);
    }
    Ok(())
}

/// A tmpfs on /dev with the nodes of [`DEVICES`] (bound from the host's in a user namespace,
/// where mknod is not allowed), the usual links, devpts and /dev/shm.
pub fn dev(
    ops: &mut Vec<Op>,
    spec: &SandboxSpec,
    root: &Path,
    mp: Create,
    held: &mut Vec<OwnedFd>,
) -> Result<()> {
    let r = |p: &str| -> Result<CString> { cstr(root.join(p)) };
    ops.push(mount(
        "tmpfs",
        in_root(Path::new("dev"), mp)?,
        "tmpfs",
        libc::MS_NOSUID | libc::MS_STRICTATIME,
        Some("mode=0755,size=4m"),
    )?);
    for (name, major, minor) in DEVICES {
        let path = r(&format!("dev/{name}"))?;
        if spec.private_users.is_some() {
            ops.push(Op::Mknod {
                path: path.clone(),
                mode: libc::S_IFREG | 0o666,
                dev: 0,
            });
            ops.push(Op::BindTree {
                src: host_ref(&format!("/dev/{name}"), held)?,
                target: Target::Abs(path),
                read_only: false,
                noatime: false,
                nodev: false,
            });
        } else {
            ops.push(Op::Mknod {
                path,
                mode: libc::S_IFCHR | 0o666,
                dev: libc::makedev(*major, *minor),
            });
        }
    }
    for (target, link) in [
        ("/proc/self/fd", "dev/fd"),
        ("/proc/self/fd/0", "dev/stdin"),
        ("/proc/self/fd/1", "dev/stdout"),
        ("/proc/self/fd/2", "dev/stderr"),
        ("pts/ptmx", "dev/ptmx"),
    ] {
        ops.push(Op::Symlink {
            target: cstr(target)?,
            path: r(link)?,
        });
    }
    ops.push(Op::Mkdir {
        path: r("dev/pts")?,
        mode: 0o755,
    });
    ops.push(mount(
        "devpts",
        Target::Abs(r("dev/pts")?),
        "devpts",
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )?);
    ops.push(Op::Mkdir {
        path: r("dev/shm")?,
        mode: 0o1777,
    });
    ops.push(mount(
        "shm",
        Target::Abs(r("dev/shm")?),
        "tmpfs",
        NOSUID_NODEV,
        Some(&tmpfs_options("1777", spec.sizes.shm)),
    )?);
    Ok(())
}

/// A private /tmp, then the user's `--bind`s and `--tmpfs` mounts (mount points are created
/// only in a writable root). Each bind source is the descriptor [`super::super::validate`]
/// opened: whether it is a device node (the one bind that keeps its devices) is decided on
/// that descriptor's `fstat`, and the child clones that very file.
pub fn tmp_binds_tmpfs(
    ops: &mut Vec<Op>,
    spec: &SandboxSpec,
    opened: &Opened,
    mp: Create,
    held: &mut Vec<OwnedFd>,
) -> Result<()> {
    ops.push(mount(
        "tmpfs",
        in_root(Path::new("tmp"), mp)?,
        "tmpfs",
        NOSUID_NODEV,
        Some(&tmpfs_options("1777", spec.sizes.tmp)),
    )?);
    let writable_root = spec.ephemeral || spec.writable;
    for (b, src) in spec.binds.iter().zip(&opened.binds) {
        let create = if !writable_root {
            Create::No
        } else if src.is_dir() {
            Create::Dir
        } else {
            Create::File
        };
        ops.push(Op::BindTree {
            src: hold(src, &b.src, held)?,
            target: in_root(&b.dst, create)?,
            read_only: b.read_only,
            noatime: false,
            // A bind of one device node is the plan's explicit allow; every other bind is
            // nodev (a directory of the host's /dev would otherwise hand out all of them).
            nodev: !src.is_device(),
        });
    }
    for t in &spec.tmpfs {
        let create = if writable_root {
            Create::Dir
        } else {
            Create::No
        };
        ops.push(mount(
            "tmpfs",
            in_root(t, create)?,
            "tmpfs",
            NOSUID_NODEV,
            Some(&tmpfs_options("0755", spec.sizes.tmp)),
        )?);
    }
    Ok(())
}

/// [`MASKED_FILES`], [`MASKED_DIRS`] and [`READ_ONLY`], each skipped where the kernel lacks
/// the path.
pub fn masks(ops: &mut Vec<Op>, root: &Path) -> Result<()> {
    let r = |p: &str| -> Result<CString> { cstr(root.join(p)) };
    for f in MASKED_FILES {
        ops.push(Op::MountIfExists {
            src: Some(r("dev/null")?),
            target: r(f)?,
            fstype: None,
            flags: libc::MS_BIND,
            data: None,
        });
    }
    for d in MASKED_DIRS {
        ops.push(Op::MountIfExists {
            src: Some(cstr("tmpfs")?),
            target: r(d)?,
            fstype: Some(cstr("tmpfs")?),
            flags: libc::MS_RDONLY | NOSUID_NODEV | libc::MS_NOEXEC,
            data: Some(cstr("size=0")?),
        });
    }
    for p in READ_ONLY {
        ops.push(Op::MountIfExists {
            src: Some(r(p)?),
            target: r(p)?,
            fstype: None,
            flags: libc::MS_BIND | libc::MS_REC,
            data: None,
        });
        ops.push(Op::MountIfExists {
            src: None,
            target: r(p)?,
            fstype: None,
            flags: libc::MS_BIND
                | libc::MS_REMOUNT
                | libc::MS_RDONLY
                | NOSUID_NODEV
                | libc::MS_NOEXEC,
            data: None,
        });
    }
    Ok(())
}
