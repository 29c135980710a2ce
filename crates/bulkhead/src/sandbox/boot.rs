//! `spawn --boot`: the root's own init as PID 1, in a container as systemd's container
//! interface describes one (systemd.io/CONTAINER_INTERFACE, and systemd-nspawn as the
//! reference): `container=bulkhead` and `container_uuid=` in its environment, the user's
//! arguments (`systemd.unit=...`) on its command line, a private /run, /run/lock and /tmp,
//! /sys/fs/cgroup with its own cgroups writable ([`super::setup`]'s boot step), the caller's
//! output as /dev/console, and stopped the way systemd-nspawn stops one: SIGRTMIN+3, then a
//! deadline, then SIGKILL.
//!
//! A machine ID: the root's /etc/machine-id when it has one; else systemd takes
//! `container_uuid` (as under systemd-nspawn), and writes it to a writable root.

use super::{invalid, Opened, SandboxSpec};
use crate::run::RunError;
use bulkhead_sys::bootcg::supervisor::{Skipped, Supervisor, SUPERVISOR};
use bulkhead_sys::bootcg::{self, Hierarchy, Kind, Limits, OwnedCgroups, PAYLOAD};
use bulkhead_sys::error::Error;
use bulkhead_sys::launch::{HostRef, Program};
use std::ffi::{CString, OsString};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

/// Where the init is looked for in the root, in order.
pub const INITS: &[&str] = &[
    "/sbin/init",
    "/lib/systemd/systemd",
    "/usr/lib/systemd/systemd",
];

/// How long a booted container has to stop after SIGRTMIN+3 before it is killed, unless
/// `--stop-timeout` says otherwise: systemd's default stop timeout (DefaultTimeoutStopSec),
/// which is what a systemd-nspawn@.service gets.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(90);

/// The name of the container's cgroup below bulkhead's own, in each writable hierarchy.
pub fn cgroup_name(pid: u32) -> String {
    format!("{CGROUP_PREFIX}{pid}")
}

const CGROUP_PREFIX: &str = "bulkhead-boot-";

/// What a booted container may make below its own cgroup on cgroup2: 16 levels and 4096
/// cgroups. systemd makes one cgroup per unit, at most 5 levels deep for a user's service
/// (`user.slice/user-1000.slice/user@1000.service/app.slice/x.service`), a few hundred on a
/// busy system; 16 leaves room for a container inside (which starts over below its own
/// cgroup) and 4096 for ten times as many units. Without them the container could nest
/// thousands of cgroups, each costing the host's kernel memory. They are written on
/// `bulkhead-boot-PID`, above the container's own cgroup (`payload`, the root of its cgroup
/// namespace): a container without `--private-users` is root with CAP_DAC_OVERRIDE and could
/// write its own cgroup's files where the host's cgroup2 is not mounted `nsdelegate`. v1
/// hierarchies (name=systemd on a hybrid host) have no such files: nothing bounds them there.
/// Even within the limits a tree can pass PATH_MAX (16 names of 255 bytes): it is removed
/// through directory descriptors ([`bootcg::tree`]).
pub const LIMITS: Limits = Limits {
    depth: 16,
    descendants: 4096,
};

fn refuse(what: &str, hint: &str) -> RunError {
    invalid(format!("--boot and {what} do not go together"), hint)
}

/// With `--boot`: the spec of the boot ([`booted`]) and the host's hierarchies; without,
/// nothing.
pub fn prepare(
    spec: &SandboxSpec,
    opened: &Opened,
) -> Result<(Option<SandboxSpec>, Option<Vec<Hierarchy>>), RunError> {
    if !spec.boot {
        return Ok((None, None));
    }
    Ok((Some(booted(spec, opened)?), Some(hierarchies()?)))
}

