//! `bulkhead check`'s judgments: one verdict a monitor can alert on, from findings about
//! placement ([`placement`]: known database servers, helpers and monitoring agents against the
//! plan's slices; [`monitor`]: agents starved in an idle-class slice),
//! drift and directives without effect ([`drift`]: what `apply --dry-run` computes), and the
//! host as the database wants it ([`host`]: I/O scheduler or io.cost, swap, THP). Pure: the
//! front door (`actions::check`) reads the system and hands the facts in; [`verdict`] turns
//! the findings into one state and the summary line.

pub mod backends;
pub mod drift;
pub mod host;
pub mod monitor;
pub mod placement;
pub mod placer;
pub mod verdict;

use placement::Expected;
use verdict::{Area, Finding, Level, State};

/// Everything `check` found, with its verdict.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub state: State,
    /// 0 protected, 1 degraded, 2 not protected, 3 unknown.
    pub exit_code: i32,
    /// `bulkhead check: PROTECTED: ...`: the line a monitor shows.
    pub summary: String,
    /// The plan's source.
    pub plan: String,
    pub backend: String,
    pub findings: Vec<Finding>,
    /// Each kind of known process that runs, and where its processes are.
    pub placements: Vec<Expected>,
    /// The disks the database servers' working directories are on.
    pub disks: Vec<host::DataDisk>,
}

impl Report {
    /// Judge the findings. `slices`: how many planned slices were seen as planned.
    pub fn new(
        plan: String,
        backend: String,
        findings: Vec<Finding>,
        placements: Vec<Expected>,
        disks: Vec<host::DataDisk>,
    ) -> Report {
        let state = verdict::verdict(&findings);
        let placed: usize = placements.iter().map(|e| e.inside.len()).sum();
        // With the database stopped there is nothing to protect yet: said, not implied.
        let ok_line = if placed == 0 {
            "the plan is in force; no known database process runs now (its placement is checked once one starts)".to_string()
        } else {
            format!("the plan is in force, {placed} known database process(es) in their slices")
        };
        Report {
            state,
            exit_code: state.exit_code(),
            summary: verdict::summary(state, &findings, &ok_line),
            plan,
            backend,
            findings,
            placements,
            disks,
        }
    }

    /// Nothing could be judged: the plan or the cgroup layout cannot be read.
    pub fn cannot(plan: String, why: String, hint: Option<String>) -> Report {
        let mut f = Finding::new(Area::Access, Level::Unknown, why);
        f.hint = hint;
        Report::new(plan, String::new(), vec![f], vec![], vec![])
    }

    /// The worst level of each area, as the plugin codes (0 ok or nothing found, 1 warning,
    /// 2 critical, 3 unknown), every area once.
    pub fn by_area(&self) -> Vec<(Area, i32)> {
        Area::ALL
            .iter()
            .map(|a| {
                let worst = self
                    .findings
                    .iter()
                    .filter(|f| f.area == *a)
                    .map(|f| match f.level {
                        Level::Ok => 0,
                        Level::Warning => 1,
                        Level::Critical => 2,
                        Level::Unknown => 3,
                    })
                    .max_by_key(|c| match c {
                        2 => 3, // critical outranks unknown, as in the verdict
                        3 => 2,
                        c => *c,
                    })
                    .unwrap_or(0);
                (*a, worst)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_carries_the_verdict_and_each_area_its_worst() {
        let r = Report::new(
            "p".into(),
            "cgroupfs".into(),
            vec![
                Finding::new(Area::Drift, Level::Warning, "a"),
                Finding::new(Area::Placement, Level::Unknown, "b"),
                Finding::new(Area::Placement, Level::Critical, "c"),
                Finding::new(Area::Thp, Level::Ok, "d"),
            ],
            vec![],
            vec![],
        );
        assert_eq!(r.state, State::NotProtected);
        assert_eq!(r.exit_code, 2);
        let a = r.by_area();
        assert_eq!(a.len(), Area::ALL.len());
        assert!(a.contains(&(Area::Placement, 2)));
        assert!(a.contains(&(Area::Drift, 1)));
        assert!(a.contains(&(Area::Thp, 0)));
        let idle = Report::new("p".into(), "cgroupfs".into(), vec![], vec![], vec![]);
        assert_eq!(
            idle.summary,
            "bulkhead check: PROTECTED: the plan is in force; no known database process runs now (its placement is checked once one starts)"
        );
        let c = Report::cannot("p".into(), "no plan".into(), None);
        assert_eq!((c.state, c.exit_code), (State::Unknown, 3));
        assert_eq!(c.summary, "bulkhead check: UNKNOWN: no plan");
    }
}
