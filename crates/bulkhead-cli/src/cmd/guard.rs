//! `guard`: run the guard (or its dry run, release, or watchdog) and print what it does.

use crate::args::guard::GuardArgs;
use crate::args::Cli;
use crate::cmd::{json, report};
use bulkhead::actions::guard::{self, Event, GuardRequest};
use bulkhead::error::{Diagnostic, Error, Result};

pub fn guard(cli: &Cli, a: &GuardArgs) -> Result<i32> {
    if let Some(w) = &a.watchdog_of {
        return watchdog(w);
    }
    if a.release {
        return release(cli, a);
    }
    let g = guard::prepare(&cli.context())?;
    if !cli.quiet && !a.json {
        report(&g.notes);
    }
    if a.dry_run {
        let lines = g.describe()?;
        if a.json {
            println!(
                "{}",
                json(
                    &serde_json::json!({ "dry_run": true, "spec": g.spec, "would": lines, "notes": g.notes })
                )
            );
        } else {
            for l in lines {
                println!("{l}");
            }
        }
        return Ok(0);
    }
    // The heartbeat pipe to the watchdog must not kill the guard with SIGPIPE.
    bulkhead::sys::signals::ignore(libc::SIGPIPE);
    let req = GuardRequest {
        log: a.log.clone(),
        recalibrate: a.recalibrate,
        duration: a.duration,
    };
    let quiet = cli.quiet;
    let as_json = a.json;
    let summary = guard::run(g, &req, &mut |e| print_event(e, quiet, as_json))?;
    if a.json {
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    } else if !quiet {
        eprintln!(
            "bulkhead: guard stopped after {:.0} s, {} action(s), {:.2}% of one CPU; every sideload has its plan back",
            summary.seconds, summary.actions, summary.cost_cpu_percent
        );
    }
    Ok(0)
}

fn print_event(e: Event, quiet: bool, as_json: bool) {
    match e {
        Event::Note(d) if !quiet => report(&[d]),
        Event::Action(l) if as_json => println!("{}", serde_json::to_string(l).unwrap_or_default()),
        Event::Action(l) if !quiet => println!(
            "{:>8.1}s  {:<10} {:<8} {}  ({})",
            l.t, l.slice, l.kind, l.now, l.why
        ),
        Event::Calibrating(d) if !quiet && !as_json => eprintln!(
            "bulkhead: calibrating for {:?} with the sideloads held at their floor",
            d
        ),
        Event::Calibrated(b, reused) if !quiet && !as_json => eprintln!(
            "bulkhead: baseline{}: stall cpu {:.1}% io {:.1}% memory {:.1}%, run-queue wait {:.0} us per run{}",
            if reused { " (this boot's calibration; --recalibrate takes a new one)" } else { "" },
            b.cpu * 100.0,
            b.io * 100.0,
            b.memory * 100.0,
            b.wait_per_run_us,
            b.probe_ms.map_or(String::new(), |p| format!(", probe {p:.2} ms"))
        ),
        _ => {}
    }
}

fn release(cli: &Cli, a: &GuardArgs) -> Result<i32> {
    let r = guard::release()?;
    if a.json {
        println!("{}", json(&r));
        return Ok(0);
    }
    if cli.quiet {
        return Ok(0);
    }
    match r {
        None => println!("nothing to release: no guard left anything held"),
        Some(r) => {
            for n in &r.notes {
                report(&[Diagnostic::note(n.clone())]);
            }
            println!(
                "released what guard PID {} held on {} ({} change(s))",
                r.pid,
                r.sideloads.join(", "),
                r.ops
            );
        }
    }
    Ok(0)
}

fn watchdog(spec: &str) -> Result<i32> {
    let Some((pid, start, hang)) = guard::parse_watchdog_of(spec) else {
        return Err(Error::invalid(Diagnostic::error(format!(
            "--watchdog-of {spec}: not PID:START:HANG_MS"
        ))));
    };
    let (end, released) = guard::watchdog(pid, start, hang)?;
    if let guard::WatchdogEnd::GuardHung(at) = &end {
        eprintln!(
            "bulkhead guard watchdog: the guard (PID {pid}) sent no heartbeat for {hang:?} and was killed; its threads: {at}"
        );
    }
    if let Some(r) = released {
        eprintln!(
            "bulkhead guard watchdog: the guard (PID {pid}) is gone; put back {} ({} change(s))",
            r.sideloads.join(", "),
            r.ops
        );
    }
    Ok(0)
}
