//! Drift and directives without effect, from what `apply --dry-run` computes (the one source:
//! the changes apply would make, and its warnings). Pure: it takes the plan's parts as data.

use super::verdict::{Area, Finding, Level};
use bulkhead_cgroups::fs::Held;
use bulkhead_sys::error::{Diagnostic, Severity};

/// What `apply --dry-run` found, as `check` needs it.
#[derive(Debug, Default)]
pub struct Planned {
    /// The plan's slices that do not exist (or are not bulkhead's).
    pub missing: Vec<String>,
    /// Every slice change apply would make, as `--dry-run` prints it (creating the missing
    /// slices' cgroups is said by `missing`, not here).
    pub changes: Vec<String>,
    /// Huge page pool, THP and mount changes apply would make.
    pub hugepages: Vec<String>,
    /// io.cost lines apply would write or put back.
    pub iocost: Vec<String>,
    /// The plan's notes and what this host cannot honour.
    pub notes: Vec<Diagnostic>,
}

/// At most this many changes are listed one by one.
const LISTED: usize = 8;

fn listed(area: Area, what: &str, ops: &[String], hint: &str) -> Vec<Finding> {
    let mut out: Vec<Finding> = ops
        .iter()
        .take(LISTED)
        .map(|op| Finding::new(area, Level::Warning, format!("{what}: {op}")).hint(hint))
        .collect();
    if ops.len() > LISTED {
        out.push(
            Finding::new(
                area,
                Level::Warning,
                format!("{what}: {} more change(s)", ops.len() - LISTED),
            )
            .hint("bulkhead apply --dry-run lists them all"),
        );
    }
    out
}

/// A missing slice is critical (nothing it plans is in force); a changed directive, pool or
/// io.cost line is drift (a warning); a warning of the plan or the host is a directive
/// without effect here.
pub fn findings(p: &Planned) -> Vec<Finding> {
    let mut out: Vec<Finding> = p
        .missing
        .iter()
        .map(|s| {
            Finding::new(
                Area::Slices,
                Level::Critical,
                format!("slice '{s}' is in the plan but does not exist"),
            )
            .hint("bulkhead apply")
        })
        .collect();
    let fix = "bulkhead apply puts it back (bulkhead apply --dry-run shows it)";
    out.extend(listed(
        Area::Drift,
        "differs from the plan",
        &p.changes,
        fix,
    ));
    out.extend(listed(
        Area::Hugepages,
        "huge pages not as planned",
        &p.hugepages,
        fix,
    ));
    out.extend(listed(
        Area::Hugepages,
        "io.cost not as planned",
        &p.iocost,
        fix,
    ));
    for d in p.notes.iter().filter(|d| d.severity == Severity::Warning) {
        let mut f = Finding::new(Area::NoEffect, Level::Warning, located(d));
        f.hint = d.hint.clone();
        out.push(f);
    }
    let as_planned = p.missing.is_empty()
        && p.changes.is_empty()
        && p.hugepages.is_empty()
        && p.iocost.is_empty();
    if as_planned {
        out.push(Finding::new(
            Area::Drift,
            Level::Ok,
            "every planned slice exists and matches the plan",
        ));
    }
    out
}

/// `/etc/bulkhead/bulkhead.toml:12:1: [slice.db-helper]: message`, as the diagnostic
/// prints itself (without its severity and hint).
fn located(d: &Diagnostic) -> String {
    let mut s = String::new();
    for part in [&d.location, &d.context].into_iter().flatten() {
        s.push_str(part);
        s.push_str(": ");
    }
    s + &d.message
}

