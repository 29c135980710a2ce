//! `status [--watch] [--format table|json|prometheus]`.

use crate::args::{Cli, StatusArgs, StatusFormat};
use crate::show;
use bulkhead::actions::{metrics, status};
use bulkhead::error::Result;
use std::io::Write;

pub fn status(cli: &Cli, a: &StatusArgs) -> Result<i32> {
    let format = if a.json { StatusFormat::Json } else { a.format };
    if format == StatusFormat::Prometheus {
        return prometheus(cli, a);
    }
    let reader = status::reader(&cli.context(), a.watch.unwrap_or(a.interval))?;
    loop {
        let r = reader.read();
        if format == StatusFormat::Json {
            let text = if a.watch.is_some() {
                serde_json::to_string(&r)
            } else {
                serde_json::to_string_pretty(&r)
            };
            println!("{}", text.unwrap_or_default());
        } else {
            if a.watch.is_some() {
                print!("\x1b[H\x1b[2J");
            }
            print!("{}", show::status_table(&r.slices));
            print!("{}", limits_table(&r.limits));
            if !r.sockets.is_empty() {
                print!("{}", show::sockets_table(&r.sockets));
            }
            if let Some(g) = &r.guard {
                print!("{}", show::guard_status(g));
            }
        }
        if a.watch.is_none() {
            return Ok(0);
        }
    }
}

/// Each slice's planned directives: the plan's value beside what the kernel holds, and a
/// mark where they differ.
fn limits_table(limits: &[status::SliceLimits]) -> String {
    let rows: Vec<[String; 5]> = limits
        .iter()
        .flat_map(|l| {
            l.directives.iter().map(move |d| {
                [
                    l.slice.clone(),
                    d.directive.clone(),
                    d.file.clone(),
                    d.planned.clone(),
                    match &d.kernel {
                        None => "(missing)".to_string(),
                        Some(k) if d.matches() => k.clone(),
                        Some(k) => format!("{k}  <- differs: bulkhead apply"),
                    },
                ]
            })
        })
        .collect();
    let unapplied = not_applied(limits);
    if rows.is_empty() {
        return unapplied;
    }
    let head = ["SLICE", "PLANNED", "FILE", "PLAN", "KERNEL"].map(String::from);
    let mut w = [0usize; 4];
    for r in std::iter::once(&head).chain(&rows) {
        for (i, c) in r.iter().take(4).enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::from("\n");
    for r in std::iter::once(&head).chain(&rows) {
        out.push_str(&format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {}\n",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        ));
    }
    out.push_str(&unapplied);
    out
}

/// The planned directives this host does not apply, with the reason and what to do.
fn not_applied(limits: &[status::SliceLimits]) -> String {
    let mut out = String::new();
    for l in limits {
        for n in &l.not_applied {
            if out.is_empty() {
                out.push_str("\nnot applied on this host:\n");
            }
            out.push_str(&format!("  {}: {}\n", l.slice, n.reason));
            if let Some(h) = &n.hint {
                out.push_str(&format!("    hint: {h}\n"));
            }
        }
    }
    out
}

/// One reading, no interval; with --watch, one exposition every SECONDS (a blank line
/// between them).
fn prometheus(cli: &Cli, a: &StatusArgs) -> Result<i32> {
    // Checks the interval the same way the table does.
    if let Some(w) = a.watch {
        status::reader(&cli.context(), w)?;
    }
    let scraper = metrics::scraper(&cli.context())?;
    loop {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(scraper.render().as_bytes());
        let _ = out.flush();
        let Some(w) = a.watch else { return Ok(0) };
        let _ = out.write_all(b"\n");
        drop(out);
        std::thread::sleep(std::time::Duration::from_secs_f64(w));
    }
}