/// The spec of the boot: PID 1 is the root's init with the user's arguments, `as_pid1`, the
/// container's environment and the stop timeout.
pub fn booted(spec: &SandboxSpec, opened: &Opened) -> Result<SandboxSpec, RunError> {
    if spec.uid.is_some() || spec.gid.is_some() || spec.cwd.is_some() {
        return Err(refuse(
            "--uid, --gid or --cwd",
            "the init runs as root in /; it starts the services as their own users",
        ));
    }
    if !spec.ephemeral && !spec.writable && !opened.root.has_dir("run") {
        return Err(invalid(
            format!(
                "{}: missing (or not a directory); a booted container mounts /run there",
                opened.root_path.join("run").display()
            ),
            "create it, or use --ephemeral (-x), which works on a copy",
        ));
    }
    let init = find_init(opened)?;
    let mut b = spec.clone();
    b.as_pid1 = true;
    b.argv = std::iter::once(OsString::from(init))
        .chain(spec.argv.iter().cloned())
        .collect();
    b.env.retain(|(k, _)| k != "NOTIFY_SOCKET");
    b.env
        .push(("NOTIFY_SOCKET".into(), super::ready::INSIDE.into()));
    if !b.env.iter().any(|(k, _)| k == "container_uuid") {
        b.env.push(("container_uuid".into(), uuid()?));
    }
    b.stop_timeout = spec.stop_timeout.or(Some(STOP_TIMEOUT));
    Ok(b)
}

/// The first of [`INITS`] that is an executable file in the root (looked up inside it).
fn find_init(opened: &Opened) -> Result<&'static str, RunError> {
    for p in INITS {
        let Ok(fd) = bulkhead_sys::inroot::open_in_root(opened.root.fd(), Path::new(p)) else {
            continue;
        };
        let exec = rustix::fs::fstat(fd.as_fd())
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_mode & 0o111 != 0);
        if exec {
            return Ok(p);
        }
    }
    Err(invalid(
        format!(
            "{}: no init to boot (looked for {})",
            opened.root_path.display(),
            INITS.join(", ")
        ),
        "install systemd in the root (debootstrap includes it; apt-get install systemd-sysv), or run a command without --boot",
    ))
}

/// A random UUID from the kernel, for `container_uuid`.
fn uuid() -> Result<String, RunError> {
    bulkhead_sys::statefile::read_string(Path::new("/proc/sys/kernel/random/uuid"), 64)
        .map(|s| s.trim().to_string())
        .map_err(|e| {
            super::failed(Error::failed(format!(
                "cannot read /proc/sys/kernel/random/uuid: {e}"
            )))
        })
}

/// The host's cgroup hierarchies, with at least one an init can write to.
pub fn hierarchies() -> Result<Vec<Hierarchy>, RunError> {
    let hier = bootcg::hierarchies().map_err(|e| {
        super::failed(Error::failed(format!(
            "cannot read this process's cgroups (/proc/self/cgroup, /proc/self/mountinfo): {e}"
        )))
    })?;
    if !hier.iter().any(Hierarchy::writable) {
        return Err(invalid(
            "this host mounts neither the cgroup2 hierarchy nor systemd's name=systemd one: a booted systemd would have no cgroup to track its services in",
            "mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup/unified), or run a command without --boot",
        ));
    }
    Ok(hier)
}

/// The container's cgroups and, with `--slice` on cgroup2, bulkhead in its supervisor
/// cgroup; once the container has exited, the cgroups are removed (what stays is said on
/// stderr, with its path), then the supervisor undone.
#[derive(Debug)]
pub struct BootCgroups {
    owned: OwnedCgroups,
    _supervisor: Option<Supervisor>,
}

impl Drop for BootCgroups {
    fn drop(&mut self) {
        // Before the supervisor drops (the fields drop after this body).
        for l in self.owned.remove() {
            warn(&format!("could not remove the container's cgroup {l}"));
        }
    }
}

/// Said whatever `-v` says: a cgroup left behind is the host's to know about.
fn warn(msg: &str) {
    eprintln!("bulkhead: warning: {msg}");
}

