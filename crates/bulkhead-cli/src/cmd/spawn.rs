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
            argv: a.command.clone(),
            ..Default::default()
        },
        directory: a.directory.clone(),
        private_users: a.private_users.clone(),
        slice: a.slice.clone(),
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
    let out = spawn::spawn(&cli.context(), &spec, &mut note)?;
    if out.timed_out {
        if !cli.quiet {
            eprintln!(
                "bulkhead: the sandbox was killed: --timeout {} passed",
                a.timeout.map(|t| format!("{t:?}")).unwrap_or_default()
            );
        }
    } else if verbose {
        eprintln!(
            "bulkhead: exit code {}, {:.2} ms from start to exit",
            out.code,
            out.elapsed.as_secs_f64() * 1e3
        );
    }
    Ok(out.code)
}
