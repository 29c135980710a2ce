//! `apply` through systemd with transient units: StartTransientUnit for new slices,
//! SetUnitProperties for the differences on slices bulkhead made before.

use super::call::Call;
use super::props::{self, Prop};
use super::{free, Systemd};
use crate::backend::{left_over_note, Changes, Placement};
use crate::layout::Version as CgVersion;
use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::{Diagnostic, Error, Result};

impl Systemd {
    /// Warnings for directives systemd records but the host's cgroup layout cannot enforce.
    pub(super) fn layout_warnings(&self, plan: &ResolvedPlan) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        let mem_v1 = self
            .reader
            .layout
            .hierarchy("memory")
            .is_some_and(|h| h.version == CgVersion::V1);
        let cpuset_v1 = self
            .reader
            .layout
            .hierarchy("cpuset")
            .is_none_or(|h| h.version == CgVersion::V1);
        let io_v1 = self
            .reader
            .layout
            .hierarchy("io")
            .is_none_or(|h| h.version == CgVersion::V1);
        let caps = self.reader.layout.caps();
        let latency =
            plan.slices.iter().any(|s| !s.io_latency.is_empty()) && !io_v1 && !caps.io_latency;
        for s in &plan.slices {
            let ctx = format!("[slice.{}]", s.name());
            // systemd records an I/O weight whatever the disks' schedulers: said as the
            // cgroupfs backend says it.
            if s.io_weight.is_some() {
                out.extend(caps.weight_finding("IOWeight", s.name()));
            }
            if !s.io_device_weight.is_empty() {
                out.extend(caps.weight_finding("IODeviceWeight", s.name()));
            }
            for (d, set) in [
                ("MemoryMin", s.memory_min.is_some()),
                ("MemoryLow", s.memory_low.is_some()),
                ("MemoryHigh", s.memory_high.is_some()),
                ("MemorySwapMax", s.memory_swap_max.is_some()),
            ] {
                if set && mem_v1 {
                    out.push(
                        Diagnostic::warning(format!(
                            "{d} is recorded but not enforced: systemd applies it only when the memory controller is on cgroup v2, and here it is on v1"
                        ))
                        .context(ctx.clone()),
                    );
                }
            }
            if !s.io_latency.is_empty() && io_v1 {
                out.push(
                    Diagnostic::warning(
                        "IODeviceLatencyTargetSec is recorded but has no effect: io.latency is a cgroup v2 controller, and here the I/O controller (blkio) is on cgroup v1",
                    )
                    .context(ctx.clone())
                    .hint("on v1 and hybrid hosts, cap the other slices with IOReadBandwidthMax/IOWriteBandwidthMax instead"),
                );
            }
            if !s.io_latency.is_empty() && latency {
                out.push(
                    Diagnostic::warning(
                        "IODeviceLatencyTargetSec is recorded but has no effect: this kernel has no io.latency (built without CONFIG_BLK_CGROUP_IOLATENCY, as Debian 12's is)",
                    )
                    .context(ctx.clone())
                    .hint("use io.cost ([iocost]) with IOWeight, or IO*BandwidthMax on the other slices"),
                );
            }
            if s.uses_cpuset() && cpuset_v1 {
                out.push(
                    Diagnostic::warning(
                        "AllowedCPUs/AllowedMemoryNodes are recorded but not enforced: systemd drives cpuset only on cgroup v2",
                    )
                    .context(ctx),
                );
            }
        }
        out
    }

    /// What a transient apply does.
    pub(super) fn plan_transient(&self, plan: &ResolvedPlan) -> Result<Changes<Call>> {
        let version = self.version();
        let mut warnings = self.layout_warnings(plan);
        let mut errors = Vec::new();
        let mut ops = Vec::new();
        for s in &plan.slices {
            let sp = super::slice_props::slice_props(s, version);
            warnings.extend(sp.warnings);
            match self.transient_call(s.name(), sp.props) {
                Ok(Some(call)) => ops.push(call),
                Ok(None) => {}
                Err(e) => errors.extend(e.diagnostics()),
            }
        }
        match self.attach_calls(&plan.plan, true) {
            Ok(calls) if !calls.is_empty() => {
                ops.extend(calls);
                ops.push(Call::Reload);
            }
            Ok(_) => {}
            Err(e) => errors.extend(e.diagnostics()),
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        warnings.extend(self.left_over(plan));
        warnings.extend(self.restart_notes(&plan.plan));
        let mut c = Changes::new(
            ops,
            plan.slices.iter().map(|s| s.name().to_string()).collect(),
        );
        c.warnings = warnings;
        Ok(c)
    }

    /// The call that makes one slice's transient unit hold `wanted`: a new unit, the
    /// differences, or nothing. Units bulkhead did not make are refused.
    fn transient_call(&self, name: &SliceName, wanted: Vec<Prop>) -> Result<Option<Call>> {
        let unit = name.unit();
        let Some(st) = self.bus.unit_state(&unit)? else {
            return Ok(Some(Call::StartTransientUnit {
                unit,
                properties: wanted,
            }));
        };
        if self.is_transient_ours(&unit, &st) {
            let (set, restore) = self.differences(&unit, &wanted)?;
            return Ok((!set.is_empty()).then_some(Call::SetUnitProperties {
                unit,
                properties: set,
                restore,
            }));
        }
        if self.is_persisted_ours(&unit) {
            return Err(Error::invalid(
                Diagnostic::error(format!(
                    "slice '{name}' was made persistent by an earlier `apply --persist` ({})",
                    self.persisted_path(&unit).display()
                ))
                .hint(format!("apply with --persist again, or remove it first: bulkhead destroy --slice {name}")),
            ));
        }
        if free(&st) {
            return Ok(Some(Call::StartTransientUnit {
                unit,
                properties: wanted,
            }));
        }
        Err(Error::invalid(self.foreign(name, &st, "adopt")))
    }

    /// Notes for slices of an earlier apply that the plan no longer has.
    pub(super) fn left_over(&self, plan: &ResolvedPlan) -> Vec<Diagnostic> {
        self.slices()
            .iter()
            .filter(|s| plan.slice(s).is_none())
            .map(left_over_note)
            .collect()
    }

    /// The properties that differ from what systemd has now, and their current values.
    /// Properties the plan no longer sets go back to systemd's default, where systemd reports
    /// them.
    fn differences(&self, unit: &str, wanted: &[Prop]) -> Result<(Vec<Prop>, Vec<Prop>)> {
        let current = self.bus.unit_properties(unit)?;
        let removed: Vec<Prop> = props::managed(self.version())
            .into_iter()
            .filter(|(name, _, _)| !wanted.iter().any(|p| p.name == *name))
            .map(|(name, directive, default)| {
                Prop::new(name, default).why(format!("{directive} (removed from the plan)"))
            })
            .collect();
        let plan_props = wanted.iter().map(|p| (p, true));
        Ok(props::differences(
            &current,
            plan_props.chain(removed.iter().map(|p| (p, false))),
        ))
    }
}
