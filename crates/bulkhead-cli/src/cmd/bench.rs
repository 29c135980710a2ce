//! `bench ...`: the benchmarks are a binary of their own (bulkhead-bench), so the product
//! binary does not carry plotting and load generation. Found beside this binary, then in
//! /usr/lib/bulkhead, then in PATH; it gets the global options and this binary's path.

use crate::args::{BenchArgs, Cli};
use bulkhead::error::{Diagnostic, Error, Result};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

const NAME: &str = "bulkhead-bench";

pub fn exec(cli: &Cli, a: &BenchArgs) -> Result<i32> {
    let me = std::env::current_exe()
        .map_err(|e| Error::failed(format!("cannot find bulkhead's own binary: {e}")))?;
    let Some(bench) = find(&me) else {
        return Err(Error::failed_with(
            Diagnostic::error(format!("the benchmarks binary {NAME} is not installed"))
                .hint(format!(
                    "build it with `cargo build --release` (it lands beside bulkhead), or put {NAME} in /usr/lib/bulkhead or PATH"
                )),
        ));
    };
    let mut args: Vec<OsString> = Vec::new();
    if let Some(c) = &cli.config {
        args.extend(["--config".into(), c.clone().into()]);
    }
    args.extend(["--cgroup-root".into(), cli.cgroup_root.clone().into()]);
    if cli.quiet {
        args.push("--quiet".into());
    }
    if let Some(b) = clap::ValueEnum::to_possible_value(&cli.backend) {
        args.extend(["--backend".into(), b.get_name().into()]);
    }
    args.extend(a.args.iter().cloned());
    let e = std::process::Command::new(&bench)
        .args(args)
        .env("BULKHEAD_BIN", &me)
        .exec();
    Err(Error::failed(format!(
        "cannot run {}: {}",
        bench.display(),
        bulkhead::error::errno_text(&e)
    )))
}

fn find(me: &std::path::Path) -> Option<PathBuf> {
    let beside = me.parent().map(|d| d.join(NAME));
    let lib = Some(PathBuf::from("/usr/lib/bulkhead").join(NAME));
    let path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(NAME))
            .find(|c| c.is_file())
    });
    [beside, lib, path]
        .into_iter()
        .flatten()
        .find(|c| c.is_file())
}
