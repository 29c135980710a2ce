//! `apply`: print the plan's changes, make them, say what was done.

use crate::args::{ApplyArgs, Cli};
use crate::cmd::{json, report};
use bulkhead::actions::apply::{self, ApplyPlan, ApplyReport, ApplyRequest};
use bulkhead::error::Result;

pub fn apply(cli: &Cli, a: &ApplyArgs) -> Result<i32> {
    let p = apply::plan(
        &cli.context(),
        ApplyRequest {
            strict: a.strict,
            force: a.force,
            persist: a.persist,
        },
    )?;
    if a.json {
        let done = if a.dry_run { None } else { Some(p.execute()?) };
        let out = serde_json::json!({
            "backend": p.backend_name(),
            "layout": p.chosen.layout_line(),
            "plan": p.resolved.source,
            "dry_run": a.dry_run,
            "changes": p.changes.ops,
            "hugepages": p.hugepages.as_ref().map(|h| &h.ops),
            "iocost": p.iocost,
            "iocost_put_back": p.iocost_stale,
            "sched_slices": p.sched,
            "warnings": p.notes,
            "outcome": done.as_ref().and_then(|d| d.slices),
            "sched_threads": done.as_ref().map(|d| &d.sched),
        });
        println!("{}", json(&out));
        return Ok(0);
    }
    if !cli.quiet {
        eprintln!("bulkhead: {}", p.describe());
        if changes_nothing(&p) && !a.verbose && !a.dry_run && !p.notes.is_empty() {
            // An apply that finds everything in place (at every boot, from cron) says its
            // notes once in a line, not all again (issue 41 #6).
            eprintln!(
                "bulkhead: {} note(s) and warning(s) about this plan on this host, as before (bulkhead apply -v or --dry-run shows them)",
                p.notes.len()
            );
        } else {
            report(&p.notes);
        }
    }
    print_planned(cli, &p, a.dry_run, a.verbose);
    if a.dry_run {
        return Ok(0);
    }
    let done = p.execute()?;
    print_done(cli, &p, &done, a.verbose);
    Ok(0)
}

/// Whether the plan changes nothing on this host now (an idempotent apply).
fn changes_nothing(p: &ApplyPlan) -> bool {
    p.changes.ops.is_empty()
        && p.hugepages.as_ref().is_none_or(|h| h.ops.is_empty())
        && p.iocost.as_ref().is_none_or(Vec::is_empty)
        && p.iocost_stale.is_empty()
        && p.sched.is_empty()
}

/// The planned changes: listed one per line with --dry-run or -v, else only counted.
fn print_planned(cli: &Cli, p: &ApplyPlan, dry_run: bool, verbose: bool) {
    let show = dry_run || (verbose && !cli.quiet);
    if let Some(c) = &p.hugepages {
        if c.ops.is_empty() {
            if !cli.quiet {
                println!("hugepages: nothing to change");
            }
        } else {
            if show {
                for op in &c.ops {
                    println!("{op}");
                }
            }
            if dry_run {
                println!(
                    "dry run: {} huge page change(s) not made (run without --dry-run to apply)",
                    c.ops.len()
                );
            }
        }
    }
    if show {
        for op in &p.iocost_stale {
            println!("{op}");
        }
    }
    if let Some(ops) = &p.iocost {
        if ops.is_empty() {
            if !cli.quiet {
                println!("iocost: nothing to change");
            }
        } else {
            if show {
                for op in ops {
                    println!("{op}");
                }
            }
            if dry_run {
                println!(
                    "dry run: {} io.cost change(s) not made (run without --dry-run to apply)",
                    ops.len()
                );
            }
        }
    }
    if show {
        for c in &p.sched {
            println!("{c}");
        }
    }
    let ops = &p.changes.ops;
    if ops.is_empty() {
        if !cli.quiet && !p.changes.slices.is_empty() {
            println!(
                "nothing to change: {} slice(s) already match the plan",
                p.changes.slices.len()
            );
        }
        return;
    }
    if show {
        for op in ops {
            println!("{op}");
        }
    }
    if dry_run {
        println!(
            "dry run: {} change(s) not made (run without --dry-run to apply)",
            ops.len()
        );
    }
}

fn print_done(cli: &Cli, p: &ApplyPlan, done: &ApplyReport, verbose: bool) {
    if cli.quiet {
        return;
    }
    for (why, asked, got) in &done.compacted {
        println!("{why}: got {got} of {asked} pages after compacting memory");
    }
    if done.hugepages_done > 0 {
        println!(
            "hugepages: {} change(s); `bulkhead hugepages reset` puts back what was there",
            done.hugepages_done
        );
    }
    if done.iocost_done > 0 {
        println!(
            "iocost: {} line(s) written to the cgroup2 root; `bulkhead destroy` puts back what was there",
            done.iocost_done
        );
    }
    if done.sched.threads > 0 || done.sched.failed > 0 {
        println!(
            "scheduler slices: set on {} thread(s){}",
            done.sched.threads,
            match &done.sched.error {
                Some(e) => format!(", {} refused ({e})", done.sched.failed),
                None => String::new(),
            }
        );
    }
    if let (Some(out), false) = (done.slices, p.changes.is_empty()) {
        println!(
            "applied: {} slice(s), {} change(s){}{}",
            p.changes.slices.len(),
            out.done,
            if out.skipped > 0 {
                format!(", {} default(s) this kernel has no file for", out.skipped)
            } else {
                String::new()
            },
            if verbose { "" } else { " (-v lists them)" }
        );
    }
}
