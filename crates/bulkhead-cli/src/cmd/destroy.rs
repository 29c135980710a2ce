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
    let Some(changes) = &p.changes else {
        if !cli.quiet {
            println!("nothing to remove: none of the slices exist");
        }
        return Ok(0);
    };
    if a.dry_run {
        for op in &changes.ops {
            println!("{op}");
        }
        println!("dry run: {} change(s) not made", changes.ops.len());
        return Ok(0);
    }
    if !cli.quiet {
        for op in &changes.ops {
            println!("{op}");
        }
    }
    p.execute()?;
    if !cli.quiet {
        println!("removed: {} slice(s)", changes.slices.len());
    }
    Ok(0)
}
