//! The sandbox's start as plain data: every mount, device node and the exec arguments,
//! built by the caller before the clone. [`super::run`] executes it; [`Program::describe`]
//! prints it for `--dry-run`.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// A user namespace: IDs 0..size inside are base..base+size outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub base: u32,
    pub size: u32,
}

/// A compiled seccomp program: one classic BPF filter (one JIT compile at install).
pub struct Filter {
    pub program: Vec<libc::sock_filter>,
    /// What it denies, for `--dry-run`.
    pub denied: &'static [&'static str],
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({} instructions)", self.program.len())
    }
}

/// A host file or directory the parent opened by the host path rule ([`crate::hostpath`]):
/// the child uses the descriptor, never the name. The descriptor is one of [`Program::held`].
#[derive(Debug, Clone)]
pub struct HostRef {
    pub fd: RawFd,
    /// Its path, for messages and `--dry-run`.
    pub shown: CString,
}

impl HostRef {
    /// Refer to `fd`, which `held` keeps open from now on.
    pub fn hold(fd: OwnedFd, shown: CString, held: &mut Vec<OwnedFd>) -> HostRef {
        let r = HostRef {
            fd: fd.as_raw_fd(),
            shown,
        };
        held.push(fd);
        r
    }
}

/// Where a mount goes.
#[derive(Debug)]
pub enum Target {
    /// A path bulkhead controls (its state directory, or inside a file system it just
    /// mounted: /dev's tmpfs, a fresh /proc or /sys).
    Abs(CString),
    /// A path inside the (possibly untrusted) root, resolved component by component with
    /// O_NOFOLLOW under the root: a symlink or `..` can never lead the mount outside it.
    InRoot {
        comps: Vec<CString>,
        display: String,
        create: Create,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Create {
    No,
    Dir,
    File,
}

#[derive(Debug)]
pub enum Op {
    Mount {
        src: Option<CString>,
        target: Target,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
    },
    /// A mask over a /proc or /sys path, skipped when the kernel does not have the path.
    MountIfExists {
        src: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
    },
    /// A recursive bind mount made with open_tree + mount_setattr + move_mount, so the
    /// read-only flag applies to the whole tree atomically. The source is a descriptor the
    /// parent opened: open_tree(fd, "", AT_EMPTY_PATH) clones what it was decided on, never
    /// what the name means by the time the child runs.
    BindTree {
        src: HostRef,
        target: Target,
        read_only: bool,
        /// No access-time updates (a throw-away root: atime writes would only dirty
        /// metadata of a copy that is about to be deleted).
        noatime: bool,
        /// nodev and nosuid: device nodes and setuid bits of the tree do nothing (the root
        /// and binds of directories; not a bind of one device node the plan asked for).
        nodev: bool,
    },
    /// Attach the ID-mapped copy of the root (or of the overlay's lower layer) the parent
    /// made for `--private-users`: files owned by host IDs 0..size show as 0..size inside.
    AttachIdmapped {
        target: Target,
    },
    Mkdir {
        path: CString,
        mode: libc::mode_t,
    },
    Mknod {
        path: CString,
        mode: libc::mode_t,
        dev: libc::dev_t,
    },
    Symlink {
        target: CString,
        path: CString,
    },
}

/// Everything the child needs, built before the clone.
pub struct Program {
    pub clone_flags: u64,
    pub root: CString,
    /// Makes the root a mount point (overlay, or a bind of the snapshot/ROOTFS).
    pub root_ops: Vec<Op>,
    /// Everything inside the root, executed with the root open as a directory fd.
    pub ops: Vec<Op>,
    pub hostname: CString,
    pub lo_up: bool,
    pub init: bool,
    pub cwd: CString,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
    pub drop_caps: Vec<u32>,
    pub filter: Option<Filter>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    /// Where execve is tried, in order (the PATH search, done in the child after the pivot).
    pub candidates: Vec<CString>,
    pub userns: Option<IdRange>,
    /// The tree the parent ID-mapped before the clone ([`super::idmapped_tree`]).
    pub idmapped: Option<std::os::fd::RawFd>,
    /// What gets ID-mapped: the root, or the overlay's lower layer.
    pub idmap_source: Option<HostRef>,
    /// The descriptors the operations refer to ([`HostRef`]), open until the sandbox has
    /// exited.
    pub held: Vec<OwnedFd>,
    pub program_name: String,
    /// fds 3..3+N stay open for the command (socket activation).
    pub listen_fds: u32,
    /// The index in `envp` of the `LISTEN_PID=` entry the child fills in with its own PID.
    pub listen_pid_slot: Option<usize>,
    /// The terminal side of a pseudo-terminal: the command's stdin, stdout, stderr and
    /// controlling terminal (`spawn --pty`).
    pub pty: Option<std::os::fd::RawFd>,
    /// `spawn --boot`: the `cgroup.procs` files of the container's own cgroups, opened by
    /// the parent; PID 1 writes itself into each, then makes its cgroup namespace there
    /// (the clone is made without CLONE_NEWCGROUP).
    pub join_cgroups: Vec<HostRef>,
    /// Sent to PID 1 instead of SIGTERM and SIGINT when bulkhead is asked to stop (a booted
    /// systemd halts on SIGRTMIN+3; SIGTERM would make it re-execute itself).
    pub stop_signal: Option<i32>,
}

/// A C string for a person.
/// A C string for messages.
pub(super) fn lossy(c: &CStr) -> String {
    c.to_string_lossy().to_string()
}

/// An optional C string for a person, `none` when absent.
fn or_none(c: &Option<CString>) -> String {
    c.as_deref().map(lossy).unwrap_or_else(|| "none".into())
}

impl Program {
    /// One line per operation, in order, for `spawn --dry-run`.
    pub fn describe(&self) -> Vec<String> {
        let mut out = vec![format!(
            "clone3 {} (new {} namespaces)",
            clone_flag_names(self.clone_flags),
            ns_names(self.clone_flags)
        )];
        out.push(if self.pty.is_some() {
            "setsid; a new pseudo-terminal as stdin, stdout, stderr and controlling terminal".into()
        } else {
            "setsid (a session of its own: no controlling terminal)".into()
        });
        if !self.join_cgroups.is_empty() {
            out.push(format!(
                "join the container's cgroups: echo 0 > {}; unshare(CLONE_NEWCGROUP) (its cgroup namespace starts there)",
                self.join_cgroups
                    .iter()
                    .map(|h| lossy(&h.shown))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out.push("mount --make-rslave /".into());
        for op in self.root_ops.iter().chain(&self.ops) {
            out.push(self.describe_op(op));
        }
        out.push(format!("sethostname {}", lossy(&self.hostname)));
        if self.lo_up {
            out.push("ip link set lo up".into());
        }
        out.push(format!("pivot_root {}", lossy(&self.root)));
        if self.init {
            out.push("fork: bulkhead-init stays PID 1, reaps and forwards signals".into());
        }
        self.describe_exec(&mut out);
        if let Some(s) = self.stop_signal {
            out.push(format!(
                "on SIGTERM or SIGINT to bulkhead: signal {s} (SIGRTMIN+{}) to PID 1",
                s - libc::SIGRTMIN()
            ));
        }
        out
    }

    /// A mount target: an absolute path, or a path in the root (made if missing).
    fn describe_target(&self, t: &Target) -> String {
        match t {
            Target::Abs(p) => lossy(p),
            Target::InRoot {
                display, create, ..
            } => format!(
                "{}{}",
                in_root(&lossy(&self.root), display),
                match create {
                    Create::No => "",
                    Create::Dir => " (created as a directory if missing)",
                    Create::File => " (created as a file if missing)",
                }
            ),
        }
    }

    fn describe_op(&self, op: &Op) -> String {
        let t = |t: &Target| self.describe_target(t);
        match op {
            Op::Mount {
                src,
                target,
                fstype,
                flags,
                data,
            } => describe_mount(src, &t(target), fstype, *flags, data, ""),
            Op::MountIfExists {
                src,
                target,
                fstype,
                flags,
                data,
            } => describe_mount(src, &lossy(target), fstype, *flags, data, " (if it exists)"),
            Op::BindTree {
                src,
                target,
                read_only,
                noatime,
                nodev,
            } => format!(
                "bind {} on {}{}{}{}",
                lossy(&src.shown),
                t(target),
                if *read_only { " read-only" } else { "" },
                if *noatime { " noatime" } else { "" },
                if *nodev { " nodev nosuid" } else { "" }
            ),
            Op::AttachIdmapped { target } => format!(
                "attach {} ID-mapped 0-{} -> {}-{} nodev nosuid private on {}",
                self.idmap_source
                    .as_ref()
                    .map(|h| lossy(&h.shown))
                    .unwrap_or_default(),
                self.userns.map(|u| u.size - 1).unwrap_or(0),
                self.userns.map(|u| u.base).unwrap_or(0),
                self.userns.map(|u| u.base + u.size - 1).unwrap_or(0),
                t(target)
            ),
            Op::Mkdir { path, mode } => format!("mkdir -m {mode:o} {}", lossy(path)),
            Op::Mknod { path, mode, dev } => format!(
                "mknod {} mode {:o} dev {}:{}",
                lossy(path),
                mode,
                libc::major(*dev),
                libc::minor(*dev)
            ),
            Op::Symlink { target, path } => format!("ln -s {} {}", lossy(target), lossy(path)),
        }
    }

    /// From the capabilities to execve.
    fn describe_exec(&self, out: &mut Vec<String>) {
        out.push(format!(
            "drop capabilities {:?} from the bounding set; clear the inheritable and ambient sets",
            self.drop_caps
        ));
        out.push(format!(
            "setgroups {:?}, setgid {}, setuid {}, chdir {}",
            self.groups,
            self.gid,
            self.uid,
            lossy(&self.cwd)
        ));
        out.push("close every fd above 2 on exec; PR_SET_NO_NEW_PRIVS".into());
        if let Some(f) = &self.filter {
            out.push(format!("seccomp: deny {}", f.denied.join(" ")));
        }
        out.push(format!(
            "environment: {}",
            self.envp
                .iter()
                .map(|c| lossy(c))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        out.push(format!(
            "execve {} (tried: {})",
            self.argv
                .iter()
                .map(|c| lossy(c))
                .collect::<Vec<_>>()
                .join(" "),
            self.candidates
                .iter()
                .map(|c| lossy(c))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// `display` (a path in the root, with or without its leading `/`) under `root`.
fn in_root(root: &str, display: &str) -> String {
    format!(
        "{}/{}",
        root.trim_end_matches('/'),
        display.trim_start_matches('/')
    )
}

/// The clone flags bulkhead sets: the kernel's name, and the namespace's short name.
const CLONE_FLAGS: [(libc::c_int, &str, Option<&str>); 9] = [
    (libc::CLONE_NEWNS, "CLONE_NEWNS", Some("mount")),
    (libc::CLONE_NEWCGROUP, "CLONE_NEWCGROUP", Some("cgroup")),
    (libc::CLONE_NEWUTS, "CLONE_NEWUTS", Some("uts")),
    (libc::CLONE_NEWIPC, "CLONE_NEWIPC", Some("ipc")),
    (libc::CLONE_NEWUSER, "CLONE_NEWUSER", Some("user")),
    (libc::CLONE_NEWPID, "CLONE_NEWPID", Some("pid")),
    (libc::CLONE_NEWNET, "CLONE_NEWNET", Some("net")),
    (libc::CLONE_PIDFD, "CLONE_PIDFD", None),
    (libc::CLONE_VFORK, "CLONE_VFORK", None),
];

/// The clone flags by name, as in the kernel's headers (`CLONE_NEWNS|CLONE_NEWPID`); bits
/// without a name here in hex.
fn clone_flag_names(flags: u64) -> String {
    let set = CLONE_FLAGS.iter().filter(|(f, ..)| flags & *f as u64 != 0);
    let named: u64 = set.clone().fold(0, |acc, (f, ..)| acc | *f as u64);
    let mut v: Vec<String> = set.map(|(_, n, _)| n.to_string()).collect();
    let left = flags & !named;
    if left != 0 || v.is_empty() {
        v.push(format!("{left:#x}"));
    }
    v.join("|")
}

/// The namespaces the flags make, by short name (`mount, pid, net`).
fn ns_names(flags: u64) -> String {
    CLONE_FLAGS
        .iter()
        .filter(|(f, ..)| flags & *f as u64 != 0)
        .filter_map(|(_, _, short)| *short)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `mount SRC on TARGET type FSTYPE flags FLAGS DATA`, and what follows.
fn describe_mount(
    src: &Option<CString>,
    target: &str,
    fstype: &Option<CString>,
    flags: libc::c_ulong,
    data: &Option<CString>,
    tail: &str,
) -> String {
    format!(
        "mount {} on {target} type {} flags {} {}{tail}",
        or_none(src),
        or_none(fstype),
        mount_flags(flags),
        data.as_deref().map(lossy).unwrap_or_default()
    )
}

fn mount_flags(f: libc::c_ulong) -> String {
    let mut v = Vec::new();
    for (b, n) in [
        (libc::MS_RDONLY, "ro"),
        (libc::MS_NOSUID, "nosuid"),
        (libc::MS_NODEV, "nodev"),
        (libc::MS_NOEXEC, "noexec"),
        (libc::MS_BIND, "bind"),
        (libc::MS_REC, "rec"),
        (libc::MS_REMOUNT, "remount"),
        (libc::MS_STRICTATIME, "strictatime"),
    ] {
        if f & b != 0 {
            v.push(n);
        }
    }
    if v.is_empty() {
        "defaults".into()
    } else {
        v.join(",")
    }
}

#[cfg(test)]
mod describe_tests {
    use super::{clone_flag_names, in_root};

    #[test]
    fn clone_flags_are_named_and_paths_joined() {
        let flags = (libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWNET) as u64;
        assert_eq!(
            clone_flag_names(flags),
            "CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWNET"
        );
        assert_eq!(clone_flag_names(1 << 40 | flags).split('|').count(), 4);
        assert_eq!(clone_flag_names(0), "0x0");
        assert_eq!(in_root("/run/x/.overlay", "proc"), "/run/x/.overlay/proc");
        assert_eq!(
            in_root("/run/x/.overlay/", "/dev/pts"),
            "/run/x/.overlay/dev/pts"
        );
    }
}
