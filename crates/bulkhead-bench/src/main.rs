//! `bulkhead-bench`: bulkhead's benchmarks as a binary of their own, so the product binary
//! does not link plotting and load generation. Users run it as `bulkhead bench ...`, which
//! execs this with the global options and `BULKHEAD_BIN` (the bulkhead binary to measure).

#![forbid(unsafe_code)]

mod cli;

use bulkhead::error::{Diagnostic, Error, Result};
use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// Benchmarks that measure bulkhead against what people use today
#[derive(Parser)]
#[command(name = "bulkhead-bench", bin_name = "bulkhead bench", version)]
pub struct Cli {
    /// The plan file [default: /etc/bulkhead/bulkhead.toml, else the embedded default plan]
    #[arg(
        short = 'c',
        long = "config",
        global = true,
        env = "BULKHEAD_CONFIG",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,
    /// The cgroup under which slices live (a delegated subtree, or a test root)
    #[arg(
        long,
        global = true,
        env = "BULKHEAD_CGROUP_ROOT",
        default_value = "/",
        value_name = "PATH"
    )]
    pub cgroup_root: String,
    /// Only print errors
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Who creates slices (the benchmarks use cgroupfs; accepted for bulkhead's global options)
    #[arg(long, global = true, env = "BULKHEAD_BACKEND", value_enum, default_value_t = BackendArg::Auto, value_name = "BACKEND")]
    pub backend: BackendArg,
    #[command(subcommand)]
    pub command: cli::BenchCmd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Auto,
    Systemd,
    Cgroupfs,
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
    bulkhead::sys::signals::default(libc::SIGPIPE);
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
