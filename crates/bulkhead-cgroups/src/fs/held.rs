//! What the kernel holds for each planned directive: the same mapping `apply` plans with
//! (directive -> control file and value), read back instead of compared, for `status`.

use super::apply::{host_ctx, inherited_cpuset, map_slice};
use super::map::Want;
use super::CgroupFs;
use bulkhead_plan::{ResolvedPlan, ResolvedSlice};
use bulkhead_sys::error::{Diagnostic, Severity};
use std::fs;

/// One slice's planned directives as the kernel holds them, and the directives this host
/// does not apply (the mapping's warnings: no BFQ, memory.high on v1, a sched_ext scheduler).
#[derive(Debug, Clone, serde::Serialize)]
pub struct HeldSlice {
    pub slice: String,
    pub held: Vec<Held>,
    pub unapplied: Vec<Diagnostic>,
}

/// One planned directive of a slice, beside what its control file holds now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Held {
    /// As the plan has it: `CPUWeight=1000`, `MemoryMax=1073741824`.
    pub directive: String,
    /// The control file, in its hierarchy: `cpu/cpu.shares`, `unified/memory.max`.
    pub file: String,
    /// What the plan maps it to in that file.
    pub planned: String,
    /// What the file holds now (None: the slice or the file is not there, or unreadable).
    pub kernel: Option<String>,
}

impl Held {
    /// The file holds the planned value (numbers compared as written by the kernel).
    pub fn matches(&self) -> bool {
        self.kernel
            .as_deref()
            .is_some_and(|k| k.split_whitespace().eq(self.planned.split_whitespace()))
    }
}

impl CgroupFs {
    /// For each slice of the plan, its planned directives and what the kernel holds for
    /// them, in every hierarchy the slice's controllers are in, and what this host does not
    /// apply. Defaults the plan did not ask for are left out.
    pub fn held(&self, plan: &ResolvedPlan) -> Vec<HeldSlice> {
        let hs = self.hierarchies(
            plan.slices.iter().any(ResolvedSlice::uses_cpuset),
            plan.slices.iter().any(|s| !s.hugetlb_max.is_empty()),
        );
        let host = host_ctx(&self.layout, plan);
        let root_sets = self.root_cpusets(plan);
        let mut out = Vec::new();
        for s in &plan.slices {
            let mut held = Vec::new();
            let mut unapplied: Vec<Diagnostic> = Vec::new();
            for (h, ctrls) in &hs {
                let dir = self.dir(h, s.name());
                let inherited = inherited_cpuset(plan, s, &root_sets);
                let m = map_slice(plan, &host, s, &inherited, (h, ctrls));
                for w in m.warnings {
                    if w.severity == Severity::Warning
                        && !unapplied.iter().any(|u| u.message == w.message)
                    {
                        unapplied.push(w);
                    }
                }
                let hier = h
                    .mount
                    .file_name()
                    .map_or_else(String::new, |n| format!("{}/", n.to_string_lossy()));
                for w in m.wants.into_iter().filter(Want::planned) {
                    let (file, planned, why) = match w {
                        Want::Value {
                            file, value, why, ..
                        } => (file, value, why),
                        Want::Lines {
                            file, lines, why, ..
                        } => {
                            let v: Vec<String> =
                                lines.iter().map(|(k, v)| format!("{k} {v}")).collect();
                            (file, v.join("; "), why)
                        }
                    };
                    let kernel = fs::read_to_string(dir.join(&file))
                        .ok()
                        .map(|t| t.trim().lines().collect::<Vec<_>>().join("; "));
                    held.push(Held {
                        directive: why,
                        file: format!("{hier}{file}"),
                        planned,
                        kernel,
                    });
                }
            }
            out.push(HeldSlice {
                slice: s.name().to_string(),
                held,
                unapplied,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(planned: &str, kernel: Option<&str>) -> Held {
        Held {
            directive: "CPUWeight=1000".into(),
            file: "cpu/cpu.shares".into(),
            planned: planned.into(),
            kernel: kernel.map(String::from),
        }
    }

    #[test]
    fn a_value_matches_token_by_token() {
        assert!(held("10240", Some("10240")).matches());
        assert!(held("max 100000", Some("max  100000")).matches());
        assert!(!held("10240", Some("5000")).matches());
        assert!(!held("10240", None).matches());
    }
}
