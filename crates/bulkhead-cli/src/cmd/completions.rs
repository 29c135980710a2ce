//! `completions` and the hidden `manpages`: both come from the clap definitions in `args`,
//! so they can never disagree with what the parser takes. `scripts/deb` runs them to put
//! the completions and man pages into the Debian package.

use super::examples;
use crate::args::{Cli, CompletionsArgs, ManpagesArgs};
use bulkhead::error::{io_failed, Result};
use clap::{CommandFactory, ValueHint};
use std::io::Write;
use std::path::Path;

/// What bash runs to complete a slice name: the plan's slices (`plan show --names`, with
/// the `-c` of the line being completed, if any).
const BASH_SLICES: &str = r#"
_bulkhead_slices() {
    local i config=()
    for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
        case "${COMP_WORDS[i]}" in
            -c|--config) config=(-c "${COMP_WORDS[i + 1]}") ;;
        esac
    done
    "${COMP_WORDS[0]}" "${config[@]}" plan show --names 2>/dev/null
}
"#;

pub fn completions(a: &CompletionsArgs) -> Result<i32> {
    // The tree lives as long as the process (a one-shot print): its names are 'static, as
    // clap's builder (without its "string" feature) takes them.
    let full: &'static clap::Command = Box::leak(Box::new(Cli::command()));
    let mut cmd = visible(full);
    let mut text = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "bulkhead", &mut text);
    let mut text = String::from_utf8_lossy(&text).into_owned();
    if a.shell == clap_complete::Shell::Bash {
        // A slice argument (ValueHint::Other, see `visible`) completes from the plan.
        text = text.replace(
            r#"COMPREPLY=("${cur}")"#,
            r#"COMPREPLY=($(compgen -W "$(_bulkhead_slices)" -- "${cur}"))"#,
        );
        text.push_str(BASH_SLICES);
    }
    let _ = std::io::stdout().write_all(text.as_bytes());
    Ok(0)
}

/// The command tree without hidden commands and options (clap_complete would offer them),
/// with every SLICE value marked as not a file name. clap cannot remove a subcommand, so the
/// tree is built again from the visible parts.
fn visible(cmd: &'static clap::Command) -> clap::Command {
    let mut fresh =
        clap::Command::new(cmd.get_name()).disable_help_flag(cmd.is_disable_help_flag_set());
    if let Some(a) = cmd.get_about() {
        fresh = fresh.about(a.clone());
    }
    if let Some(v) = cmd.get_version() {
        fresh = fresh.version(v);
    }
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let slice = a
            .get_value_names()
            .is_some_and(|v| v.iter().any(|n| n == "SLICE"));
        fresh = fresh.arg(if slice {
            a.clone().value_hint(ValueHint::Other)
        } else {
            a.clone()
        });
    }
    for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        fresh = fresh.subcommand(visible(s));
    }
    fresh
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
    let text = page(&man, cmd).map_err(|e| io_failed("cannot render", &path, e))?;
    std::fs::write(&path, text).map_err(|e| io_failed("cannot write", &path, e))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, out, written)?;
    }
    Ok(())
}

/// clap_mangen's sections in its order, with EXAMPLES before VERSION.
pub(super) fn page(man: &clap_mangen::Man, cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let mut w = Vec::new();
    man.render_title(&mut w)?;
    man.render_name_section(&mut w)?;
    man.render_synopsis_section(&mut w)?;
    man.render_description_section(&mut w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut w)?;
    }
    if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
        man.render_extra_section(&mut w)?;
    }
    let name = cmd.get_display_name().unwrap_or(cmd.get_name());
    let list = examples::of(name);
    if !list.is_empty() {
        let mut roff = clap_mangen::roff::Roff::default();
        roff.control("SH", ["EXAMPLES"]);
        for (what, line) in list {
            roff.control("TP", []);
            roff.text([clap_mangen::roff::roman(*what)]);
            roff.text([clap_mangen::roff::bold(*line)]);
        }
        roff.to_writer(&mut w)?;
    }
    if cmd.get_version().is_some() {
        man.render_version_section(&mut w)?;
    }
    Ok(w)
}
