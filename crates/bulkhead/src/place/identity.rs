//! Who a process is, by what the kernel vouches for (issue 40), not by what its owner can
//! choose: the systemd unit the system's manager put it in, the slice it is in, and the file
//! its executable is. Placement rules, pidfiles and `check` decide with these.

use bulkhead_plan::place::{PlaceRule, Program};
use bulkhead_plan::SliceName;
use std::path::PathBuf;
use std::sync::OnceLock;

fn is_unit(c: &str) -> bool {
    c.ends_with(".service") || c.ends_with(".scope")
}

/// The cgroup path of the hierarchy systemd's units are read from: `name=systemd` (v1 and
/// hybrid hosts under systemd), else the cgroup2 one.
fn unit_path(proc_cgroup: &str) -> Option<(&str, bool)> {
    let pick = |want: &dyn Fn(&str) -> bool| {
        proc_cgroup.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let _ = it.next()?;
            let ctrls = it.next()?;
            let path = it.next()?;
            want(ctrls).then_some(path)
        })
    };
    pick(&|c| c == "name=systemd")
        .map(|p| (p, false))
        .or_else(|| pick(&str::is_empty).map(|p| (p, true)))
}

/// The unit as the system's manager placed the process, from the path alone: the first
/// `.service` or `.scope` from the root, reached through `.slice` components only (the
/// structure systemd makes). Below a unit its subtree may be delegated (a user's
/// `user@UID.service`, a container's scope), and what the delegate names there is its own
/// choice: `systemd-run --user --unit=postgresql@15-main.service` makes
/// `.../user@1000.service/app.slice/postgresql@15-main.service`, whose unit is
/// `user@1000.service`, as systemd's GetUnitByPID says. Returns the unit and the path to
/// its cgroup, and whether the path was the cgroup2 one.
pub(crate) fn unit_in(proc_cgroup: &str) -> Option<(String, String, bool)> {
    let (path, v2) = unit_path(proc_cgroup)?;
    let mut at = String::new();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        at.push('/');
        at.push_str(c);
        if is_unit(c) {
            return Some((c.to_string(), at, v2));
        }
        if !c.ends_with(".slice") {
            return None;
        }
    }
    None
}

/// What unit names can be trusted on this host: systemd as PID 1 (it alone makes units'
/// cgroups outside delegated subtrees), and the cgroup2 mount (for the owner check
/// without it).
struct Host {
    systemd: bool,
    unified: Option<PathBuf>,
}

fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| Host {
        systemd: bulkhead_sys::host::pid1_is_systemd(),
        unified: bulkhead_cgroups::Layout::detect()
            .ok()
            .and_then(|l| l.unified.map(|u| u.mount)),
    })
}

/// The systemd unit a process runs in, only where its owner could not have chosen it
/// ([`unit_in`]). Without systemd as PID 1 nothing makes units, so a unit counts only
/// under `/system.slice`, read from the cgroup2 path, with its cgroup owned by root (a
/// user may own a delegated cgroup and name anything below it).
pub(crate) fn unit_of(proc_cgroup: &str) -> Option<String> {
    let (unit, path, v2) = unit_in(proc_cgroup)?;
    let h = host();
    if h.systemd {
        return Some(unit);
    }
    if !v2 || !path.starts_with("/system.slice/") {
        return None;
    }
    let dir = h.unified.as_ref()?.join(path.trim_start_matches('/'));
    let hp = bulkhead_sys::hostpath::HostPath::open(&dir).ok()?;
    (hp.is_dir() && hp.stat().st_uid == 0).then_some(unit)
}

/// Whether a /proc/PID/cgroup text puts the process in the slice: its unit is a component
/// of the path in some hierarchy (the slice itself, or a scope in it), above any other
/// unit (below a unit, names are the delegate's choice: a user's own `db-server.slice`
/// inside `user@1000.service` is not the slice).
pub(crate) fn in_slice(proc_cgroup: &str, slice: &SliceName) -> bool {
    let unit = slice.unit();
    proc_cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|path| {
            for c in path.split('/') {
                if c == unit {
                    return true;
                }
                if is_unit(c) {
                    return false;
                }
            }
            false
        })
}

/// An `exe` or `parent` pattern as this host resolves it: a literal absolute path is the
/// file it names, opened once by the host-path rule (no symlink another user owns) and
/// known by its device and inode; any other pattern is matched by name.
pub(crate) fn program_on_host(pattern: &str) -> Program {
    if !PlaceRule::literal_path(pattern) {
        return Program::Pattern;
    }
    match bulkhead_sys::hostpath::HostPath::open(std::path::Path::new(pattern)) {
        Ok(h) if h.is_file() => Program::File((h.stat().st_dev, h.stat().st_ino)),
        _ => Program::Missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_and_units_from_proc_cgroup() {
        let s = SliceName::parse("db-helper").unwrap();
        assert!(in_slice("4:cpu:/db.slice/db-helper.slice\n", &s));
        assert!(in_slice("0::/db.slice/db-helper.slice/run-x.scope\n", &s));
        assert!(in_slice(
            "0::/bulkhead-test-1-0/db.slice/db-helper.slice\n",
            &s
        ));
        assert!(!in_slice("0::/db.slice/db-server.slice\n", &s));
        assert!(!in_slice("0::/db.slice/db-helper.slice-x\n", &s));
        let cg = "1:name=systemd:/system.slice/postgresql@15-main.service\n0::/x/y.scope\n";
        assert_eq!(
            unit_in(cg).map(|u| u.0).as_deref(),
            Some("postgresql@15-main.service")
        );
        assert_eq!(
            unit_in("0::/user.slice/session-1.scope\n")
                .map(|u| u.0)
                .as_deref(),
            Some("session-1.scope")
        );
        assert_eq!(unit_in("0::/\n"), None);
    }

    /// Issue 40 #1: a user's own manager names a unit inside its delegated subtree.
    #[test]
    fn a_name_inside_a_delegated_unit_is_not_the_unit() {
        let cg = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/postgresql@15-main.service\n";
        assert_eq!(
            unit_in(cg).map(|u| u.0).as_deref(),
            Some("user@1000.service")
        );
        // A cgroup outside systemd's structure (a delegated directory) names no unit.
        assert_eq!(unit_in("0::/delegated/postgresql@15-main.service\n"), None);
        // Nor is a user's own db-server.slice below its unit the slice.
        let s = SliceName::parse("db-server").unwrap();
        let mine = "0::/user.slice/user-1000.slice/user@1000.service/db.slice/db-server.slice\n";
        assert!(!in_slice(mine, &s));
    }

    #[test]
    fn literal_paths_are_files() {
        assert_eq!(program_on_host("pg_dump"), Program::Pattern);
        assert_eq!(program_on_host("/usr/lib/*/pg_dump"), Program::Pattern);
        assert!(matches!(program_on_host("/bin/sh"), Program::File(_)));
        assert_eq!(program_on_host("/nonexistent/bulkhead/x"), Program::Missing);
    }
}
