//! Ephemeral sandboxes: a command in new mount, PID, UTS, IPC, cgroup and (optionally)
//! network namespaces, pivoted into a root file system, placed in a slice.
//!
//! The flow is one way, like the rest of bulkhead: [`SandboxSpec`] (what the user asked for)
//! is checked and turned, in the parent, into a [`setup::Program`]: plain data (paths, mount
//! operations, the exec arguments, a compiled seccomp filter) built before the clone. The
//! child only executes that program, so nothing between clone and exec allocates on the
//! success path, and `spawn --dry-run` can print the very operations a start performs.
//!
//! Lifetime: the sandbox dies with bulkhead (PR_SET_PDEATHSIG on its PID 1, and a PID
//! namespace dies with its PID 1); an overlay and its tmpfs live only in the sandbox's own
//! mount namespace, so they vanish with it; on-disk snapshots are registered before they are
//! made and removed on every exit path, or by the next bulkhead start after a kill -9.
//!
//! The host path rule holds here (docs/SECURITY.md): ROOTFS and every `--bind` source are
//! opened once by [`bulkhead_sys::hostpath`], decided on by `fstat`, and mounted from those
//! descriptors; no path-taking call (clippy's `disallowed_methods`, listed in this crate's
//! clippy.toml) is made in this module.

#![deny(clippy::disallowed_methods)]

mod boot;
mod console;
mod ready;
mod request;
pub mod seccomp;
pub mod setup;
mod terminal;
pub mod userns;

use crate::run::{RunError, EXIT_RUN_FAILED};
use crate::snapshot::{self, Snapshot};
use bulkhead_cgroups::{Joiner, Placement};
pub use bulkhead_plan::sandbox::{Bind, Choice, Net, TmpfsSizes, UserRange};
use bulkhead_plan::SliceName;
use bulkhead_sys::error::{errno_text, Diagnostic, Error};
use bulkhead_sys::hostpath::{DirError, HostPath};
use setup::Program;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

pub use request::SpawnRequest;

/// What the user asked for (`bulkhead spawn`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxSpec {
    pub rootfs: PathBuf,
    /// A writable throw-away copy of the root, discarded on exit.
    pub ephemeral: bool,
    pub snapshot: Option<Choice>,
    /// Without --ephemeral: mount the root writable (it is read-only otherwise).
    pub writable: bool,
    pub slice: Option<SliceName>,
    pub net: Net,
    pub hostname: Option<String>,
    pub binds: Vec<Bind>,
    pub tmpfs: Vec<PathBuf>,
    /// The size of /tmp and each --tmpfs, /dev/shm, and the overlay's upper layer.
    pub sizes: TmpfsSizes,
    pub private_users: Option<UserRange>,
    /// `--private-users auto`: a free range is leased at start (`userns::allocate`) and
    /// put in `private_users`.
    pub private_users_auto: bool,
    /// A user name (looked up in the root's /etc/passwd) or a number.
    pub uid: Option<String>,
    pub gid: Option<String>,
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    /// Exec the command as PID 1 instead of under bulkhead's tiny init.
    pub as_pid1: bool,
    /// Install the default seccomp filter (on unless --seccomp=no).
    pub seccomp: bool,
    /// `--pty`: the command's stdin, stdout and stderr are a new pseudo-terminal, its
    /// controlling terminal, relayed to bulkhead's own.
    pub pty: bool,
    /// Keep fds 3..3+N open for the command and tell it by the systemd protocol
    /// (LISTEN_FDS, and LISTEN_PID set to its PID inside the sandbox).
    pub listen_fds: u32,
    /// After bulkhead is asked to stop (SIGTERM, SIGINT), kill the whole sandbox this long
    /// after forwarding the signal if it has not exited by then.
    pub stop_timeout: Option<Duration>,
    /// `--boot`: run the root's init as PID 1 in a container as systemd expects one
    /// (the sandbox's `boot` module); `argv` then holds only the init's arguments.
    pub boot: bool,
    pub argv: Vec<OsString>,
}

