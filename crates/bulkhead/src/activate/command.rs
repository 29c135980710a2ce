//! A target's command line as a typed value.
//!
//! serve starts a target as `bulkhead spawn ...` (a sandbox) or `bulkhead run ...` (a plain
//! command). The value is what the CLI's own parser makes of that command line: a
//! [`SpawnRequest`] (what `spawn`'s arguments become), or a [`RunSpec`] with `run`'s
//! `--scope`. The library never spells a flag: the CLI, which owns the grammar, renders the
//! value to argv ([`RenderTarget`], given to serve) beside its parser, and its tests parse
//! each rendering back to the same value.

use crate::run::RunSpec;
use crate::sandbox::SpawnRequest;
use bulkhead_cgroups::Choice;
use std::ffi::OsString;
use std::path::PathBuf;

/// The options every command takes, as serve passes its own on to its targets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GlobalArgs {
    /// `--config`: absolute, since the target may run with another working directory.
    pub config: Option<PathBuf>,
    /// `--cgroup-root`, when it is not the default (`/`).
    pub cgroup_root: Option<String>,
    /// `--backend` (always given, so the target chooses as serve did).
    pub backend: Choice,
}

/// `bulkhead run` as serve starts a plain target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunTarget {
    /// uid, gid, cwd, env, listen_fds, argv and the slice.
    pub spec: RunSpec,
    /// systemd: a scope instead of a service (a service cannot be given fds).
    pub scope: bool,
}

/// How a target starts.
#[derive(Debug, Clone, PartialEq)]
pub enum How {
    Spawn(SpawnRequest),
    Run(RunTarget),
}

/// A target's command line, as a value ([`RenderTarget`] spells it).
#[derive(Debug, Clone, PartialEq)]
pub struct TargetCommand {
    pub exe: PathBuf,
    pub globals: GlobalArgs,
    pub how: How,
    /// The $NOTIFY_SOCKET of the target process itself (not of the command inside): a
    /// booted sandbox (`spawn --boot`) passes its container's READY=1 on to it.
    pub notify_socket: Option<PathBuf>,
}

/// The CLI's rendering of a target to its command line (`EXE SUBCOMMAND OPTIONS GLOBALS
/// [--env K=V].. -- COMMAND`, the subcommand first so that `spawn` takes the CLI's
/// spawn-only parser, the cold-start fast path).
pub type RenderTarget = fn(&TargetCommand) -> Vec<OsString>;
