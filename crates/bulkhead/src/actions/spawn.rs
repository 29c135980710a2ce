//! `spawn`: a command in a sandbox, optionally in a slice. The start path stays lean: the
//! backend is chosen (the cgroup layout read, systemd asked over D-Bus) only when a slice is
//! to be joined, and the plan read only to explain a slice that is missing. With systemd,
//! bulkhead joins a delegated transient scope in the slice, `bulkhead-spawn-PID.scope`, as
//! systemd-nspawn does; with cgroupfs, the slice's directories.

use super::slices::require_slice;
use super::Context;
use crate::run::{RunError, EXIT_RUN_FAILED};
use crate::sandbox;
pub use crate::sandbox::{Bind, Choice, Net, Outcome, SandboxSpec, TmpfsSizes};
use bulkhead_cgroups::Placement;
use bulkhead_plan::sandbox::{parse_private_users, PrivateUsers};
use bulkhead_sys::error::{Diagnostic, Error};

pub use crate::sandbox::SpawnRequest;
/// How many ready snapshots an image's pool keeps for the next sandboxes.
pub use crate::snapshot::POOL_SIZE as SNAPSHOT_POOL_SIZE;

fn start(e: Error) -> RunError {
    RunError::with_code(EXIT_RUN_FAILED, e)
}

/// Resolve the request into a sandbox spec: the root (an image name or a directory) and the
/// user range.
pub fn resolve(req: &SpawnRequest) -> Result<SandboxSpec, RunError> {
    let mut spec = req.spec.clone();
    spec.rootfs = crate::image::resolve_image(&req.directory).map_err(start)?;
    match req.private_users.as_deref().map(parse_users).transpose() {
        Ok(None) => {}
        Ok(Some(PrivateUsers::Auto)) => spec.private_users_auto = true,
        Ok(Some(PrivateUsers::Range(r))) => spec.private_users = Some(r),
        Err(e) => return Err(start(e)),
    }
    Ok(spec)
}

/// `--dry-run`: every operation the start would make, one line each.
pub fn dry_run(spec: &SandboxSpec) -> Result<Vec<String>, RunError> {
    let mut out = Vec::new();
    if spec.ephemeral {
        out.push(format!(
            "# the root is an ephemeral snapshot of {} (--snapshot {}), made at start",
            spec.rootfs.display(),
            spec.snapshot.unwrap_or(Choice::Auto)
        ));
    }
    if let Some(s) = &spec.slice {
        out.push(format!("join slice {s}"));
    }
    out.extend(sandbox::describe(spec)?);
    Ok(out)
}

/// Start the sandbox and wait for it. `note` hears what `-v` shows; `on_ready` (called from
/// another thread) hears when a booted container (`--boot`) reports READY=1, with the time
/// since the start. The READY=1 is also passed on to bulkhead's own $NOTIFY_SOCKET, as
/// systemd-nspawn does with `--notify-ready=yes`: a `Type=notify` service, `serve`'s
/// `boot = true` targets and the bench hear that the system inside is up.
pub fn spawn(
    cx: &Context,
    spec: &SandboxSpec,
    note: &mut dyn FnMut(&str),
    on_ready: &(dyn Fn(std::time::Duration) + Sync),
) -> Result<Outcome, RunError> {
    let chosen = match &spec.slice {
        None => None,
        Some(s) => {
            let chosen = cx.choose().map_err(start)?;
            require_slice(cx, &chosen, s).map_err(start)?;
            note(&format!("slice {s}: {} backend", chosen.name()));
            if let Some(w) = crate::tasks::set_on_self(s) {
                note(&w);
            }
            Some(chosen)
        }
    };
    let manager = bulkhead_sys::notify::Notifier::from_env();
    let ready = |t: std::time::Duration| {
        if let Some(m) = &manager {
            m.send("READY=1");
        }
        on_ready(t);
    };
    sandbox::spawn(
        chosen.as_ref().map(|c| c as &dyn Placement),
        spec,
        note,
        &ready,
    )
}

/// `--private-users=auto|BASE[:SIZE]` (`auto` is leased at start: [`crate::sandbox::userns`]).
fn parse_users(s: &str) -> Result<PrivateUsers, Error> {
    parse_private_users(s).map_err(|(msg, hint)| {
        Error::invalid(Diagnostic::error(format!("--private-users={msg}")).hint(hint))
    })
}
