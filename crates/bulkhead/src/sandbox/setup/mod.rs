//! The sandbox's start as plain data: every mount, device node and the exec arguments, built
//! in the parent before the clone, one function per step. The leaf layer executes it
//! ([`bulkhead_sys::launch::run`]); `--dry-run` prints it ([`Program::describe`]).

mod boot;
mod exec;
mod ids;
mod mounts;
mod root;

pub use bulkhead_sys::launch::{Create, HostRef, Op, Program, Target};
pub use exec::DEFAULT_PATH;
pub use ids::{resolve_ids, Ids};

use super::{Net, Opened, SandboxSpec};
use crate::snapshot::Snapshot;
use bulkhead_sys::bootcg::Hierarchy;
use bulkhead_sys::error::{io_failed, Error, Result};
use bulkhead_sys::hostpath::HostPath;
use std::ffi::{CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// Build the start of a sandbox: namespaces, the root, the file systems inside it, and how
/// the command is executed.
pub fn build(
    spec: &SandboxSpec,
    opened: &Opened,
    snap: Option<&Snapshot>,
    ids: Ids,
    boot: Option<&[Hierarchy]>,
) -> Result<Program> {
    // The descriptors the operations refer to: the child mounts what the parent opened.
    let mut held = Vec::new();
    let root = root::root(spec, opened, snap, &mut held)?;
    let mut ops = Vec::new();
    let mp = if spec.ephemeral {
        Create::Dir
    } else {
        Create::No
    };
    mounts::proc_and_sys(&mut ops, spec, mp, &mut held)?;
    mounts::dev(&mut ops, spec, &root.path, mp, &mut held)?;
    mounts::tmp_binds_tmpfs(&mut ops, spec, opened, mp, &mut held)?;
    if let Some(hier) = boot {
        boot::run(&mut ops, spec, &root.path, mp)?;
        boot::cgroups(&mut ops, &root.path, hier)?;
    }
    mounts::masks(&mut ops, &root.path)?;
    let x = exec::exec(spec, &ids)?;
    Ok(Program {
        clone_flags: clone_flags(spec),
        root: cstr(&root.path)?,
        root_ops: root.ops,
        ops,
        hostname: cstr(exec::hostname(spec, &opened.root_path))?,
        lo_up: spec.net == Net::Private,
        init: !spec.as_pid1,
        cwd: exec::cwd(spec, &ids)?,
        uid: ids.uid,
        gid: ids.gid,
        groups: ids.groups,
        drop_caps: exec::dropped_caps(spec.net),
        filter: spec
            .seccomp
            .then(super::seccomp::default_filter)
            .transpose()?,
        argv: x.argv,
        envp: x.envp,
        candidates: x.candidates,
        userns: spec.private_users,
        idmapped: None,
        idmap_source: root.idmap_source,
        held,
        program_name: x.program_name,
        listen_fds: spec.listen_fds,
        listen_pid_slot: x.listen_pid_slot,
        pty: None,
        join_cgroups: Vec::new(),
        stop_signal: boot.map(|_| libc::SIGRTMIN() + 3),
    })
}

/// New mount, PID, UTS, IPC and cgroup namespaces; a network namespace unless the host's
/// network is asked for; a user namespace with `--private-users`.
/// A booted container makes its cgroup namespace after joining its own cgroups instead.
fn clone_flags(spec: &SandboxSpec) -> u64 {
    let mut flags =
        (libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC) as u64;
    if !spec.boot {
        flags |= libc::CLONE_NEWCGROUP as u64;
    }
    if spec.net != Net::Host {
        flags |= libc::CLONE_NEWNET as u64;
    }
    if spec.private_users.is_some() {
        flags |= libc::CLONE_NEWUSER as u64;
    }
    flags
}

/// Open a path bulkhead names itself (`/dev/null`, `/sys`) by the host path rule, for a bind.
fn host_ref(p: &str, held: &mut Vec<OwnedFd>) -> Result<HostRef> {
    let h = HostPath::open(Path::new(p)).map_err(|e| Error::failed(format!("cannot open {e}")))?;
    let fd = h
        .dup()
        .map_err(|e| io_failed("cannot open", Path::new(p), e))?;
    Ok(HostRef::hold(fd, cstr(p)?, held))
}

/// A second handle on an opened host path, kept in `held`, for an operation.
fn hold(h: &HostPath, shown: &Path, held: &mut Vec<OwnedFd>) -> Result<HostRef> {
    let fd = h.dup().map_err(|e| io_failed("cannot open", shown, e))?;
    Ok(HostRef::hold(fd, cstr(shown)?, held))
}

pub(crate) fn cstr(p: impl AsRef<OsStr>) -> Result<CString> {
    CString::new(p.as_ref().as_bytes())
        .map_err(|_| Error::failed(format!("{:?}: a path with a NUL byte", p.as_ref())))
}

/// A path inside the (possibly untrusted) root, resolved by the child one component at a
/// time with O_NOFOLLOW.
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
