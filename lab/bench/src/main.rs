//! `bulkhead-bench`: bulkhead's benchmarks as a binary of their own, so the product binary
//! does not link plotting and load generation. Users run it as `bulkhead bench ...`, which
//! execs this with the global options and `BULKHEAD_BIN` (the bulkhead binary to measure).

#![forbid(unsafe_code)]

mod cli;

use bulkhead::error::{Diagnostic, Error, Result};
use bulkhead_args::{BackendArg, Globals};
use clap::Parser;
use std::path::PathBuf;

/// Benchmarks that measure bulkhead against what people use today
#[derive(Parser)]
#[command(name = "bulkhead-bench", bin_name = "bulkhead bench", version)]
#[command(mut_arg("backend", |a| a.help(BACKEND_HELP).long_help(None).value_parser(backend_values())))]
pub struct Cli {
    /// bulkhead's global options (`cli.config` etc. reach them through Deref).
    #[command(flatten)]
    pub globals: Globals,
    #[command(subcommand)]
    pub command: cli::BenchCmd,
}

/// What `--backend` means here: taken because `bulkhead bench` passes bulkhead's global
/// options on, but every benchmark makes its own cgroups on cgroupfs.
const BACKEND_HELP: &str =
    "Who creates slices (the benchmarks use cgroupfs; accepted for bulkhead's global options)";

/// `--backend`'s values without their descriptions (they describe bulkhead's slices, which
/// the benchmarks do not make through the backend).
fn backend_values() -> impl clap::builder::TypedValueParser<Value = BackendArg> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    use clap::ValueEnum;
    PossibleValuesParser::new(["auto", "systemd", "cgroupfs"])
        .try_map(|v| BackendArg::from_str(&v, false))
}

impl std::ops::Deref for Cli {
    type Target = Globals;
    fn deref(&self) -> &Globals {
        &self.globals
    }
}

/// Print diagnostics to stderr, as bulkhead does.
pub fn report(ds: &[Diagnostic]) {
    for d in ds {
        eprintln!("bulkhead: {d}");
    }
}

/// The bulkhead binary under test: `$BULKHEAD_BIN` (set by `bulkhead bench`), else the one
/// beside this binary.
pub fn bulkhead_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("BULKHEAD_BIN").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().map_err(|e| Error::failed(e.to_string()))?;
    let beside = me.with_file_name("bulkhead");
    if beside.is_file() {
        return Ok(beside);
    }
    Err(Error::failed_with(
        Diagnostic::error("cannot find the bulkhead binary to measure")
            .hint("run the benchmarks as `bulkhead bench ...`, or set BULKHEAD_BIN"),
    ))
}

fn main() {
    // Die quietly on a closed pipe, as Unix tools do.
    bulkhead_sys::signals::default(libc::SIGPIPE);
    let cli = Cli::parse();
    let code = match cli::dispatch(&cli, &cli.command) {
        Ok(code) => code,
        Err(e) => {
            report(&e.diagnostics());
            e.exit_code()
        }
    };
    std::process::exit(code);
}
