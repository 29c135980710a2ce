//! `status [--watch]`.

use crate::args::{Cli, StatusArgs};
use crate::show;
use bulkhead::actions::status;
use bulkhead::error::Result;

pub fn status(cli: &Cli, a: &StatusArgs) -> Result<i32> {
    let reader = status::reader(&cli.context(), a.watch.unwrap_or(a.interval))?;
    loop {
        let r = reader.read();
        if a.json {
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
