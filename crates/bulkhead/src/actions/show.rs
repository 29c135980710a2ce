//! `plan show`: the plan resolved for this host, or for another one (`--memory`, `--cpus`).

use super::Context;
use crate::hugepages::{Facts, Paths};
use bulkhead_plan::hugepages::Resolved as HugepagesResolved;
use bulkhead_plan::ResolvedPlan;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::Host;
use bulkhead_sys::units::{parse_size, IdSet};

/// The host to resolve for: this one, with RAM and CPUs overridden when given.
#[derive(Debug, Clone, Default)]
pub struct HostOverride {
    /// RAM, like `64G`.
    pub memory: Option<String>,
    pub cpus: Option<u32>,
}

impl HostOverride {
    pub fn host(&self) -> Result<Host> {
        let mut host = Host::detect();
        if let Some(m) = &self.memory {
            host.memory = parse_size(m, 1024)
                .map_err(|e| Error::invalid(Diagnostic::error(format!("--memory {m}: {e}"))))?;
        }
        if let Some(n) = self.cpus {
            // Bounded like a plan's CPU list: --cpus 4294967295 asked for 4 billion entries.
            if n == 0 || n > IdSet::MAX_ID + 1 {
                return Err(Error::invalid(Diagnostic::error(format!(
                    "--cpus {n}: give from 1 to {} CPUs",
                    IdSet::MAX_ID + 1
                ))));
            }
            host.cpus = IdSet((0..n).collect());
        }
        Ok(host)
    }
}

/// The resolved plan, and its `[hugepages]` section resolved for the same RAM.
pub fn plan_show(
    cx: &Context,
    over: &HostOverride,
) -> Result<(ResolvedPlan, Option<HugepagesResolved>)> {
    let plan = cx.load_plan()?;
    let mut host = over.host()?;
    host.look_up_devices(plan.device_paths());
    let resolved = plan.resolve(&host)?;
    let hp = match &resolved.plan.hugepages {
        None => None,
        Some(spec) => {
            let mut facts = Facts::read(&Paths::default());
            facts.memory = host.memory;
            Some(bulkhead_plan::hugepages::resolve(
                spec,
                &resolved.plan.source,
                &facts,
                true,
            )?)
        }
    };
    Ok((resolved, hp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_overrides_are_bounded() {
        let over = |memory: Option<&str>, cpus| HostOverride {
            memory: memory.map(str::to_string),
            cpus,
        };
        // Issue 14: 4 billion CPUs filled the memory; too large a size is refused.
        for o in [
            over(None, Some(0)),
            over(None, Some(u32::MAX)),
            over(Some("99999999999999999999E"), None),
        ] {
            let e = o.host().unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
        }
        assert_eq!(over(None, Some(65536)).host().unwrap().cpu_count(), 65536);
    }
}
