//! The processes each of the plan's placements claims now, for `check`: a service's (by its
//! unit's cgroup, or its pidfile's process tree) and a rule's (every process it matches).

use super::rules::{unit_of, Compiled};

use bulkhead_plan::{Plan, SliceName};
use bulkhead_sys::procs;

/// (what: `service NAME` or `rule NAME`, its slice, the PIDs it claims).
pub(crate) type Claimed = (String, SliceName, Vec<u32>);

/// The claims of `plan` among `pids` (a scan of /proc). `rules` are the plan's rules with
/// their users resolved.
pub(crate) fn claims(plan: &Plan, rules: &[Compiled], pids: &[u32]) -> Vec<Claimed> {
    let read: Vec<procs::Proc> = pids
        .iter()
        .filter_map(|&p| procs::read(i32::try_from(p).ok()?))
        .collect();
    let mut out = Vec::new();
    for (svc, slice) in bulkhead_plan::services::with_pidfiles(plan) {
        let mut mine: Vec<u32> = read
            .iter()
            .filter(|p| unit_of(&p.cgroup).as_deref() == Some(svc.name.as_str()))
            .map(|p| p.pid as u32)
            .collect();
        if let Some(Ok(Some((pid, _)))) = svc
            .pidfile
            .as_deref()
            .map(|f| procs::read_pidfile(std::path::Path::new(f)))
        {
            let tree = std::iter::once(pid).chain(super::tree::descendants_now(pid));
            mine.extend(tree.filter_map(|p| u32::try_from(p).ok()));
        }
        mine.sort_unstable();
        mine.dedup();
        out.push((format!("service {}", svc.name), slice, mine));
    }
    for c in rules {
        let one = std::slice::from_ref(c);
        let mine = read
            .iter()
            .filter(|p| super::rules::first_match(one, p, procs::read(p.ppid).as_ref()).is_some())
            .map(|p| p.pid as u32)
            .collect();
        out.push((format!("rule {}", c.rule.name), c.rule.slice.clone(), mine));
    }
    out
}
