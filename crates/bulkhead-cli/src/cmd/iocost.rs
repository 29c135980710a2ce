//! `iocost calibrate`: measure, print the model line for the plan.

use crate::args::iocost::{CalibrateArgs, IocostCmd};
use crate::args::Cli;
use crate::cmd::json;
use bulkhead::actions::iocost::{calibrate, Request};
use bulkhead::error::{Diagnostic, Error, Result};

pub fn dispatch(cli: &Cli, c: &IocostCmd) -> Result<i32> {
    match c {
        IocostCmd::Calibrate(a) => calibrate_cmd(cli, a),
    }
}

fn calibrate_cmd(cli: &Cli, a: &CalibrateArgs) -> Result<i32> {
    let size = bulkhead::units::parse_size(&a.size, 1024)
        .map_err(|e| Error::invalid(Diagnostic::error(format!("--size {}: {e}", a.size))))?;
    if !cli.quiet && !a.json {
        eprintln!(
            "bulkhead: measuring {} for {}s per figure (6 figures)...",
            a.path.display(),
            a.seconds
        );
    }
    let c = calibrate(&Request {
        path: a.path.clone(),
        seconds: a.seconds,
        size,
        depth: a.depth,
        destroy_data: a.destroy_data,
    })?;
    if a.json {
        println!("{}", json(&c));
        return Ok(0);
    }
    println!(
        "# io.cost model of {} ({}), measured on {}: {}s per figure, depth {}",
        c.disk, c.dev, c.target, c.seconds, c.depth
    );
    for (what, fig, unit) in &c.runs {
        println!("#   {what}: {fig:.0} {unit}");
    }
    for n in &c.notes {
        println!("# note: {n}");
    }
    println!("model = {}", c.coefs.toml());
    Ok(0)
}
