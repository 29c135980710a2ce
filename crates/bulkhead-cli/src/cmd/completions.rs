//! `completions` and the hidden `manpages`: both come from the clap definitions in `args`,
//! so they can never disagree with what the parser takes. `scripts/deb` runs them to put
//! the completions and man pages into the Debian package.

use crate::args::{Cli, CompletionsArgs, ManpagesArgs};
use bulkhead::error::{io_failed, Result};
use clap::CommandFactory;
use std::path::Path;

pub fn completions(a: &CompletionsArgs) -> Result<i32> {
    let mut cmd = Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "bulkhead", &mut std::io::stdout());
    Ok(0)
}

/// bulkhead.8, then one page per visible subcommand at every depth (bulkhead-plan-show.8):
/// section 8, as bulkhead administers the machine.
pub fn manpages(a: &ManpagesArgs) -> Result<i32> {
    std::fs::create_dir_all(&a.out).map_err(|e| io_failed("cannot create", &a.out, e))?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write_pages(&cmd, &a.out, &mut written)?;
    for p in written {
        println!("{}", p.display());
    }
    Ok(0)
}

fn write_pages(
    cmd: &clap::Command,
    out: &Path,
    written: &mut Vec<std::path::PathBuf>,
) -> Result<()> {
    let man = clap_mangen::Man::new(cmd.clone())
        .section("8")
        .source(concat!("bulkhead ", env!("CARGO_PKG_VERSION")))
        .manual("bulkhead");
    let path = out.join(man.get_filename());
    let mut text = Vec::new();
    man.render(&mut text)
        .map_err(|e| io_failed("cannot render", &path, e))?;
    std::fs::write(&path, text).map_err(|e| io_failed("cannot write", &path, e))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, out, written)?;
    }
    Ok(())
}
