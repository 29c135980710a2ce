//! One module per command: call the library, print what it returns.

mod agent;
mod apply;
mod bench;
mod check;
mod completions;
mod destroy;
mod examples;
mod export;
mod exporter;
mod guard;
mod hugepages;
mod image;
mod iocost;
mod moves;
mod place;
mod plan;
mod privilege;
mod run;
mod serve;
mod sibling;
mod spawn;
mod status;
#[cfg(test)]
mod target_lines;

use crate::args::{Cli, Command, PlanCmd};
use bulkhead::error::{Diagnostic, Result};

pub fn dispatch(cli: &Cli) -> Result<i32> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some((d, code)) = privilege::refusal(cli, &args, bulkhead::sys::process::is_root()) {
        report(&[d]);
        return Ok(code);
    }
    if takes_plan(&cli.command) {
        if let Err(e) = cli.context().check_config() {
            // `run` keeps its own code for "could not start the command".
            if let Command::Run(_) = cli.command {
                report(&e.diagnostics());
                return Ok(bulkhead::actions::run::EXIT_RUN_FAILED);
            }
            return Err(e);
        }
    }
    match &cli.command {
        Command::Plan(PlanCmd::Show(a)) => plan::show(cli, a),
        Command::Apply(a) => apply::apply(cli, a),
        Command::Run(a) => Ok(run::run(cli, a)),
        Command::Move(a) => moves::move_pids(cli, a),
        Command::Place(a) => place::place(cli, a),
        Command::Status(a) => status::status(cli, a),
        Command::Check(a) => Ok(check::check(cli, a)),
        Command::Exporter(a) => exporter::exporter(cli, a),
        Command::Serve(a) => serve::serve(cli, a),
        Command::Destroy(a) => destroy::destroy(cli, a),
        Command::Guard(a) => guard::guard(cli, a),
        Command::Import(a) => plan::import(a),
        Command::Export(e) => export::export(cli, e),
        Command::Spawn(a) => Ok(spawn::spawn(cli, a)),
        Command::Bench(b) => bench::exec(cli, b),
        Command::Agent(a) => agent::exec(cli, a),
        Command::Nri(a) => agent::nri(cli, a),
        Command::Image(i) => image::dispatch(cli, i),
        Command::Hugepages(h) => hugepages::dispatch(cli, h),
        Command::Iocost(c) => iocost::dispatch(cli, c),
        Command::Completions(a) => completions::completions(a),
        Command::Manpages(a) => completions::manpages(a),
    }
}

/// Whether `-c FILE` is this command's: every command but those that hand their arguments
/// on, read other files, or print bulkhead's own text.
fn takes_plan(c: &Command) -> bool {
    !matches!(
        c,
        Command::Import(_)
            | Command::Bench(_)
            | Command::Agent(_)
            | Command::Nri(_)
            | Command::Completions(_)
            | Command::Manpages(_)
    )
}

/// Print diagnostics to stderr, prefixed like every Unix tool does.
pub fn report(ds: &[Diagnostic]) {
    for d in ds {
        eprintln!("bulkhead: {d}");
    }
}

/// JSON for people: pretty, or one line per object with --watch.
pub fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
