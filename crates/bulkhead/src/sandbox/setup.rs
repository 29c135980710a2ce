//! The sandbox's start as plain data: every mount, device node and the exec arguments, built
//! in the parent before the clone. The child executes it ([`super::child`]); `--dry-run`
//! prints it ([`Program::describe`]).

use super::{invalid, seccomp, Net, SandboxSpec, UserRange};
use crate::run::RunError;
use crate::snapshot::{Method, Snapshot};
use bulkhead_sys::error::{Error, Result};
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

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
    /// read-only flag applies to the whole tree atomically.
    BindTree {
        src: CString,
        target: Target,
        read_only: bool,
        /// No access-time updates (a throw-away root: atime writes would only dirty
        /// metadata of a copy that is about to be deleted).
        noatime: bool,
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
    pub(crate) clone_flags: u64,
    pub(crate) root: CString,
    /// Makes the root a mount point (overlay, or a bind of the snapshot/ROOTFS).
    pub(crate) root_ops: Vec<Op>,
    /// Everything inside the root, executed with the root open as a directory fd.
    pub(crate) ops: Vec<Op>,
    pub(crate) hostname: CString,
    pub(crate) lo_up: bool,
    pub(crate) init: bool,
    pub(crate) cwd: CString,
    pub(crate) uid: libc::uid_t,
    pub(crate) gid: libc::gid_t,
    pub(crate) groups: Vec<libc::gid_t>,
    pub(crate) drop_caps: Vec<u32>,
    pub(crate) filter: Option<seccomp::Filter>,
    pub(crate) argv: Vec<CString>,
    pub(crate) envp: Vec<CString>,
    /// Where execve is tried, in order (the PATH search, done in the child after the pivot).
    pub(crate) candidates: Vec<CString>,
    pub(crate) userns: Option<UserRange>,
    /// The tree the parent ID-mapped before the clone (see [`super::idmap`]).
    pub(crate) idmapped: Option<std::os::fd::RawFd>,
    /// What gets ID-mapped: the root, or the overlay's lower layer.
    pub idmap_source: Option<PathBuf>,
    pub(crate) program_name: String,
    /// fds 3..3+N stay open for the command (socket activation).
    pub(crate) listen_fds: u32,
    /// The index in `envp` of the `LISTEN_PID=` entry the child fills in with its own PID.
    pub(crate) listen_pid_slot: Option<usize>,
}

/// The IDs the command runs as, from the sandbox root's own /etc/passwd and /etc/group.
#[derive(Debug, Clone)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub home: String,
    pub user: Option<String>,
}

/// Look `--uid`/`--gid` up in the root's passwd and group files, as systemd-nspawn --user
/// does: the names that matter are the sandbox's, not the host's.
pub fn resolve_ids(rootfs: &Path, spec: &SandboxSpec) -> std::result::Result<Ids, RunError> {
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap_or_default();
    let group = std::fs::read_to_string(rootfs.join("etc/group")).unwrap_or_default();
    let users: Vec<Vec<&str>> = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 7)
        .collect();
    let mut ids = Ids {
        uid: 0,
        gid: 0,
        groups: Vec::new(),
        home: "/root".into(),
        user: Some("root".into()),
    };
    if let Some(u) = &spec.uid {
        let entry = users
            .iter()
            .find(|f| f[0] == u.as_str() || f[2] == u.as_str());
        match (entry, u.parse::<u32>()) {
            (Some(f), _) => {
                ids.uid = f[2].parse().unwrap_or(0);
                ids.gid = f[3].parse().unwrap_or(0);
                ids.home = f[5].to_string();
                ids.user = Some(f[0].to_string());
            }
            (None, Ok(n)) => {
                ids.uid = n;
                ids.home = "/".into();
                ids.user = None;
                if spec.gid.is_none() {
                    return Err(invalid(
                        format!("--uid {u}: the root's /etc/passwd has no such user, so --gid is needed"),
                        "add --gid GID",
                    ));
                }
            }
            (None, Err(_)) => {
                return Err(invalid(
                    format!(
                        "--uid {u}: no such user in {}",
                        rootfs.join("etc/passwd").display()
                    ),
                    "the name is looked up inside the sandbox's root; give a user it has, or a numeric UID with --gid",
                ))
            }
        }
    }
    if let Some(g) = &spec.gid {
        let entry = group
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() >= 3 && (f[0] == g.as_str() || f[2] == g.as_str()));
        ids.gid = match (entry, g.parse::<u32>()) {
            (Some(f), _) => f[2].parse().unwrap_or(0),
            (None, Ok(n)) => n,
            (None, Err(_)) => {
                return Err(invalid(
                    format!(
                        "--gid {g}: no such group in {}",
                        rootfs.join("etc/group").display()
                    ),
                    "give a group the sandbox's root has, or a numeric GID",
                ))
            }
        };
    }
    ids.groups = vec![ids.gid];
    if let Some(name) = &ids.user {
        for f in group.lines().map(|l| l.split(':').collect::<Vec<_>>()) {
            if f.len() >= 4 && f[3].split(',').any(|m| m == name) {
                if let Ok(g) = f[2].parse::<u32>() {
                    if !ids.groups.contains(&g) {
                        ids.groups.push(g);
                    }
                }
            }
        }
    }
    Ok(ids)
}