/// What happened: the exit code to give, and how the root was made.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The command's exit code, 128+N for a signal, [`bulkhead_sys::exit::TIMEOUT`] on timeout.
    pub code: i32,
    pub timed_out: bool,
    /// How the ephemeral root was made, and why.
    pub method: Option<(snapshot::Method, String)>,
    /// From the start of spawn to the exit of the sandbox.
    pub elapsed: Duration,
    /// Time spent making the snapshot.
    pub snapshot_time: Duration,
    /// With `--as-pid1` and no `--pty`: how many bytes the command wrote to /dev/console.
    pub console_bytes: Option<u64>,
    /// With `--boot`: from the start of spawn to the container's READY=1, if it sent one.
    pub ready_after: Option<Duration>,
}

fn invalid(msg: impl Into<String>, hint: &str) -> RunError {
    RunError::with_code(
        EXIT_RUN_FAILED,
        Error::invalid(Diagnostic::error(msg).hint(hint)),
    )
}

fn launch_failed(f: bulkhead_sys::launch::Failure) -> RunError {
    RunError::with_code(f.code, f.error)
}

fn failed(e: Error) -> RunError {
    RunError::with_code(EXIT_RUN_FAILED, e)
}

/// ROOTFS and the `--bind` sources as validated: each host path opened once by the host path
/// rule ([`bulkhead_sys::hostpath`]) and decided on by `fstat` of that descriptor. Everything
/// after uses the descriptors, never the names again.
#[derive(Debug)]
pub struct Opened {
    pub root: HostPath,
    /// What the kernel calls ROOTFS (for messages, the host name and the snapshot's name).
    pub root_path: PathBuf,
    /// One per `spec.binds`, in order.
    pub binds: Vec<HostPath>,
}

/// A host path that could not be opened by the rule: what, where and what to do.
fn host_path_error(what: &str, shown: &Path, e: DirError, hint: &str) -> RunError {
    match e {
        DirError::Io(p, e) if p == shown => invalid(
            format!("{what} {}: {}", shown.display(), errno_text(&e)),
            hint,
        ),
        DirError::Io(p, e) => invalid(
            format!("{what} {}: {}: {}", shown.display(), p.display(), errno_text(&e)),
            hint,
        ),
        DirError::Untrusted { path, why } => invalid(
            format!("{what} {}: {} {why}", shown.display(), path.display()),
            "bulkhead follows only root's symlinks in a host path (another user could point one at a device or at root's files while it is used): give the path the link points to",
        ),
    }
}

/// Check the user's input against the host before anything is created, opening ROOTFS and
/// the bind sources once.
fn validate(spec: &SandboxSpec) -> Result<Opened, RunError> {
    if spec.argv.is_empty() && !spec.boot {
        return Err(invalid(
            "no command given",
            "write the command after --, e.g. bulkhead spawn -D /var/lib/machines/debian -- /bin/sh",
        ));
    }
    let root = open_root(&spec.rootfs)?;
    let root_path = root.real_path();
    if spec.ephemeral && spec.writable {
        return Err(invalid(
            "--ephemeral and --writable do not go together",
            "--ephemeral already gives a writable throw-away copy",
        ));
    }
    if spec.snapshot.is_some() && !spec.ephemeral {
        return Err(invalid(
            "--snapshot needs --ephemeral",
            "add --ephemeral, or leave --snapshot out",
        ));
    }
    let binds = open_binds(spec)?;
    for t in &spec.tmpfs {
        check_inside(t, "--tmpfs")?;
    }
    if let Some(cwd) = &spec.cwd {
        check_inside(cwd, "--cwd")?;
    }
    if let Some(h) = &spec.hostname {
        check_hostname(h)?;
    }
    if !spec.ephemeral {
        check_mount_points(&root, &root_path)?;
    }
    Ok(Opened {
        root,
        root_path,
        binds,
    })
}