/// Planned directives whose control file is not there in a slice that exists (status's
/// `(missing)`): the kernel holds nothing for them, whatever the backend recorded (e.g.
/// systemd in a container whose v1 hierarchies are read-only creates the slice on cgroup2
/// only). `held`: each existing slice's directives as `CgroupFs::held` reads them.
pub fn unenforced(held: &[(String, Vec<Held>)]) -> Vec<Finding> {
    held.iter()
        .flat_map(|(slice, ds)| {
            ds.iter().filter(|d| d.kernel.is_none()).map(move |d| {
                Finding::new(
                    Area::NoEffect,
                    Level::Warning,
                    format!(
                        "[slice.{slice}]: {} is not in force: the slice has no {} file",
                        d.directive, d.file
                    ),
                )
                .hint("bulkhead status shows what the kernel holds; the slice's cgroup is missing in that hierarchy (a read-only or undelegated controller) or the kernel lacks the file")
            })
        })
        .collect()
}

/// `apply` could not even plan (a slice bulkhead did not create, a plan this host refuses):
/// nothing of the plan can be assumed in force.
pub fn refused(diags: &[Diagnostic]) -> Vec<Finding> {
    diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| {
            let mut f = Finding::new(
                Area::Slices,
                Level::Critical,
                format!("apply refuses the plan: {}", located(d)),
            );
            f.hint = d.hint.clone();
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_that_matches_is_one_ok_finding() {
        let f = findings(&Planned::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].level, Level::Ok);
    }

    #[test]
    fn missing_slices_are_critical_changes_are_drift_and_warnings_have_no_effect() {
        let p = Planned {
            missing: vec!["db-server".into()],
            changes: (0..10).map(|i| format!("write f{i}")).collect(),
            hugepages: vec!["pool 2M: 0 -> 64 pages".into()],
            iocost: vec![],
            notes: vec![
                Diagnostic::warning("IOWeight has no effect here").hint("use bfq"),
                Diagnostic::note("just a note"),
            ],
        };
        let f = findings(&p);
        assert_eq!(f[0].area, Area::Slices);
        assert_eq!(f[0].level, Level::Critical);
        let drift: Vec<&Finding> = f.iter().filter(|x| x.area == Area::Drift).collect();
        assert_eq!(drift.len(), LISTED + 1, "listed, then the rest counted");
        assert!(drift[LISTED].message.contains("2 more change(s)"));
        assert_eq!(f.iter().filter(|x| x.area == Area::Hugepages).count(), 1);
        let none: Vec<&Finding> = f.iter().filter(|x| x.area == Area::NoEffect).collect();
        assert_eq!(none.len(), 1);
        assert_eq!(none[0].hint.as_deref(), Some("use bfq"));
    }

    #[test]
    fn no_drift_is_said_beside_directives_without_effect() {
        let p = Planned {
            notes: vec![Diagnostic::warning(
                "MemoryHigh is recorded but not enforced",
            )],
            ..Default::default()
        };
        let f = findings(&p);
        let got: Vec<(Area, Level)> = f.iter().map(|x| (x.area, x.level)).collect();
        assert_eq!(
            got,
            [(Area::NoEffect, Level::Warning), (Area::Drift, Level::Ok)]
        );
    }

    #[test]
    fn a_planned_file_that_is_not_there_is_not_in_force() {
        let held = |kernel: Option<&str>| Held {
            directive: "CPUWeight=1000".into(),
            file: "cpu/cpu.shares".into(),
            planned: "10240".into(),
            kernel: kernel.map(String::from),
        };
        let f = unenforced(&[("db-server".into(), vec![held(Some("10240")), held(None)])]);
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].message,
            "[slice.db-server]: CPUWeight=1000 is not in force: the slice has no cpu/cpu.shares file"
        );
    }

    #[test]
    fn a_refusal_is_critical_with_the_reason() {
        let d = Diagnostic::error(
            "slice 'db' exists but was not created by bulkhead; refusing to adopt it",
        )
        .hint("rename the slice");
        let d = Diagnostic {
            location: Some("/sys/fs/cgroup/cpu/db.slice".into()),
            ..d
        };
        let f = refused(&[d]);
        assert_eq!(
            f[0].message,
            "apply refuses the plan: /sys/fs/cgroup/cpu/db.slice: slice 'db' exists but was not created by bulkhead; refusing to adopt it"
        );
        assert_eq!(f[0].level, Level::Critical);
        assert!(f[0].message.contains("not created by bulkhead"));
    }
}
