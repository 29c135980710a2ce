//! The cgroupfs backend: bulkhead writes the control files itself, on pure v2, pure v1 and
//! hybrid layouts. A plan becomes [`Op`]s (plain data) through the directive mapping in
//! [`map`], planned against what the files hold now (`planner`); [`op::execute`] carries
//! them out and undoes them in reverse order when one fails. Only cgroups that carry
//! bulkhead's [`mark`] are ever changed or removed.

mod apply;
mod cell;
mod destroy;
pub mod foreign;
mod held;
pub mod map;
pub mod mark;
pub mod op;
mod place;
mod planner;
mod throttle;

pub use cell::{FreezeCell, Gathered};
pub use held::{Held, HeldSlice};
pub use op::{remove_trees, Op};
pub use place::original_path;

use crate::backend::{ApplyOptions, Backend, Changes, Outcome};
use crate::layout::{self, Hierarchy, Layout};
use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The cgroupfs backend: writes control files directly.
#[derive(Debug, Clone)]
pub struct CgroupFs {
    pub layout: Layout,
    /// The cgroup under which slices live, relative to each hierarchy's root ("" for /).
    pub root: PathBuf,
}

impl CgroupFs {
    /// `root` is a cgroup path like `/` or `/bulkhead-test.slice`.
    pub fn new(layout: Layout, root: &str) -> Result<CgroupFs> {
        let rel = root.trim_start_matches('/');
        if rel.split('/').any(|p| p == ".." || p == ".") {
            return Err(Error::invalid(
                Diagnostic::error(format!("cgroup root '{root}' must not contain '.' or '..'"))
                    .hint("give an absolute cgroup path like /bulkhead.slice"),
            ));
        }
        if layout.primary().is_none() {
            return Err(Error::failed_with(
                Diagnostic::error("no cgroup hierarchy is mounted (nothing of type cgroup or cgroup2 in /proc/self/mountinfo)")
                    .hint("mount cgroup2 on /sys/fs/cgroup: mount -t cgroup2 none /sys/fs/cgroup"),
            ));
        }
        Ok(CgroupFs {
            layout,
            root: PathBuf::from(rel),
        })
    }

    /// Every hierarchy bulkhead places slices in, with the controllers it drives there.
    pub fn hierarchies(
        &self,
        uses_cpuset: bool,
        uses_hugetlb: bool,
    ) -> Vec<(&Hierarchy, Vec<&'static str>)> {
        let wanted = |c: &str| match c {
            "cpuset" => uses_cpuset,
            "hugetlb" => uses_hugetlb,
            _ => true,
        };
        let mut out = Vec::new();
        for h in &self.layout.v1 {
            let ctrls: Vec<&'static str> = layout::CONTROLLERS
                .iter()
                .copied()
                .filter(|c| {
                    wanted(c) && self.layout.hierarchy(c).is_some_and(|x| x.mount == h.mount)
                })
                .collect();
            // cpuacct has nothing to write but gives CPU time on v1; the v1 freezer lets the
            // guard freeze a slice where there is no unified hierarchy (cgroup.freeze).
            let freezer = h.has("freezer") && self.layout.unified.is_none();
            if !ctrls.is_empty() || h.has("cpuacct") || freezer {
                out.push((h, ctrls));
            }
        }
        if let Some(u) = &self.layout.unified {
            let ctrls = layout::CONTROLLERS
                .iter()
                .copied()
                .filter(|c| {
                    wanted(c)
                        && u.has(c)
                        && self.layout.hierarchy(c).is_some_and(|x| x.mount == u.mount)
                })
                .collect();
            out.push((u, ctrls));
        }
        out
    }

    /// All hierarchies a slice may exist in.
    pub(super) fn all_hierarchies(&self) -> Vec<&Hierarchy> {
        self.layout
            .v1
            .iter()
            .chain(self.layout.unified.iter())
            .collect()
    }

    pub fn dir(&self, h: &Hierarchy, name: &SliceName) -> PathBuf {
        h.mount.join(&self.root).join(name.cgroup_path())
    }

    /// The slice's directory in the hierarchy that holds `controller`, if it exists.
    pub fn dir_for(&self, controller: &str, name: &SliceName) -> Option<PathBuf> {
        let h = self.layout.hierarchy(controller)?;
        let d = self.dir(h, name);
        d.is_dir().then_some(d)
    }

