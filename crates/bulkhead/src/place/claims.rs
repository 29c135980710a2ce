//! The processes each of the plan's placements claims now, for `check`: a service's (by its
//! unit, or its pidfile's process tree) and a rule's (every process it matches). One
//! streaming walk of /proc ([`scan`]): each process is read once, judged, and kept only when a
//! placement claims it or the caller wants it (a known server or helper), so memory follows
//! what is judged, not the host's size; and the walk stops at a deadline (issue 40 #4: 20,000
//! processes of another user must not time out a scrape or exhaust the exporter's memory).

use super::identity::unit_of;
use super::rules::{first_match, Compiled};
use bulkhead_plan::{Plan, SliceName};
use bulkhead_sys::procs::{self, Proc};
use std::time::Instant;

/// (what: `service NAME` or `rule NAME`, its slice, the PIDs it claims).
pub(crate) type Claimed = (String, SliceName, Vec<u32>);

/// One walk of /proc as `check` needs it.
pub(crate) struct Scan {
    /// The processes claimed or wanted, without their command lines.
    pub procs: Vec<Proc>,
    pub claims: Vec<Claimed>,
    /// Processes read.
    pub read: usize,
    /// More than [`procs::MAX_PROCS`]: the rest were not listed.
    pub truncated: bool,
    /// The deadline came first: the processes after `read` were not judged.
    pub incomplete: bool,
    /// Services whose pidfile could not be used: (`service NAME`, the pidfile, why). Their
    /// claim is unknown, not empty.
    pub unread: Vec<(String, String, String)>,
}

/// Walk /proc once until `deadline`: the claims of `plan` (its services and `rules`), and
/// every process `want` keeps.
pub(crate) fn scan(
    plan: &Plan,
    rules: &[Compiled],
    want: &dyn Fn(&Proc) -> bool,
    deadline: Instant,
) -> Scan {
    let services = bulkhead_plan::services::with_pidfiles(plan);
    let (pids, truncated) = procs::pids();
    let mut claims: Vec<Claimed> = services
        .iter()
        .map(|(svc, slice)| (format!("service {}", svc.name), slice.clone(), Vec::new()))
        .chain(rules.iter().map(|c| {
            (
                format!("rule {}", c.rule.name),
                c.rule.slice.clone(),
                Vec::new(),
            )
        }))
        .collect();
    let mut out = Scan {
        procs: Vec::new(),
        claims: Vec::new(),
        read: 0,
        truncated,
        incomplete: false,
        unread: Vec::new(),
    };
    for pid in pids {
        if Instant::now() >= deadline {
            out.incomplete = true;
            break;
        }
        let Some(mut p) = procs::read(pid) else {
            continue;
        };
        out.read += 1;
        let mut claimed = false;
        let unit = unit_of(&p.cgroup);
        for (i, (svc, _)) in services.iter().enumerate() {
            if unit.as_deref() == Some(svc.name.as_str()) {
                claims[i].2.push(p.pid as u32);
                claimed = true;
            }
        }
        let needs_parent = rules.iter().any(|c| !c.rule.parent.is_empty());
        let parent = needs_parent.then(|| procs::read(p.ppid)).flatten();
        for (j, c) in rules.iter().enumerate() {
            if first_match(std::slice::from_ref(c), &p, parent.as_ref()).is_some() {
                claims[services.len() + j].2.push(p.pid as u32);
                claimed = true;
            }
        }
        if claimed || want(&p) {
            // What is kept is judged by its name and cgroup: not its command line.
            p.cmdline = String::new();
            out.procs.push(p);
        }
    }
    // A pidfile's service claims its main process's tree.
    for (i, (svc, _)) in services.iter().enumerate() {
        let Some(file) = svc.pidfile.as_deref() else {
            continue;
        };
        let pf = match procs::read_pidfile(std::path::Path::new(file)) {
            Ok(Some(pf)) => pf,
            Ok(None) => continue,
            Err(why) => {
                out.unread
                    .push((format!("service {}", svc.name), file.to_string(), why));
                continue;
            }
        };
        let tree = std::iter::once(pf.pid).chain(super::tree::descendants_now(pf.pid));
        for q in tree {
            let Ok(u) = u32::try_from(q) else { continue };
            if !out.procs.iter().any(|p| p.pid == q) {
                match procs::read(q) {
                    Some(mut p) => {
                        p.cmdline = String::new();
                        out.procs.push(p);
                    }
                    None => continue,
                }
            }
            claims[i].2.push(u);
        }
    }
    for c in &mut claims {
        c.2.sort_unstable();
        c.2.dedup();
    }
    leave_to_rules(&mut claims, services.len());
    out.claims = claims;
    out
}

/// A process a rule claims is the rule's, not its service's (issue 41): the backend of a
/// dump that a rule moves to db-helper is still in the postmaster's tree, but the rule is
/// the plan's explicit exception, as on systemd, where the moved backend leaves the unit's
/// cgroup. `claims` holds the `services` services' claims first, then the rules'.
fn leave_to_rules(claims: &mut [Claimed], services: usize) {
    let (svcs, rules) = claims.split_at_mut(services.min(claims.len()));
    let by_rules: std::collections::HashSet<u32> =
        rules.iter().flat_map(|c| c.2.iter().copied()).collect();
    for c in svcs {
        c.2.retain(|pid| !by_rules.contains(pid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(n: &str) -> SliceName {
        SliceName::parse(n).unwrap()
    }

    #[test]
    fn a_process_a_rule_claims_leaves_its_services_claim() {
        let mut claims = vec![
            (
                "service postgresql".to_string(),
                slice("db-server"),
                vec![100, 101, 102],
            ),
            (
                "rule backup-backends".to_string(),
                slice("db-helper"),
                vec![102],
            ),
        ];
        leave_to_rules(&mut claims, 1);
        assert_eq!(claims[0].2, vec![100, 101]);
        assert_eq!(claims[1].2, vec![102]);
    }
}
