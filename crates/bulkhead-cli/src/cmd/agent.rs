//! `agent ...` and `nri ...`: the Kubernetes node agent is a binary of its own (bulkhead-agent), so the
//! product binary does not carry a Kubernetes client (see `sibling`).

use crate::args::{AgentArgs, Cli};
use bulkhead::error::Result;

pub fn exec(cli: &Cli, a: &AgentArgs) -> Result<i32> {
    super::sibling::exec(cli, "bulkhead-agent", false, &a.args)
}

/// `nri ...` is `bulkhead-agent nri ...`.
pub fn nri(cli: &Cli, a: &AgentArgs) -> Result<i32> {
    let mut args = vec![std::ffi::OsString::from("nri")];
    args.extend(a.args.iter().cloned());
    super::sibling::exec(cli, "bulkhead-agent", false, &args)
}
