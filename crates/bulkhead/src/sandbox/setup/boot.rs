//! What a booted init expects of its container (`spawn --boot`, systemd's container
//! interface): a private /run with /run/lock, and /sys/fs/cgroup as systemd-nspawn builds
//! it. Made after the user's binds and tmpfs mounts, so nothing of theirs covers them.
//!
//! /sys/fs/cgroup: on a pure cgroup2 host, cgroup2 mounted read-write; on a hybrid or v1 host,
//! a tmpfs with each controller hierarchy read-only, the name=systemd hierarchy and the
//! cgroup2 `unified` one read-write, then the tmpfs made read-only. PID 1 has joined its own
//! cgroups and made its cgroup namespace there before these mounts
//! ([`bulkhead_sys::launch::Program::join_cgroups`]), so each mount shows its own cgroup as
//! the root: what it may write is only what bulkhead made for it.

use super::mounts::mount;
use super::{cstr, in_root, Create, Op, Target};
use crate::sandbox::SandboxSpec;
use bulkhead_plan::sandbox::tmpfs_options;
use bulkhead_sys::bootcg::{Hierarchy, Kind};
use bulkhead_sys::error::Result;
use std::path::Path;

const NOSUID_NODEV_NOEXEC: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;

/// The size of /run/lock (Debian's own).
const RUN_LOCK_SIZE: u64 = 5 << 20;

/// The mount points' tmpfs on /sys/fs/cgroup: directories and links only.
const CGROUP_TMPFS: &str = "mode=0755,size=1m,nr_inodes=1024";

/// Make an existing mount read-only (a bind remount: the mount's flags only).
fn read_only(path: &Path) -> Result<Op> {
    Ok(Op::Mount {
        src: None,
        target: Target::Abs(cstr(path)?),
        fstype: None,
        flags: libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | NOSUID_NODEV_NOEXEC,
        data: None,
    })
}

/// A tmpfs on /run (mode 0755, the `--tmp-size` cap) and on /run/lock (1777, 5M).
pub fn run(ops: &mut Vec<Op>, spec: &SandboxSpec, root: &Path, mp: Create) -> Result<()> {
    ops.push(mount(
        "tmpfs",
        in_root(Path::new("run"), mp)?,
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&tmpfs_options("0755", spec.sizes.tmp)),
    )?);
    let lock = root.join("run/lock");
    ops.push(Op::Mkdir {
        path: cstr(&lock)?,
        mode: 0o755,
    });
    ops.push(mount(
        "tmpfs",
        Target::Abs(cstr(&lock)?),
        "tmpfs",
        NOSUID_NODEV_NOEXEC,
        Some(&tmpfs_options("1777", RUN_LOCK_SIZE)),
    )?);
    Ok(())
}

/// /sys/fs/cgroup for the init (see the module's text), from the host's `hier`archies.
pub fn cgroups(ops: &mut Vec<Op>, root: &Path, hier: &[Hierarchy]) -> Result<()> {
    let fs = root.join("sys/fs/cgroup");
    let target = || in_root(Path::new("sys/fs/cgroup"), Create::No);
    if hier.iter().all(|h| h.kind == Kind::Unified) {
        ops.push(mount(
            "cgroup2",
            target()?,
            "cgroup2",
            NOSUID_NODEV_NOEXEC,
            None,
        )?);
        return Ok(());
    }
    ops.push(mount(
        "tmpfs",
        target()?,
        "tmpfs",
        NOSUID_NODEV_NOEXEC,
        Some(CGROUP_TMPFS),
    )?);
    for h in hier {
        let name = h.name();
        let dir = fs.join(&name);
        ops.push(Op::Mkdir {
            path: cstr(&dir)?,
            mode: 0o755,
        });
        let (fstype, data) = match h.kind {
            Kind::Unified => ("cgroup2", None),
            _ => ("cgroup", Some(h.options.as_str())),
        };
        ops.push(mount(
            fstype,
            Target::Abs(cstr(&dir)?),
            fstype,
            NOSUID_NODEV_NOEXEC,
            data,
        )?);
        if !h.writable() {
            ops.push(read_only(&dir)?);
        }
        // Co-mounted controllers (cpu,cpuacct) are reached by each name too.
        if h.kind == Kind::Controllers && name.contains(',') {
            for part in name.split(',') {
                ops.push(Op::Symlink {
                    target: cstr(&name)?,
                    path: cstr(fs.join(part))?,
                });
            }
        }
    }
    ops.push(Op::Mount {
        src: None,
        target: Target::Abs(cstr(&fs)?),
        fstype: None,
        flags: libc::MS_REMOUNT | libc::MS_RDONLY | NOSUID_NODEV_NOEXEC,
        data: Some(cstr(CGROUP_TMPFS)?),
    });
    Ok(())
}
