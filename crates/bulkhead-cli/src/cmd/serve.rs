//! `serve`.

use crate::args::{Cli, ServeArgs};
use bulkhead::actions::serve;
use bulkhead::error::Result;

pub fn serve(cli: &Cli, a: &ServeArgs) -> Result<i32> {
    let served = serve::prepare(&cli.context(), &a.sockets, crate::args::target::argv)?;
    if a.dry_run {
        for line in served.describe()? {
            println!("{line}");
        }
        println!("dry run: nothing bound, nothing started");
        return Ok(0);
    }
    served.run(cli.quiet)?;
    Ok(0)
}
