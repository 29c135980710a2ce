//! `run`: the exit code is the command's own, or 125/126/127 when it never started.

use crate::args::{Cli, RunArgs};
use crate::cmd::report;
use bulkhead::actions::run::RunSpec;
use bulkhead::actions::run::{self, RunEvent, RunRequest};
use bulkhead::error::Severity;

/// What `run`'s arguments ask for.
pub(super) fn request(a: &RunArgs) -> RunRequest {
    RunRequest {
        spec: RunSpec {
            slice: a.slice.clone(),
            listen_fds: a.listen_fds,
            uid: a.uid.clone(),
            gid: a.gid.clone(),
            cwd: a.cwd.clone(),
            env: a.env.clone(),
            env_files: a.setenv_file.clone(),
            argv: a.command.clone(),
        },
        scope: a.scope,
        pty: a.pty,
        hugepages: a.hugepages.clone(),
        verify: !a.no_verify,
    }
}

pub fn run(cli: &Cli, a: &RunArgs) -> i32 {
    let req = request(a);
    let quiet = cli.quiet;
    let mut on = |e: RunEvent| match e {
        RunEvent::Note(d) if !quiet || d.severity != Severity::Note => report(&[d]),
        RunEvent::Note(_) => {}
        RunEvent::Hugepages(line) if !quiet => eprintln!("bulkhead: {line}"),
        RunEvent::Hugepages(_) => {}
        RunEvent::Placed(how) if a.verbose && !quiet => eprintln!("bulkhead run: {how}"),
        RunEvent::Placed(_) => {}
    };
    match run::run(&cli.context(), req, &mut on) {
        Ok(code) => code,
        Err(e) => {
            report(&e.error.diagnostics());
            e.code
        }
    }
}