fn cstr(p: impl AsRef<OsStr>) -> Result<CString> {
    CString::new(p.as_ref().as_bytes())
        .map_err(|_| Error::failed(format!("{:?}: a path with a NUL byte", p.as_ref())))
}

fn in_root(p: &Path, create: Create) -> Result<Target> {
    let mut comps = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => comps.push(cstr(n)?),
            Component::RootDir | Component::CurDir => {}
            _ => {
                return Err(Error::failed(format!(
                    "{}: '..' in a sandbox path",
                    p.display()
                )))
            }
        }
    }
    Ok(Target::InRoot {
        comps,
        display: p.display().to_string(),
        create,
    })
}

/// The capabilities the sandbox keeps in its bounding set: Docker's default set, less
/// CAP_MKNOD (there is no device cgroup per sandbox) and less CAP_NET_RAW on the host's
/// network.
fn kept_caps(net: Net) -> Vec<u32> {
    let mut keep = vec![
        0,  // CAP_CHOWN
        1,  // CAP_DAC_OVERRIDE
        3,  // CAP_FOWNER
        4,  // CAP_FSETID
        5,  // CAP_KILL
        6,  // CAP_SETGID
        7,  // CAP_SETUID
        8,  // CAP_SETPCAP
        10, // CAP_NET_BIND_SERVICE
        18, // CAP_SYS_CHROOT
        29, // CAP_AUDIT_WRITE
        31, // CAP_SETFCAP
    ];
    if net != Net::Host {
        keep.push(13); // CAP_NET_RAW
    }
    keep
}

fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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