/// ROOTFS, opened once: a directory, and not the host's own root.
fn open_root(rootfs: &Path) -> Result<HostPath, RunError> {
    let root = HostPath::open(rootfs).map_err(|e| {
        host_path_error(
            "-D",
            rootfs,
            e,
            "give the directory that holds the root file system (or an image name: bulkhead image list)",
        )
    })?;
    if !root.is_dir() {
        return Err(invalid(
            format!("-D {}: not a directory", rootfs.display()),
            "give the directory that holds the root file system; unpack a tarball with bulkhead image import",
        ));
    }
    // Decided on the descriptor: no name resolved later can turn it into the host's root.
    if root.is_host_root() {
        return Err(invalid(
            format!(
                "-D {}: the host's own root cannot be a sandbox root",
                rootfs.display()
            ),
            "give a separate root file system, e.g. one made by debootstrap",
        ));
    }
    Ok(root)
}

/// The `--bind` sources, opened once; the targets checked to stay inside.
fn open_binds(spec: &SandboxSpec) -> Result<Vec<HostPath>, RunError> {
    let mut binds = Vec::with_capacity(spec.binds.len());
    for b in &spec.binds {
        if !b.src.is_absolute() {
            return Err(invalid(
                format!(
                    "--bind {}: the source must be an absolute path",
                    b.src.display()
                ),
                "write the full path of the host directory or file",
            ));
        }
        binds.push(HostPath::open(&b.src).map_err(|e| {
            host_path_error(
                "--bind",
                &b.src,
                e,
                "the source of a bind mount must exist on the host",
            )
        })?);
        check_inside(&b.dst, "--bind")?;
    }
    Ok(binds)
}

fn check_hostname(h: &str) -> Result<(), RunError> {
    if h.is_empty()
        || h.len() > 64
        || !h
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    {
        return Err(invalid(
            format!("--hostname '{h}' is not a valid host name"),
            "use letters, digits, '-' and '.', at most 64 characters",
        ));
    }
    Ok(())
}

/// A root used as it is (read-only, or the user's own writable one): its mount points must
/// exist, bulkhead never creates directories in the user's tree.
fn check_mount_points(root: &HostPath, root_path: &Path) -> Result<(), RunError> {
    for d in ["proc", "dev", "sys", "tmp"] {
        if !root.has_dir(d) {
            let p = root_path.join(d);
            return Err(invalid(
                format!(
                    "{}: missing (or not a directory); the sandbox mounts /{d} there",
                    p.display()
                ),
                &format!(
                    "create it (mkdir {}), or use --ephemeral, which works on a copy",
                    p.display()
                ),
            ));
        }
    }
    Ok(())
}

/// A path inside the sandbox must be absolute and may not climb out with `..`.
fn check_inside(p: &Path, what: &str) -> Result<(), RunError> {
    if !p.is_absolute() {
        return Err(invalid(
            format!(
                "{what} {}: a path inside the sandbox must be absolute",
                p.display()
            ),
            "write it from the sandbox's root, e.g. /var/lib/data",
        ));
    }
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(invalid(
            format!(
                "{what} {}: '..' could leave the sandbox's root",
                p.display()
            ),
            "write the path without '..'",
        ));
    }
    Ok(())
}