/// Make the container's own cgroups (below bulkhead's own, that is below the slice's once
/// joined: `bulkhead-boot-PID/payload`, with [`LIMITS`] on `bulkhead-boot-PID` in cgroup2)
/// and let PID 1 join them; they are removed when the returned value is dropped.
/// With a user namespace they belong to its root. With `--slice`, on cgroup2, the
/// controllers of bulkhead's own cgroup reach the container's first ([`supervise`]).
pub fn own_cgroups(
    program: &mut Program,
    spec: &SandboxSpec,
    delegated: bool,
    note: &mut dyn FnMut(&str),
) -> Result<BootCgroups, RunError> {
    let hier = hierarchies()?;
    let (removed, left) = bootcg::remove_stale(&hier, CGROUP_PREFIX);
    for dir in removed {
        note(&format!(
            "removed the cgroup of a booted container whose bulkhead was killed: {}",
            dir.display()
        ));
    }
    for l in left {
        warn(&format!(
            "could not remove the cgroup of a booted container whose bulkhead was killed: {l}"
        ));
    }
    let supervisor = match (spec.slice.is_some(), delegated) {
        (true, true) => supervise(&hier, note)?,
        (true, false) => {
            note(UNDELEGATED);
            None
        }
        (false, _) => None,
    };
    let (owned, fds) = OwnedCgroups::create(
        &hier,
        &cgroup_name(std::process::id()),
        spec.private_users.map(|r| (r.base, r.base)),
        LIMITS,
    )
    .map_err(|e| {
        super::failed(Error::failed(format!(
            "cannot make the container's cgroup: {e}"
        )))
    })?;
    if !owned.refused().is_empty() {
        note(&format!(
            "controllers the kernel refused to pass down to {PAYLOAD} (left off): {}",
            owned.refused().join(", ")
        ));
    }
    for (fd, dir) in fds.into_iter().zip(owned.dirs()) {
        let shown =
            super::setup::cstr(dir.join(PAYLOAD).join("cgroup.procs")).map_err(super::failed)?;
        program
            .join_cgroups
            .push(HostRef::hold(fd, shown, &mut program.held));
    }
    Ok(BootCgroups {
        owned,
        _supervisor: supervisor,
    })
}

/// Why a cgroupfs slice is left as it is: its own directory holds its processes.
const UNDELEGATED: &str = "the cgroupfs backend places processes in the slice's own cgroup, so the slice cannot hand cgroup2 controllers down (moving bulkhead aside would make every later join of the slice fail): the container gets none; the systemd backend's delegated scope gets them";

/// With `--slice` on the systemd backend only (the cgroup is then the delegated scope
/// systemd made for this spawn alone; without `--slice` it is the caller's, and a cgroupfs
/// slice's own directory holds the slice's processes: neither is bulkhead's to rearrange):
/// in the cgroup2 hierarchy, bulkhead moves into `OWN/supervisor` and enables
/// OWN's controllers for its children, as systemd-nspawn does in a delegated unit, so that
/// the container's cgroup (beside `supervisor`) has them to delegate to its units.
fn supervise(
    hier: &[Hierarchy],
    note: &mut dyn FnMut(&str),
) -> Result<Option<Supervisor>, RunError> {
    let Some(own) = hier
        .iter()
        .find(|h| h.kind == Kind::Unified)
        .map(|h| &h.own)
    else {
        return Ok(None);
    };
    let mut refused = Vec::new();
    let entered = Supervisor::enter(own, &mut |c, e| refused.push(format!("{c} ({e})")))
        .map_err(|e| {
            super::failed(Error::failed(format!(
                "cannot give the container cgroup2 controllers (bulkhead moves into {SUPERVISOR} of its slice's cgroup): {e}"
            )))
        })?;
    let s = match entered {
        Ok(s) => s,
        Err(why) => {
            let why = match why {
                Skipped::NotDomain(t) => format!("it is a '{t}' cgroup, not a domain one"),
                Skipped::Shared(p) => format!("other processes live in it ({p:?})"),
            };
            note(&format!(
                "{}: left as it is, {why}: the container gets no cgroup2 controllers",
                own.display()
            ));
            return Ok(None);
        }
    };
    note(&format!(
        "bulkhead moved into {}; enabled for the container in {}: {}",
        s.dir().display(),
        own.join("cgroup.subtree_control").display(),
        match s.enabled() {
            [] => "none".to_string(),
            e => e.join(" "),
        }
    ));
    if !refused.is_empty() {
        note(&format!(
            "controllers the kernel refused (left off): {}",
            refused.join(", ")
        ));
    }
    Ok(Some(s))
}