impl Program {
    pub fn build(
        spec: &SandboxSpec,
        rootfs: &Path,
        snap: Option<&Snapshot>,
        ids: Ids,
    ) -> Result<Program> {
        let userns = spec.private_users;
        let mut clone_flags = (libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWCGROUP) as u64;
        if spec.net != Net::Host {
            clone_flags |= libc::CLONE_NEWNET as u64;
        }
        if userns.is_some() {
            clone_flags |= libc::CLONE_NEWUSER as u64;
        }
        let mut root_ops = Vec::new();
        let mut idmap_source = None;
        // The mount point pivot_root moves into.
        let root: PathBuf = match snap {
            Some(s) if s.method == Method::Overlay => {
                let st = &s.state_dir;
                root_ops.push(Op::Mount {
                    src: Some(cstr("bulkhead")?),
                    target: Target::Abs(cstr(st)?),
                    fstype: Some(cstr("tmpfs")?),
                    flags: libc::MS_NOSUID | libc::MS_NODEV,
                    data: Some(cstr("mode=0755")?),
                });
                for d in ["upper", "work", "root", "lower"] {
                    root_ops.push(Op::Mkdir {
                        path: cstr(st.join(d))?,
                        mode: 0o755,
                    });
                }
                let lower = if userns.is_some() {
                    root_ops.push(Op::AttachIdmapped {
                        target: Target::Abs(cstr(st.join("lower"))?),
                    });
                    idmap_source = Some(s.lower.clone());
                    st.join("lower")
                } else {
                    s.lower.clone()
                };
                // No inode index, no persistent UUID, no xino: a throw-away upper layer on
                // tmpfs needs none of them, and each costs work at mount time.
                let mut data = format!(
                    "lowerdir={},upperdir={},workdir={},index=off,uuid=off,xino=off",
                    lower.display(),
                    st.join("upper").display(),
                    st.join("work").display()
                );
                if userns.is_some() {
                    data.push_str(",userxattr");
                }
                root_ops.push(Op::Mount {
                    src: Some(cstr("overlay")?),
                    target: Target::Abs(cstr(&s.root)?),
                    fstype: Some(cstr("overlay")?),
                    flags: 0,
                    data: Some(cstr(data)?),
                });
                s.root.clone()
            }
            Some(s) if userns.is_some() => {
                root_ops.push(Op::AttachIdmapped {
                    target: Target::Abs(cstr(&s.root)?),
                });
                idmap_source = Some(s.root.clone());
                s.root.clone()
            }
            Some(s) => {
                root_ops.push(Op::BindTree {
                    src: cstr(&s.root)?,
                    target: Target::Abs(cstr(&s.root)?),
                    read_only: false,
                    noatime: true,
                });
                s.root.clone()
            }
            None if userns.is_some() => {
                root_ops.push(Op::AttachIdmapped {
                    target: Target::Abs(cstr(rootfs)?),
                });
                if !spec.writable {
                    root_ops.push(Op::Mount {
                        src: None,
                        target: Target::Abs(cstr(rootfs)?),
                        fstype: None,
                        flags: libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                        data: None,
                    });
                }
                idmap_source = Some(rootfs.to_path_buf());
                rootfs.to_path_buf()
            }
            None => {
                root_ops.push(Op::BindTree {
                    src: cstr(rootfs)?,
                    target: Target::Abs(cstr(rootfs)?),
                    read_only: !spec.writable && !spec.ephemeral,
                    noatime: false,
                });
                rootfs.to_path_buf()
            }
        };
        let writable_root = spec.ephemeral || spec.writable;
        let mp = if spec.ephemeral {
            Create::Dir
        } else {
            Create::No
        };
        let r = |p: &str| -> Result<CString> { cstr(root.join(p)) };
        let mut ops = Vec::new();
        let nosuid_nodev = libc::MS_NOSUID | libc::MS_NODEV;
        ops.push(Op::Mount {
            src: Some(cstr("proc")?),
            target: in_root(Path::new("proc"), mp)?,
            fstype: Some(cstr("proc")?),
            flags: nosuid_nodev | libc::MS_NOEXEC,
            data: None,
        });
        if spec.net == Net::Host && userns.is_some() {
            // sysfs cannot be mounted for a network namespace the sandbox does not own.
            ops.push(Op::BindTree {
                src: cstr("/sys")?,
                target: in_root(Path::new("sys"), mp)?,
                read_only: true,
                noatime: false,
            });
        } else {
            ops.push(Op::Mount {
                src: Some(cstr("sysfs")?),
                target: in_root(Path::new("sys"), mp)?,
                fstype: Some(cstr("sysfs")?),
                flags: nosuid_nodev | libc::MS_NOEXEC | libc::MS_RDONLY,
                data: None,
            });
        }
        ops.push(Op::Mount {
            src: Some(cstr("tmpfs")?),
            target: in_root(Path::new("dev"), mp)?,
            fstype: Some(cstr("tmpfs")?),
            flags: libc::MS_NOSUID | libc::MS_STRICTATIME,
            data: Some(cstr("mode=0755,size=4m")?),
        });
        // A minimal /dev: the nodes every program expects, nothing that reaches hardware.
        for (name, major, minor) in [
            ("null", 1, 3),
            ("zero", 1, 5),
            ("full", 1, 7),
            ("random", 1, 8),
            ("urandom", 1, 9),
            ("tty", 5, 0),
        ] {
            if userns.is_some() {
                // mknod is not allowed in a user namespace: bind the host's node instead.
                ops.push(Op::Mknod {
                    path: r(&format!("dev/{name}"))?,
                    mode: libc::S_IFREG | 0o666,
                    dev: 0,
                });
                ops.push(Op::BindTree {
                    src: cstr(format!("/dev/{name}"))?,
                    target: Target::Abs(r(&format!("dev/{name}"))?),
                    read_only: false,
                    noatime: false,
                });
            } else {
                ops.push(Op::Mknod {
                    path: r(&format!("dev/{name}"))?,
                    mode: libc::S_IFCHR | 0o666,
                    dev: libc::makedev(major, minor),
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
        ops.push(Op::Mount {
            src: Some(cstr("devpts")?),
            target: Target::Abs(r("dev/pts")?),
            fstype: Some(cstr("devpts")?),
            flags: libc::MS_NOSUID | libc::MS_NOEXEC,
            data: Some(cstr("newinstance,ptmxmode=0666,mode=0620")?),
        });
        ops.push(Op::Mkdir {
            path: r("dev/shm")?,
            mode: 0o1777,
        });
        ops.push(Op::Mount {
            src: Some(cstr("shm")?),
            target: Target::Abs(r("dev/shm")?),
            fstype: Some(cstr("tmpfs")?),
            flags: nosuid_nodev,
            data: Some(cstr("mode=1777")?),
        });
        ops.push(Op::Mount {
            src: Some(cstr("tmpfs")?),
            target: in_root(Path::new("tmp"), mp)?,
            fstype: Some(cstr("tmpfs")?),
            flags: nosuid_nodev,
            data: Some(cstr("mode=1777")?),
        });
        for b in &spec.binds {
            let create = if !writable_root {
                Create::No
            } else if b.src.is_dir() {
                Create::Dir
            } else {
                Create::File
            };
            ops.push(Op::BindTree {
                src: cstr(&b.src)?,
                target: in_root(&b.dst, create)?,
                read_only: b.read_only,
                noatime: false,
            });
        }
        for t in &spec.tmpfs {
            ops.push(Op::Mount {
                src: Some(cstr("tmpfs")?),
                target: in_root(
                    t,
                    if writable_root {
                        Create::Dir
                    } else {
                        Create::No
                    },
                )?,
                fstype: Some(cstr("tmpfs")?),
                flags: nosuid_nodev,
                data: Some(cstr("mode=0755")?),
            });
        }
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
                flags: libc::MS_RDONLY | nosuid_nodev | libc::MS_NOEXEC,
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
                    | nosuid_nodev
                    | libc::MS_NOEXEC,
                data: None,
            });
        }

        let hostname = spec.hostname.clone().unwrap_or_else(|| {
            let base = rootfs
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let h: String = base
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '-'
                    }
                })
                .take(63)
                .collect();
            if h.trim_matches('-').is_empty() {
                "sandbox".into()
            } else {
                h
            }
        });

        // The environment: clean, as systemd-nspawn gives it, then the user's settings.
        let mut env: Vec<(String, String)> = vec![
            ("PATH".into(), DEFAULT_PATH.into()),
            ("HOME".into(), ids.home.clone()),
            ("container".into(), "bulkhead".into()),
        ];
        if let Some(u) = &ids.user {
            env.push(("USER".into(), u.clone()));
            env.push(("LOGNAME".into(), u.clone()));
        }
        if let Ok(t) = std::env::var("TERM") {
            env.push(("TERM".into(), t));
        }
        for (k, v) in &spec.env {
            env.retain(|(ek, _)| ek != k);
            env.push((k.clone(), v.clone()));
        }
        let mut listen_pid_slot = None;
        if spec.listen_fds > 0 {
            env.retain(|(k, _)| k != "LISTEN_FDS" && k != "LISTEN_PID");
            env.push(("LISTEN_FDS".into(), spec.listen_fds.to_string()));
            // Filled in by the command's process with its PID inside the sandbox.
            listen_pid_slot = Some(env.len());
            env.push(("LISTEN_PID".into(), String::new()));
        }
        let envp = env
            .iter()
            .map(|(k, v)| cstr(format!("{k}={v}")))
            .collect::<Result<Vec<_>>>()?;
        let argv = spec.argv.iter().map(cstr).collect::<Result<Vec<_>>>()?;
        let prog = &spec.argv[0];
        let program_name = prog.to_string_lossy().to_string();
        let candidates = if prog.as_bytes().contains(&b'/') {
            vec![cstr(prog)?]
        } else {
            let path = env
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            path.split(':')
                .filter(|d| !d.is_empty())
                .map(|d| cstr(Path::new(d).join(prog)))
                .collect::<Result<Vec<_>>>()?
        };
        let keep = kept_caps(spec.net);
        let drop_caps = (0..=last_cap()).filter(|c| !keep.contains(c)).collect();
        let filter = if spec.seccomp {
            Some(seccomp::default_filter()?)
        } else {
            None
        };
        let cwd = match &spec.cwd {
            Some(c) => cstr(c)?,
            None if spec.uid.is_some() && ids.home.starts_with('/') => cstr(&ids.home)?,
            None => cstr("/")?,
        };
        Ok(Program {
            clone_flags,
            root: cstr(&root)?,
            root_ops,
            ops,
            hostname: cstr(hostname)?,
            lo_up: spec.net == Net::Private,
            init: !spec.as_pid1,
            cwd,
            uid: ids.uid,
            gid: ids.gid,
            groups: ids.groups,
            drop_caps,
            filter,
            argv,
            envp,
            candidates,
            userns,
            idmapped: None,
            idmap_source,
            program_name,
            listen_fds: spec.listen_fds,
            listen_pid_slot,
        })
    }

    /// One line per operation, in order, for `spawn --dry-run`.
    pub fn describe(&self) -> Vec<String> {
        let s = |c: &CString| c.to_string_lossy().to_string();
        let o = |c: &Option<CString>| c.as_ref().map(s).unwrap_or_else(|| "none".into());
        let t = |t: &Target| match t {
            Target::Abs(p) => s(p),
            Target::InRoot {
                display, create, ..
            } => format!(
                "{}{display}{}",
                s(&self.root),
                match create {
                    Create::No => "",
                    Create::Dir => " (created as a directory if missing)",
                    Create::File => " (created as a file if missing)",
                }
            ),
        };
        let mut out = vec![format!(
            "clone3 flags={} (new {})",
            self.clone_flags,
            ns_names(self.clone_flags)
        )];
        out.push("mount --make-rslave /".into());
        for op in self.root_ops.iter().chain(&self.ops) {
            out.push(match op {
                Op::Mount {
                    src,
                    target,
                    fstype,
                    flags,
                    data,
                } => format!(
                    "mount {} on {} type {} flags {} {}",
                    o(src),
                    t(target),
                    o(fstype),
                    mount_flags(*flags),
                    data.as_ref().map(s).unwrap_or_default()
                ),
                Op::MountIfExists {
                    src,
                    target,
                    fstype,
                    flags,
                    data,
                } => format!(
                    "mount {} on {} type {} flags {} {} (if it exists)",
                    o(src),
                    s(target),
                    o(fstype),
                    mount_flags(*flags),
                    data.as_ref().map(s).unwrap_or_default()
                ),
                Op::BindTree {
                    src,
                    target,
                    read_only,
                    noatime,
                } => format!(
                    "bind {} on {}{}{}",
                    s(src),
                    t(target),
                    if *read_only { " read-only" } else { "" },
                    if *noatime { " noatime" } else { "" }
                ),
                Op::AttachIdmapped { target } => format!(
                    "attach {} ID-mapped 0-{} -> {}-{} on {}",
                    self.idmap_source
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    self.userns.map(|u| u.size - 1).unwrap_or(0),
                    self.userns.map(|u| u.base).unwrap_or(0),
                    self.userns.map(|u| u.base + u.size - 1).unwrap_or(0),
                    t(target)
                ),
                Op::Mkdir { path, mode } => format!("mkdir -m {mode:o} {}", s(path)),
                Op::Mknod { path, mode, dev } => format!(
                    "mknod {} mode {:o} dev {}:{}",
                    s(path),
                    mode,
                    libc::major(*dev),
                    libc::minor(*dev)
                ),
                Op::Symlink { target, path } => format!("ln -s {} {}", s(target), s(path)),
            });
        }
        out.push(format!("sethostname {}", s(&self.hostname)));
        if self.lo_up {
            out.push("ip link set lo up".into());
        }
        out.push(format!("pivot_root {}", s(&self.root)));
        if self.init {
            out.push("fork: bulkhead-init stays PID 1, reaps and forwards signals".into());
        }
        out.push(format!(
            "drop capabilities {:?} from the bounding set",
            self.drop_caps
        ));
        out.push(format!(
            "setgroups {:?}, setgid {}, setuid {}, chdir {}",
            self.groups,
            self.gid,
            self.uid,
            s(&self.cwd)
        ));
        out.push("close every fd above 2 on exec; PR_SET_NO_NEW_PRIVS".into());
        if self.filter.is_some() {
            out.push(format!("seccomp: deny {}", seccomp::DENIED.join(" ")));
        }
        out.push(format!(
            "execve {} (tried: {})",
            self.argv.iter().map(s).collect::<Vec<_>>().join(" "),
            self.candidates.iter().map(s).collect::<Vec<_>>().join(", ")
        ));
        out
    }
}

fn ns_names(flags: u64) -> String {
    let mut v = Vec::new();
    for (f, n) in [
        (libc::CLONE_NEWNS, "mount"),
        (libc::CLONE_NEWPID, "pid"),
        (libc::CLONE_NEWUTS, "uts"),
        (libc::CLONE_NEWIPC, "ipc"),
        (libc::CLONE_NEWCGROUP, "cgroup"),
        (libc::CLONE_NEWNET, "net"),
        (libc::CLONE_NEWUSER, "user"),
    ] {
        if flags & f as u64 != 0 {
            v.push(n);
        }
    }
    v.join(", ")
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
