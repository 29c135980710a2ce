//! A target's command line as a typed value, and its one rendering to argv.
//!
//! serve starts a target as `bulkhead spawn ...` (a sandbox) or `bulkhead run ...` (a plain
//! command). The value is what the CLI's own parser makes of that command line: a
//! [`SpawnRequest`] (what `spawn`'s arguments become), or a [`RunSpec`] with `run`'s slice
//! and `--scope`. The subcommand comes first, so `bulkhead spawn` takes the CLI's
//! spawn-only parser (the cold-start fast path); the global options follow it. The CLI's
//! tests parse [`TargetCommand::argv`] back and compare it with the value.

use crate::run::RunSpec;
use crate::sandbox::{SpawnRequest, TmpfsSizes};
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
    /// uid, gid, cwd, env, listen_fds and argv (the slice is `slice`, as given).
    pub spec: RunSpec,
    pub slice: Option<String>,
    /// systemd: a scope instead of a service (a service cannot be given fds).
    pub scope: bool,
}

/// How a target starts.
#[derive(Debug, Clone, PartialEq)]
pub enum How {
    Spawn(SpawnRequest),
    Run(RunTarget),
}

/// A target's command line: `EXE SUBCOMMAND OPTIONS GLOBALS [--env K=V].. -- COMMAND`.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetCommand {
    pub exe: PathBuf,
    pub globals: GlobalArgs,
    pub how: How,
    /// The $NOTIFY_SOCKET of the target process itself (not of the command inside): a
    /// booted sandbox (`spawn --boot`) passes its container's READY=1 on to it.
    pub notify_socket: Option<PathBuf>,
}

impl TargetCommand {
    /// The command line, subcommand first.
    pub fn argv(&self) -> Vec<OsString> {
        let mut a = Argv(vec![self.exe.clone().into()]);
        let (env, command) = match &self.how {
            How::Spawn(r) => {
                spawn_options(&mut a, r);
                (&r.spec.env, &r.spec.argv)
            }
            How::Run(r) => {
                run_options(&mut a, r);
                (&r.spec.env, &r.spec.argv)
            }
        };
        global_options(&mut a, &self.globals);
        for (k, v) in env {
            a.opt("--env", format!("{k}={v}"));
        }
        a.0.push("--".into());
        a.0.extend(command.iter().cloned());
        a.0
    }
}

struct Argv(Vec<OsString>);

impl Argv {
    fn opt(&mut self, flag: &str, value: impl Into<OsString>) {
        self.0.extend([flag.into(), value.into()]);
    }
    fn flag(&mut self, flag: &str, on: bool) {
        if on {
            self.0.push(flag.into());
        }
    }
    fn opt_some(&mut self, flag: &str, value: Option<impl Into<OsString> + Clone>) {
        if let Some(v) = value {
            self.opt(flag, v);
        }
    }
}

fn global_options(a: &mut Argv, g: &GlobalArgs) {
    a.opt_some("--config", g.config.clone());
    a.opt_some("--cgroup-root", g.cgroup_root.clone());
    a.opt("--backend", g.backend.name());
}

fn run_options(a: &mut Argv, r: &RunTarget) {
    a.0.push("run".into());
    a.flag("--scope", r.scope);
    common_options(a, &r.spec.uid, &r.slice, &r.spec.gid, &r.spec.cwd);
    listen_fds(a, r.spec.listen_fds);
}

fn spawn_options(a: &mut Argv, r: &SpawnRequest) {
    let s = &r.spec;
    a.0.push("spawn".into());
    a.opt("-D", r.directory.clone());
    a.flag("--ephemeral", s.ephemeral);
    a.opt_some("--snapshot", s.snapshot.map(|c| c.to_string()));
    if let Some(u) = &r.private_users {
        a.0.push(format!("--private-users={u}").into());
    }
    a.opt("--net", s.net.name());
    a.flag("--writable", s.writable);
    a.opt_some("--hostname", s.hostname.clone());
    for b in &s.binds {
        a.opt("--bind", b.to_arg());
    }
    for t in &s.tmpfs {
        a.opt("--tmpfs", t.clone());
    }
    sizes(a, &s.sizes);
    common_options(a, &s.uid, &r.slice, &s.gid, &s.cwd);
    if let Some(t) = s.timeout {
        a.opt("--timeout", millis(t));
    }
    if let Some(t) = s.stop_timeout {
        a.opt("--stop-timeout", millis(t));
    }
    a.flag("--as-pid1", s.as_pid1);
    a.flag("--boot", s.boot);
    a.flag("--pty", s.pty);
    if !s.seccomp {
        a.opt("--seccomp", "no");
    }
    listen_fds(a, s.listen_fds);
}

/// The sizes that are not spawn's defaults.
fn sizes(a: &mut Argv, s: &TmpfsSizes) {
    let d = TmpfsSizes::DEFAULT;
    for (flag, size, default) in [
        ("--tmp-size", s.tmp, d.tmp),
        ("--shm-size", s.shm, d.shm),
        ("--overlay-size", s.overlay, d.overlay),
    ] {
        if size != default {
            a.opt(flag, size.to_string());
        }
    }
}

fn common_options(
    a: &mut Argv,
    uid: &Option<String>,
    slice: &Option<String>,
    gid: &Option<String>,
    cwd: &Option<PathBuf>,
) {
    a.opt_some("--uid", uid.clone());
    a.opt_some("--slice", slice.clone());
    a.opt_some("--gid", gid.clone());
    a.opt_some("--cwd", cwd.clone());
}

fn listen_fds(a: &mut Argv, n: u32) {
    if n > 0 {
        a.opt("--listen-fds", n.to_string());
    }
}

fn millis(d: std::time::Duration) -> String {
    format!("{}ms", d.as_millis())
}
