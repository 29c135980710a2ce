//! Commands that are binaries of their own (`bench` → bulkhead-bench, `agent` →
//! bulkhead-agent), so the product binary carries neither plotting nor a Kubernetes client.
//! Found beside this binary, then in /usr/lib/bulkhead, then in PATH; it gets the global
//! options and this binary's path (BULKHEAD_BIN).

use crate::args::Cli;
use bulkhead::error::{Diagnostic, Error, Result};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// Exec `name` with the global options (`--config` only when `with_config`) and `rest`.
pub fn exec(cli: &Cli, name: &str, with_config: bool, rest: &[OsString]) -> Result<i32> {
    let me = std::env::current_exe()
        .map_err(|e| Error::failed(format!("cannot find bulkhead's own binary: {e}")))?;
    let Some(bin) = find(&me, name) else {
        return Err(Error::failed_with(
            Diagnostic::error(format!("the binary {name} is not installed"))
                .hint(format!(
                    "build it with `cargo build --release` (it lands beside bulkhead), or put {name} in /usr/lib/bulkhead or PATH"
                )),
        ));
    };
    let mut args: Vec<OsString> = Vec::new();
    if with_config {
        if let Some(c) = &cli.config {
            args.extend(["--config".into(), c.clone().into()]);
        }
    }
    args.extend(["--cgroup-root".into(), cli.cgroup_root.clone().into()]);
    if cli.quiet {
        args.push("--quiet".into());
    }
    if let Some(b) = clap::ValueEnum::to_possible_value(&cli.backend) {
        args.extend(["--backend".into(), b.get_name().into()]);
    }
    args.extend(rest.iter().cloned());
    let e = std::process::Command::new(&bin)
        .args(args)
        .env("BULKHEAD_BIN", &me)
        .exec();
    Err(Error::failed(format!(
        "cannot run {}: {}",
        bin.display(),
        bulkhead::error::errno_text(&e)
    )))
}

fn find(me: &std::path::Path, name: &str) -> Option<PathBuf> {
    let beside = me.parent().map(|d| d.join(name));
    let lib = Some(PathBuf::from("/usr/lib/bulkhead").join(name));
    let path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    });
    [beside, lib, path]
        .into_iter()
        .flatten()
        .find(|c| c.is_file())
}
