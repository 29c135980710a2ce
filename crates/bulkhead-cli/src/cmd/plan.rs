//! `plan show` and `import`.

use crate::args::{Cli, ImportArgs, PlanShowArgs};
use crate::cmd::{json, report};
use crate::show;
use bulkhead::actions::show::{plan_show, HostOverride};
use bulkhead::error::Result;

pub fn show(cli: &Cli, a: &PlanShowArgs) -> Result<i32> {
    if a.names {
        for name in cli.context().load_plan()?.slices.keys() {
            println!("{name}");
        }
        return Ok(0);
    }
    let over = HostOverride {
        memory: a.memory.clone(),
        cpus: a.cpus,
    };
    let (resolved, hp) = plan_show(&cli.context(), &over)?;
    if a.json {
        let mut v = serde_json::to_value(&resolved).unwrap_or_default();
        if let Some(h) = &hp {
            v["hugepages"] = serde_json::to_value(h).unwrap_or_default();
        }
        println!("{}", json(&v));
        return Ok(0);
    }
    print!("{}", show::plan_toml(&resolved));
    if let Some(h) = &hp {
        print!("{}", bulkhead::plan::hugepages::show_toml(h));
    }
    if let Some(c) = &resolved.iocost {
        print!("{}", bulkhead::plan::iocost::show_toml(c));
    }
    if !cli.quiet {
        report(&resolved.notes);
    }
    Ok(0)
}

pub fn import(a: &ImportArgs) -> Result<i32> {
    let text = bulkhead::plan::import::import(&a.files)?;
    match &a.output {
        Some(p) => std::fs::write(p, &text)
            .map_err(|e| bulkhead::error::io_failed("cannot write", p, e))?,
        None => print!("{text}"),
    }
    Ok(0)
}
