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
