//! `spawn`: the exit code is the command's (124 on timeout; 125/126/127 when it never
//! started).

use crate::args::{Cli, SpawnArgs};
use crate::cmd::report;
use bulkhead::actions::run::RunError;
use bulkhead::actions::spawn::{self, SpawnRequest};
use bulkhead::actions::spawn::{SandboxSpec, TmpfsSizes};

pub fn spawn(cli: &Cli, a: &SpawnArgs) -> i32 {
    match spawn_inner(cli, a) {
        Ok(c) => c,
        Err(e) => {
            report(&e.error.diagnostics());
            e.code
        }
    }
}

/// What `spawn`'s arguments ask for.
pub(super) fn request(a: &SpawnArgs) -> SpawnRequest {
    let mut binds = a.bind.clone();
    binds.extend(a.bind_ro.iter().cloned().map(|mut b| {
        b.read_only = true;
        b
    }));
    SpawnRequest {
        spec: SandboxSpec {
            ephemeral: a.ephemeral,
            snapshot: a.snapshot,
            writable: a.writable,
            net: a.net,
            hostname: a.hostname.clone(),
            binds,
            tmpfs: a.tmpfs.clone(),
            sizes: TmpfsSizes {
                tmp: a.tmp_size.unwrap_or(TmpfsSizes::DEFAULT.tmp),
                shm: a.shm_size.unwrap_or(TmpfsSizes::DEFAULT.shm),
                overlay: a.overlay_size.unwrap_or(TmpfsSizes::DEFAULT.overlay),
            },
            uid: a.uid.clone(),
            gid: a.gid.clone(),
            cwd: a.cwd.clone(),
            env: a.env.clone(),
            timeout: a.timeout,
            as_pid1: a.as_pid1,
            seccomp: a.seccomp,
            pty: a.pty,
            listen_fds: a.listen_fds,
            stop_timeout: a.stop_timeout,
            boot: a.boot,
            argv: a.command.clone(),
            slice: a.slice.clone(),
            ..Default::default()
        },
        directory: a.directory.clone(),
        private_users: a.private_users.clone(),
    }
}

fn spawn_inner(cli: &Cli, a: &SpawnArgs) -> Result<i32, RunError> {
    let spec = spawn::resolve(&request(a))?;
    if a.dry_run {
        for line in spawn::dry_run(&spec)? {
            println!("{line}");
        }
        return Ok(0);
    }
    let verbose = a.verbose && !cli.quiet;
    let mut note = |m: &str| {
        if verbose {
            eprintln!("bulkhead: {m}");
        }
    };
    let quiet = cli.quiet;
    let on_ready = |t: std::time::Duration| {
        if !quiet {
            eprintln!("bulkhead: ready after {:.0} ms", t.as_secs_f64() * 1e3);
        }
    };
    let out = spawn::spawn(&cli.context(), &spec, &mut note, &on_ready)?;
    if out.timed_out {
        if !cli.quiet {
            eprintln!(
                "bulkhead: the sandbox was killed: --timeout {} passed",
                a.timeout.map(|t| format!("{t:?}")).unwrap_or_default()
            );
        }
    } else if verbose {
        let ready = out
            .ready_after
            .map(|t| format!(" (ready after {:.2} ms)", t.as_secs_f64() * 1e3))
            .unwrap_or_default();
        eprintln!(
            "bulkhead: exit code {}, {:.2} ms from start to exit{ready}",
            out.code,
            out.elapsed.as_secs_f64() * 1e3
        );
    }
    if let Some(line) = silent_early_exit(a, &out) {
        if !cli.quiet {
            eprintln!("{line}");
        }
    }
    Ok(out.code)
}

/// How soon a failing PID 1 counts as one that died while starting.
const EARLY: std::time::Duration = std::time::Duration::from_secs(1);

/// A PID 1 (`--as-pid1`) that failed within [`EARLY`] and wrote nothing to /dev/console
/// never leaves the user with a bare exit code: say what bulkhead knows.
fn silent_early_exit(a: &SpawnArgs, out: &spawn::Outcome) -> Option<String> {
    if out.timed_out || out.code == 0 || out.elapsed >= EARLY || out.console_bytes != Some(0) {
        return None;
    }
    let cmd = match a.boot {
        true => "the root's init".to_string(),
        false => a
            .command
            .first()
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    Some(format!(
        "bulkhead: {cmd} (PID 1 of the sandbox) exited {} {:.0} ms after the start and wrote nothing to /dev/console\n  \
         hint: anything it wrote to stdout or stderr is above; an init that wrote nothing failed before it opened its console: \
         run it again under `strace -f -o FILE bulkhead spawn ...` to see its last calls",
        out.code,
        out.elapsed.as_secs_f64() * 1e3
    ))
}
