//! `exporter --listen ADDR`.

use crate::args::{Cli, ExporterArgs};
use bulkhead::actions::metrics;
use bulkhead::error::Result;

pub fn exporter(cli: &Cli, a: &ExporterArgs) -> Result<i32> {
    let e = metrics::exporter(&cli.context(), &a.listen)?;
    // The real address (port 0 picks one), on stdout so scripts and tests can read it.
    println!("listening on http://{}/metrics", e.local_addr()?);
    e.run()?;
    Ok(0)
}