/// Start the sandbox, wait for it, clean up. `note` gets progress lines for `-v`;
/// `on_ready` is called (from another thread) when a booted container reports READY=1.
/// `backend` is needed only with a slice (`spec.slice`); without one no cgroup is touched.
pub fn spawn(
    backend: Option<&dyn Placement>,
    spec: &SandboxSpec,
    note: &mut dyn FnMut(&str),
    on_ready: &(dyn Fn(Duration) + Sync),
) -> Result<Outcome, RunError> {
    let start = Instant::now();
    for line in snapshot::clean_stale(|| crate::image::images_dir().ok()) {
        note(&format!("removed stale sandbox state: {line}"));
    }
    let opened = validate(spec)?;
    let (booted, hier) = boot::prepare(spec, &opened)?;
    let spec = booted.as_ref().unwrap_or(spec);
    let ids = setup::resolve_ids(opened.root.fd(), spec)?;
    let t0 = Instant::now();
    let mut snap: Option<Snapshot> = if spec.ephemeral {
        let choice = spec.snapshot.unwrap_or(Choice::Auto);
        Some(snapshot::create_from(&opened.root, choice).map_err(failed)?)
    } else {
        None
    };
    let snapshot_time = t0.elapsed();
    if let Some(s) = &snap {
        note(&format!(
            "snapshot: {} ({}), {:.2} ms",
            s.method,
            s.why,
            snapshot_time.as_secs_f64() * 1e3
        ));
    }
    let mut leased;
    let (spec, _lease) = if spec.private_users_auto {
        let lease = userns::allocate().map_err(failed)?;
        leased = spec.clone();
        leased.private_users = Some(lease.range);
        note(&format!(
            "user namespace: IDs 0-{} are {}-{} on the host (leased)",
            lease.range.size - 1,
            lease.range.base,
            lease.range.base + (lease.range.size - 1)
        ));
        (&leased, Some(lease))
    } else {
        (spec, None)
    };
    // Where the root is mounted in the sandbox's own mount namespace.
    snapshot::ensure_mount_point().map_err(failed)?;
    let mut program =
        setup::build(spec, &opened, snap.as_ref(), ids, hier.as_deref()).map_err(failed)?;
    let notify = match spec.boot {
        true => Some(ready::attach(&mut program, spec.private_users).map_err(failed)?),
        false => None,
    };
    // Made before the clone, kept open until the sandbox has exited.
    let _idmapped = match (&program.idmap_source, spec.private_users) {
        (Some(src), Some(range)) => {
            let fd = bulkhead_sys::launch::idmapped_tree(src, range).map_err(launch_failed)?;
            program.idmapped = Some(std::os::fd::AsRawFd::as_raw_fd(&fd));
            Some(fd)
        }
        _ => None,
    };
    join_slice(backend, spec, &opened)?;
    // Removed (with what the init made below them) when the container has exited.
    let _cgroups = match spec.boot {
        true => {
            let delegated = backend.is_some_and(|b| b.join_delegates());
            Some(boot::own_cgroups(&mut program, spec, delegated, note)?)
        }
        false => None,
    };
    let relay = if spec.pty {
        let r = terminal::Relay::start().map_err(failed)?;
        program.pty = Some(r.terminal());
        Some(r)
    } else {
        None
    };
    let console = start_console(spec, &mut program, relay.as_ref())?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (result, ready_after) = std::thread::scope(|s| {
        let watcher = notify
            .as_ref()
            .map(|n| s.spawn(|| ready::watch(n, start, &stop, on_ready)));
        let r = bulkhead_sys::launch::run(&program, spec.timeout, spec.stop_timeout)
            .map_err(launch_failed);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(n) = &notify {
            n.wake();
        }
        (r, watcher.and_then(|w| w.join().ok().flatten()))
    });
    let console_bytes = console.map(console::Console::finish);
    if let Some(r) = relay {
        r.finish();
    }
    let method = snap.as_ref().map(|s| (s.method, s.why.clone()));
    if let Some(s) = snap.as_mut() {
        // From a read-only image's pool: removed, and the pool topped up, in the background.
        if let Err(e) = s.retire() {
            note(&format!("could not remove the snapshot: {e}"));
        }
    }
    let (code, timed_out) = result?;
    Ok(Outcome {
        code,
        timed_out,
        method,
        elapsed: start.elapsed(),
        snapshot_time,
        console_bytes,
        ready_after,
    })
}

