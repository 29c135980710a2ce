//! A [`Throttle`] on cgroupfs: the CPU quota, idle and I/O limit files of the throttled
//! slice as the directive mapping writes them for the overlaid slice, and the freezer
//! (cgroup.freeze on the unified hierarchy, which hybrid hosts have too; freezer.state on
//! v1). Planned against the files as they are, so calling it again only re-asserts what
//! someone else changed.

use super::map::{Cmp, Mapper, Want};
use super::planner::Planner;
use super::{mark, op::Op, CgroupFs};
use crate::layout::Version;
use crate::throttle::Throttle;
use bulkhead_plan::ResolvedSlice;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::DevNum;

/// The control files a throttle may change; the mapping's other wants are left to `apply`.
/// The weight files are here because leaving idle (cpu.idle=0) makes the kernel reset the
/// group's weight to the default: a release writes the plan's weight back after it.
const FILES: &[&str] = &[
    "cpu.weight",
    "cpu.shares",
    "cpu.max",
    "cpu.cfs_period_us",
    "cpu.cfs_quota_us",
    "cpu.idle",
    "io.max",
    "blkio.throttle.read_bps_device",
    "blkio.throttle.write_bps_device",
];

fn file_of(w: &Want) -> &str {
    match w {
        Want::Value { file, .. } | Want::Lines { file, .. } => file,
    }
}

impl CgroupFs {
    /// Whether a slice can be given idle scheduling here (cpu.idle, Linux 5.15).
    pub fn can_idle(&self) -> bool {
        self.layout.caps().cpu_idle
    }

    /// The writes that give the slice `t` on top of its plan (`plan`); with
    /// [`Throttle::none`], the writes that put the plan's values back.
    pub fn plan_throttle(
        &self,
        plan: &ResolvedSlice,
        t: &Throttle,
        disks: &[DevNum],
    ) -> Result<Vec<Op>> {
        let s = t.overlay(plan, disks);
        let caps = self.layout.caps();
        let mut p = Planner::default();
        for ctrl in ["cpu", "io"] {
            let Some(h) = self.layout.hierarchy(ctrl) else {
                continue;
            };
            let dir = self.dir(h, s.name());
            self.check_ours(&dir, s.name().as_str())?;
            let mut m = Mapper {
                slice: &s,
                caps: &caps,
                inherited_cpuset: Default::default(),
                swappiness: 60,
                page_sizes: vec![],
                wants: vec![],
                warnings: vec![],
            };
            m.map(ctrl, h.version);
            for w in m.wants.into_iter().filter(|w| FILES.contains(&file_of(w))) {
                p.want(&dir, w);
            }
        }
        if !p.errors.is_empty() {
            return Err(Error::Invalid(p.errors));
        }
        let mut ops = p.ops;
        ops.extend(self.plan_freeze(s.name(), t.frozen, true)?);
        Ok(ops)
    }

    /// The write that freezes or thaws a slice, if its freezer holds otherwise. `owned`:
    /// bulkhead created the cgroup (the systemd backend's slices are systemd's).
    pub fn plan_freeze(
        &self,
        name: &bulkhead_plan::SliceName,
        frozen: bool,
        owned: bool,
    ) -> Result<Vec<Op>> {
        let Some((dir, file, on, off)) = self.freezer(name) else {
            return Ok(vec![]);
        };
        if owned {
            self.check_ours(&dir, name.as_str())?;
        }
        let (value, why) = if frozen {
            (on, "guard: frozen")
        } else {
            (off, "guard: thawed")
        };
        let mut p = Planner::default();
        p.want(
            &dir,
            Want::Value {
                file: file.into(),
                value: value.into(),
                why: why.into(),
                cmp: Cmp::Exact,
                optional: !frozen,
                before: None,
            },
        );
        Ok(p.ops)
    }

    /// Where a slice is frozen: the unified hierarchy's cgroup.freeze (Linux 5.2+), else the
    /// v1 freezer. (directory, file, frozen value, thawed value)
    pub fn freezer(
        &self,
        name: &bulkhead_plan::SliceName,
    ) -> Option<(std::path::PathBuf, &'static str, &'static str, &'static str)> {
        if let Some(u) = &self.layout.unified {
            let d = self.dir(u, name);
            if d.join("cgroup.freeze").exists() {
                return Some((d, "cgroup.freeze", "1", "0"));
            }
        }
        let h = self
            .layout
            .v1
            .iter()
            .find(|h| h.version == Version::V1 && h.has("freezer"))?;
        Some((self.dir(h, name), "freezer.state", "FROZEN", "THAWED"))
    }

    pub(super) fn check_ours(&self, dir: &std::path::Path, name: &str) -> Result<()> {
        if dir.is_dir() && mark::is_ours(dir) {
            return Ok(());
        }
        Err(Error::invalid(
            Diagnostic::error(format!(
                "slice '{name}' does not exist here, or was not created by bulkhead"
            ))
            .at(dir.display().to_string())
            .hint("create the plan's slices first: bulkhead apply"),
        ))
    }
}