/// For `--dry-run`: the cgroups [`own_cgroups`] would make, and PID 1's join of them.
pub fn describe_cgroups(
    spec: &SandboxSpec,
    hier: &[Hierarchy],
    program: &mut Program,
) -> Vec<String> {
    let name = cgroup_name(std::process::id());
    let mut out = Vec::new();
    for h in hier.iter().filter(|h| h.writable()) {
        let dir = h.own.join(&name);
        out.push(format!(
            "mkdir {} (removed through directory descriptors, with everything below it, after the container exits)",
            dir.display()
        ));
        if h.kind != Kind::Unified {
            out.push(format!(
                "# {}: a v1 hierarchy has no cgroup.max.depth or cgroup.max.descendants: nothing bounds what the container makes here",
                h.name()
            ));
        } else {
            out.push(format!(
                "write {} to {}/cgroup.max.depth and {} to {}/cgroup.max.descendants (the container: {} levels, {} cgroups below its own); each controller of its cgroup.controllers into its cgroup.subtree_control",
                LIMITS.depth + 1,
                dir.display(),
                LIMITS.descendants + 1,
                dir.display(),
                LIMITS.depth,
                LIMITS.descendants,
            ));
        }
        out.push(format!(
            "mkdir {}/{PAYLOAD} (the container's cgroup, the root of its cgroup namespace{})",
            dir.display(),
            if spec.private_users.is_some() || spec.private_users_auto {
                "; given to the user namespace's root"
            } else {
                ""
            }
        ));
        program.join_cgroups.push(HostRef {
            fd: -1,
            shown: CString::new(
                dir.join(PAYLOAD)
                    .join("cgroup.procs")
                    .as_os_str()
                    .as_encoded_bytes(),
            )
            .unwrap_or_default(),
        });
    }
    if spec.slice.is_some() {
        out.push(format!(
            "# with --slice: {name} is made below the slice's cgroup in each hierarchy, once joined (PID: bulkhead's)"
        ));
        if hier.iter().any(|h| h.kind == Kind::Unified) {
            out.extend(describe_supervisor(&name));
        }
    } else {
        out.push(format!("# {name}: PID is bulkhead's process ID at start"));
    }
    out
}

/// For `--dry-run` with `--slice` on cgroup2: what [`supervise`] does.
fn describe_supervisor(name: &str) -> Vec<String> {
    vec![
        format!("# cgroup2, systemd backend only, OWN: the delegated bulkhead-spawn-PID.scope (cgroupfs backend: nothing here; {UNDELEGATED})"),
        format!("mkdir OWN/{SUPERVISOR}; bulkhead's PID into OWN/{SUPERVISOR}/cgroup.procs (skipped, with -v saying why, when other processes live in OWN or it is not a domain cgroup)"),
        format!("+CONTROLLER into OWN/cgroup.subtree_control for each of OWN/cgroup.controllers not on yet (ones the kernel refuses stay off, shown with -v): OWN/{name} has them"),
        format!("# at exit, after {name} is removed: those controllers off again, bulkhead's PID back into OWN/cgroup.procs, rmdir OWN/{SUPERVISOR}"),
    ]
}