/// With `--as-pid1`, /dev/console ([`console`]): the `--pty` terminal, else a console of its
/// own, returned to be finished after the sandbox has exited.
fn start_console(
    spec: &SandboxSpec,
    program: &mut Program,
    relay: Option<&terminal::Relay>,
) -> Result<Option<console::Console>, RunError> {
    if !spec.as_pid1 {
        return Ok(None);
    }
    let (fd, own) = match relay {
        Some(r) => (r.terminal(), None),
        None => {
            let c = console::Console::start().map_err(failed)?;
            (c.terminal(), Some(c))
        }
    };
    if let Some(range) = spec.private_users {
        // Root of the user namespace reopens it as /dev/console.
        bulkhead_sys::pty::give_terminal(fd, range.base, range.base).map_err(|e| {
            failed(Error::failed(format!(
                "cannot give the console's pseudo-terminal to the sandbox's root (UID {}): {e}",
                range.base
            )))
        })?;
    }
    let ops = console::ops(program.root.as_bytes(), fd).map_err(failed)?;
    program.ops.extend(ops);
    Ok(own)
}

/// Join the sandbox's slice, if it has one. With systemd: the scope
/// bulkhead-spawn-PID.scope, delegated (the sandbox is the root of its own cgroup
/// namespace), as systemd-nspawn's scopes are.
fn join_slice(
    backend: Option<&dyn Placement>,
    spec: &SandboxSpec,
    opened: &Opened,
) -> Result<(), RunError> {
    let Some(slice) = &spec.slice else {
        return Ok(());
    };
    let Some(backend) = backend else {
        return Err(failed(Error::failed(format!(
            "no cgroup backend to join the slice {slice} with"
        ))));
    };
    let what = format!(
        "{} ({})",
        opened.root_path.display(),
        spec.argv
            .first()
            .map(|a| a.to_string_lossy())
            .unwrap_or_default()
    );
    backend
        .join(slice, &Joiner::spawn(&what))
        .map_err(RunError::place)?;
    Ok(())
}

/// What `spawn --dry-run` prints: every operation the sandbox's start performs.
pub fn describe(spec: &SandboxSpec) -> Result<Vec<String>, RunError> {
    let opened = validate(spec)?;
    let (booted, hier) = boot::prepare(spec, &opened)?;
    let spec = booted.as_ref().unwrap_or(spec);
    let ids = setup::resolve_ids(opened.root.fd(), spec)?;
    let mut out = Vec::new();
    let mut shown = spec.clone();
    if spec.private_users_auto {
        out.push(format!(
            "# --private-users auto: a free range of {} IDs is leased at start in {} (shown: the first)",
            userns::RANGE,
            userns::leases_dir().display()
        ));
        shown.private_users = Some(UserRange {
            base: 0x80000,
            size: userns::RANGE,
        });
    }
    let mut program = setup::build(&shown, &opened, None, ids, hier.as_deref()).map_err(failed)?;
    if let Some(hier) = &hier {
        out.extend(boot::describe_cgroups(spec, hier, &mut program));
        ready::ops(&mut program, None, &ready::host_path()).map_err(failed)?;
        out.push(format!(
            "# readiness: a datagram socket bound at {}, at {} inside (NOTIFY_SOCKET); READY=1 from the container is reported",
            ready::host_path().display(),
            ready::INSIDE
        ));
        out.push(format!(
            "# stop: SIGTERM or SIGINT to bulkhead becomes SIGRTMIN+3 to PID 1; the container is killed {} s later if it has not exited (--stop-timeout)",
            spec.stop_timeout.unwrap_or(boot::STOP_TIMEOUT).as_secs()
        ));
    }
    // The pseudo-terminal is opened at start; the description only needs to know there is one.
    program.pty = spec.pty.then_some(-1);
    if spec.as_pid1 {
        let ops = console::ops(program.root.as_bytes(), -1).map_err(failed)?;
        program.ops.extend(ops);
    }
    out.extend(program.describe());
    Ok(out)
}