    /// The slice's directories that exist and carry bulkhead's mark.
    pub fn existing_dirs(&self, name: &SliceName) -> Vec<(&Hierarchy, PathBuf)> {
        self.all_hierarchies()
            .into_iter()
            .map(|h| (h, self.dir(h, name)))
            .filter(|(_, d)| d.is_dir() && mark::is_ours(d))
            .collect()
    }

    /// The `cgroup.procs` files of a slice in every hierarchy it exists in (for a child that
    /// joins the slice before it execs).
    pub fn procs_files(&self, name: &SliceName) -> Vec<PathBuf> {
        self.existing_dirs(name)
            .into_iter()
            .map(|(_, d)| d.join("cgroup.procs"))
            .collect()
    }

    /// Every process in the slice and the cgroups below it (read from the primary hierarchy).
    pub fn pids(&self, name: &SliceName) -> Vec<i32> {
        self.layout
            .primary()
            .map(|h| bulkhead_sys::cgroupfs::procs_tree(&self.dir(h, name)))
            .unwrap_or_default()
    }

    /// Slices bulkhead created that exist now, parents first (and those that may be, for a
    /// reader that cannot see the marks: [`mark::unverified`]).
    pub fn slices_on_system(&self) -> Vec<SliceName> {
        let Some(p) = self.layout.primary() else {
            return vec![];
        };
        let mut out = Vec::new();
        fn walk(dir: &Path, out: &mut Vec<SliceName>) {
            let Ok(rd) = fs::read_dir(dir) else { return };
            let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let n = e.file_name().to_string_lossy().into_owned();
                let path = e.path();
                if let Some(stem) = n.strip_suffix(".slice") {
                    // The entry's type from the directory read (d_type): no stat per slice.
                    let dir = e.file_type().is_ok_and(|t| t.is_dir());
                    if dir && mark::may_be_ours(&path) {
                        if let Ok(name) = SliceName::parse(stem) {
                            out.push(name);
                            walk(&path, out);
                        }
                    }
                }
            }
        }
        walk(&p.mount.join(&self.root), &mut out);
        out.sort_by(|a, b| (a.depth(), a.as_str()).cmp(&(b.depth(), b.as_str())));
        out
    }
}

impl Backend for CgroupFs {
    type Op = Op;

    fn describe(&self) -> String {
        format!(
            "cgroupfs backend, {}, slices under {}",
            self.layout.describe(),
            Path::new("/").join(&self.root).display()
        )
    }

    fn plan_apply(&self, plan: &ResolvedPlan, how: ApplyOptions) -> Result<Changes<Op>> {
        if how.persist {
            return Err(Error::invalid(
                Diagnostic::error("--persist needs the systemd backend (unit files are systemd's)")
                    .hint("on a host without systemd, apply again at boot (a boot script or unit), or write unit files with bulkhead export systemd"),
            ));
        }
        let mut c = self.plan_apply_fs(plan)?;
        c.warnings.extend(unattached_services(plan));
        Ok(c)
    }

    fn plan_destroy(&self, slices: &[SliceName], kill: bool) -> Result<Changes<Op>> {
        self.plan_destroy_fs(slices, kill)
    }

    fn execute(&self, changes: &Changes<Op>) -> Result<Outcome> {
        op::execute(&changes.ops.iter().collect::<Vec<_>>())
    }
}

/// Services the plan names are systemd units: without systemd, nothing attaches them; one
/// with a pidfile is placed by `bulkhead place`.
fn unattached_services(plan: &ResolvedPlan) -> Vec<Diagnostic> {
    bulkhead_plan::services::with_pidfiles(&plan.plan)
        .into_iter()
        .map(|(service, slice)| {
            let name = &service.name;
            let ctx = format!("[slice.{slice}] services");
            match &service.pidfile {
                Some(pidfile) => Diagnostic::note(format!(
                    "{name} is placed by `bulkhead place` (this host is driven without systemd): the process {pidfile} names, with its descendants"
                ))
                .context(ctx)
                .hint("run `bulkhead place` as a service, or `bulkhead place --once` after the service starts"),
                None => Diagnostic::warning(format!(
                    "{name} is not placed: services are attached with systemd's Slice=, and this host is driven without systemd (cgroupfs backend)"
                ))
                .context(ctx)
                .hint(format!(
                    "give its pidfile (services = [{{ name = \"{name}\", pidfile = \"/path\" }}]) for `bulkhead place`, or place its processes with `bulkhead move --tree --slice {slice} MAIN_PID` after each start, or with a [place.NAME] rule"
                )),
            }
        })
        .collect()
}
