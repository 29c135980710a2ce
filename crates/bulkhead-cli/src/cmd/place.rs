//! `place`: print each process the rules placed.

use crate::args::place::PlaceArgs;
use crate::args::Cli;
use bulkhead::actions::place::{self, PlaceRequest, Placed};
use bulkhead::error::Result;
use bulkhead::units::printable;

pub fn place(cli: &Cli, a: &PlaceArgs) -> Result<i32> {
    let req = PlaceRequest {
        once: a.once,
        dry_run: a.dry_run,
        interval: a.interval,
        recheck: a.recheck,
    };
    let quiet = cli.quiet;
    if let Some(log) = &a.log {
        place::log_to(log)?;
    }
    let sum = place::place(&cli.context(), &req, |p| print_one(p, a, quiet))?;
    if a.dry_run && !a.json {
        println!(
            "dry run: {} process(es) would move (run without --dry-run to move them)",
            sum.placed
        );
    }
    Ok(i32::from(sum.failed > 0))
}

fn print_one(p: &Placed, a: &PlaceArgs, quiet: bool) {
    if a.json {
        println!("{}", serde_json::to_string(p).unwrap_or_default());
        return;
    }
    // In a log file every line says when.
    let at = match a.log {
        Some(_) => format!("{} ", bulkhead::units::utc_now()),
        None => String::new(),
    };
    // PID 0: a service whose pidfile could not be used names no process.
    let mut what = match p.pid {
        0 => "its process".to_string(),
        // Another user's process names itself: printed with its control characters escaped.
        pid => format!(
            "{pid} ({}: {})",
            printable(&p.comm),
            printable(&short(&p.cmdline))
        ),
    };
    if !p.descendants.is_empty() {
        what.push_str(&format!(" and {} descendant(s)", p.descendants.len()));
    }
    // A service's placement names the service; a rule's, the rule.
    let why = if p.rule.starts_with("service ") {
        p.rule.clone()
    } else {
        format!("rule {}", p.rule)
    };
    match &p.error {
        Some(e) => eprintln!(
            "{at}bulkhead: error: {why} could not move {what} to {}: {e}",
            p.slice.unit(),
            e = printable(e)
        ),
        None if quiet => {}
        None => {
            let verb = if a.dry_run { "would place" } else { "placed" };
            println!("{at}{verb} {what} in {} ({why})", p.slice.unit());
        }
    }
}

/// A command line for one line of output: at most 80 characters.
fn short(s: &str) -> String {
    if s.chars().count() <= 80 {
        return s.to_string();
    }
    let cut: String = s.chars().take(77).collect();
    format!("{cut}...")
}
