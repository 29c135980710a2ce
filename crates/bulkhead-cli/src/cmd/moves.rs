//! `move`.

use crate::args::{Cli, MoveArgs};
use crate::cmd::json;
use bulkhead::actions::moves;
use bulkhead::error::Result;

pub fn move_pids(cli: &Cli, a: &MoveArgs) -> Result<i32> {
    let (slice, results) = moves::move_pids(&cli.context(), &a.slice, &a.pids)?;
    if a.json {
        println!(
            "{}",
            json(&serde_json::json!({"slice": slice, "results": results}))
        );
    } else {
        for r in &results {
            match &r.error {
                None if !cli.quiet => println!("moved {} to {slice}", r.pid),
                None => {}
                Some(e) => eprintln!("bulkhead: error: could not move {}: {e}", r.pid),
            }
        }
    }
    Ok(if results.iter().any(|r| !r.moved) {
        1
    } else {
        0
    })
}
