//! serve's targets as command lines: the typed [`TargetCommand`] the library builds, spelled
//! in this parser's grammar (`bulkhead spawn ...`, `bulkhead run ...`) beside the parser
//! itself, so the library never spells a flag. The subcommand comes first, so a sandboxed
//! target takes the spawn-only parser (the cold-start fast path); the global options follow
//! it. `cmd::target_lines` parses every rendering back to the same value.

use bulkhead::actions::serve::{GlobalArgs, How, RunTarget, TargetCommand};
use bulkhead::actions::spawn::{SpawnRequest, TmpfsSizes};
use bulkhead::plan::SliceName;
use std::ffi::OsString;
use std::path::PathBuf;

/// `t`'s command line, subcommand first: what serve is given to start its targets with
/// (`bulkhead::actions::serve::RenderTarget`).
pub fn argv(t: &TargetCommand) -> Vec<OsString> {
    let mut a = Argv(vec![t.exe.clone().into()]);
    let (env, command) = match &t.how {
        How::Spawn(r) => {
            spawn_options(&mut a, r);
            (&r.spec.env, &r.spec.argv)
        }
        How::Run(r) => {
            run_options(&mut a, r);
            (&r.spec.env, &r.spec.argv)
        }
    };
    global_options(&mut a, &t.globals);
    for (k, v) in env {
        a.opt("--env", format!("{k}={v}"));
    }
    a.0.push("--".into());
    a.0.extend(command.iter().cloned());
    a.0
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
    common_options(
        a,
        &r.spec.uid,
        r.spec.slice.as_ref(),
        &r.spec.gid,
        &r.spec.cwd,
    );
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
    common_options(a, &s.uid, s.slice.as_ref(), &s.gid, &s.cwd);
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
    slice: Option<&SliceName>,
    gid: &Option<String>,
    cwd: &Option<PathBuf>,
) {
    a.opt_some("--uid", uid.clone());
    a.opt_some("--slice", slice.map(|s| s.to_string()));
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
