//! `move`.

use crate::args::{Cli, MoveArgs};
use crate::cmd::json;
use bulkhead::actions::moves::{self, MoveRequest, Moved};
use bulkhead::error::Result;

pub fn move_pids(cli: &Cli, a: &MoveArgs) -> Result<i32> {
    let req = MoveRequest {
        slice: a.slice.clone(),
        pids: a.pids.clone(),
        tree: a.tree,
        dry_run: a.dry_run,
    };
    let (slice, results) = moves::move_pids(&cli.context(), &req)?;
    if a.json {
        println!(
            "{}",
            json(&serde_json::json!({"slice": slice, "dry_run": a.dry_run, "results": results}))
        );
    } else {
        let unit = slice.to_string();
        for r in &results {
            print_one(r, &unit, a.dry_run, cli.quiet);
        }
        if a.dry_run {
            println!("dry run: nothing moved (run without --dry-run to move)");
        }
    }
    let failed = results
        .iter()
        .any(|r| r.error.is_some() || !r.refused.is_empty() || r.unstable);
    Ok(i32::from(failed))
}

fn print_one(r: &Moved, unit: &str, dry_run: bool, quiet: bool) {
    let verb = if dry_run { "would move" } else { "moved" };
    if let Some(e) = &r.error {
        eprintln!("bulkhead: error: could not move {}: {e}", r.pid);
        return;
    }
    // What was there already is said so, not "moved" (issue 41 #6).
    let there = r.already.len();
    match &r.tree {
        Some(_) if quiet => {}
        Some(t) if there == t.len() => println!(
            "{} and {} descendant(s) are already in {unit}",
            r.pid,
            t.len().saturating_sub(1)
        ),
        Some(t) => {
            let also = match there {
                0 => String::new(),
                n => format!(" ({n} of them were there already)"),
            };
            println!(
                "{verb} {} and {} descendant(s) to {unit}: {}{also}",
                r.pid,
                t.len().saturating_sub(1),
                list(t)
            )
        }
        None if quiet => {}
        None if there > 0 => println!("{} is already in {unit}", r.pid),
        None => println!("{verb} {} to {unit}", r.pid),
    }
    for f in &r.refused {
        eprintln!(
            "bulkhead: error: could not move {} (descendant of {}): {}",
            f.pid, r.pid, f.error
        );
    }
    if r.unstable {
        eprintln!(
            "bulkhead: error: the tree of {} was still forking new processes after the last round; some may stay outside {unit}: run `bulkhead move --tree` again, or stop what forks",
            r.pid
        );
    }
    if let Some(b) = &r.left_behind {
        let stay = if dry_run { "would stay" } else { "stay" };
        eprintln!(
            "bulkhead: warning: {} descendant(s) of {} {stay} in {} ({}): add --tree to move them with it",
            b.pids.len(),
            r.pid,
            b.cgroup,
            list(&b.pids)
        );
    }
}

/// PIDs for a line: the first 10, then how many more.
fn list(pids: &[i32]) -> String {
    let shown: Vec<String> = pids.iter().take(10).map(i32::to_string).collect();
    match pids.len().saturating_sub(10) {
        0 => shown.join(", "),
        more => format!("{}, and {more} more", shown.join(", ")),
    }
}
