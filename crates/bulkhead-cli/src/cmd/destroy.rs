//! `destroy`.

use crate::args::{Cli, DestroyArgs};
use bulkhead::actions::destroy::{self, Which};
use bulkhead::error::Result;

pub fn destroy(cli: &Cli, a: &DestroyArgs) -> Result<i32> {
    let which = if a.all {
        Which::All
    } else if !a.slices.is_empty() {
        Which::Named(a.slices.clone())
    } else {
        Which::Plan
    };
    let p = destroy::plan(&cli.context(), &which, a.kill)?;
    if p.is_empty() {
        p.execute()?; // forgets io.cost records whose disks already hold their original
        if !cli.quiet {
            println!("nothing to remove: none of the slices exist");
        }
        return Ok(0);
    }
    let ops: Vec<String> = p
        .changes
        .iter()
        .flat_map(|c| c.ops.iter().map(|o| o.to_string()))
        .chain(p.iocost.iter().map(|o| o.to_string()))
        .collect();
    if a.dry_run {
        for op in &ops {
            println!("{op}");
        }
        println!("dry run: {} change(s) not made", ops.len());
        return Ok(0);
    }
    if a.verbose && !cli.quiet {
        for op in &ops {
            println!("{op}");
        }
    }
    p.execute()?;
    if !cli.quiet {
        if let Some(c) = &p.changes {
            println!("removed: {} slice(s)", c.slices.len());
        }
        if !p.iocost.is_empty() {
            println!(
                "io.cost: {} line(s) put back as they were before bulkhead",
                p.iocost.len()
            );
        }
    }
    Ok(0)
}
