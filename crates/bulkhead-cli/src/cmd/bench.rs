//! `bench ...`: the benchmarks are a binary of their own (bulkhead-bench), so the product
//! binary does not carry plotting and load generation (see `sibling`).

use crate::args::{BenchArgs, Cli};
use bulkhead::error::Result;

pub fn exec(cli: &Cli, a: &BenchArgs) -> Result<i32> {
    super::sibling::exec(cli, "bulkhead-bench", true, &a.args)
}
