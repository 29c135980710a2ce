//! A [`Throttle`] through systemd: runtime unit properties (SetUnitProperties with
//! runtime=true: CPUQuota, CPUQuotaPeriodSec, CPUWeight=idle, IO*BandwidthMax), which systemd
//! keeps across daemon-reload, and FreezeUnit/ThawUnit. Planned against the unit's properties
//! as systemd reports them, so calling it again only re-asserts what someone else changed.
//! Where systemd cannot freeze (its freezer needs the unified hierarchy), the slice's
//! cgroup.freeze is written directly, as systemd does not manage it there.

use super::call::Call;
use super::props::{self, Prop, PropValue};
use super::slice_props::slice_props;
use super::Systemd;
use crate::throttle::Throttle;
use bulkhead_plan::ResolvedSlice;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::DevNum;

/// FreezeUnit and ThawUnit.
pub const FREEZE_SINCE: u32 = 246;

/// The properties a throttle may change.
const PROPS: &[&str] = &[
    "CPUWeight",
    "CPUQuotaPerSecUSec",
    "CPUQuotaPeriodUSec",
    "IOReadBandwidthMax",
    "IOWriteBandwidthMax",
];

impl Systemd {
    /// The calls that give the slice `t` on top of its plan; with [`Throttle::none`], the
    /// calls that put the plan's values back.
    pub fn plan_throttle(
        &self,
        plan: &ResolvedSlice,
        t: &Throttle,
        disks: &[DevNum],
    ) -> Result<Vec<Call>> {
        let s = t.overlay(plan, disks);
        let unit = s.name().unit();
        if self.bus.unit_state(&unit)?.is_none() {
            return Err(Error::invalid(
                Diagnostic::error(format!("{unit} is not loaded in systemd"))
                    .hint("create the plan's slices first: bulkhead apply"),
            ));
        }
        let current = self.bus.unit_properties(&unit)?;
        let wanted = self.wanted(&s, &current);
        // A property systemd does not report is left alone: the throttle only tightens
        // what systemd holds.
        let (set, restore) = props::differences(&current, wanted.iter().map(|p| (p, false)));
        let mut calls = Vec::new();
        if !set.is_empty() {
            calls.push(Call::SetUnitProperties {
                unit: unit.clone(),
                properties: set,
                restore,
            });
        }
        if self.can_freeze() {
            let frozen = self.freezer_state(&unit).is_some_and(|st| st != "running");
            if t.frozen && !frozen {
                calls.push(Call::FreezeUnit { unit });
            } else if !t.frozen && frozen {
                calls.push(Call::ThawUnit { unit });
            }
        }
        Ok(calls)
    }

    /// Whether systemd freezes units here: FreezeUnit came in systemd 246 and works only
    /// when every controller is on the unified hierarchy.
    pub fn can_freeze(&self) -> bool {
        self.version() >= FREEZE_SINCE && self.reader.layout.kind == crate::layout::Kind::Unified
    }

    /// Whether a slice can be given idle scheduling here: the kernel's cpu.idle (Linux 5.15)
    /// and CPUWeight=idle (systemd 250).
    pub fn can_idle(&self) -> bool {
        self.reader.can_idle() && self.version() >= super::versions::CPU_IDLE_SINCE
    }

    /// The throttle's properties for the overlaid slice, with systemd's "unset" value for
    /// those the slice leaves open, and `infinity` for disks systemd holds a limit for that
    /// the slice no longer has.
    fn wanted(
        &self,
        s: &ResolvedSlice,
        current: &std::collections::HashMap<String, zbus::zvariant::OwnedValue>,
    ) -> Vec<Prop> {
        let version = self.version();
        let mut wanted: Vec<Prop> = slice_props(s, version)
            .props
            .into_iter()
            .filter(|p| PROPS.contains(&p.name.as_str()))
            .collect();
        for (name, directive, unset) in props::managed(version) {
            if !PROPS.contains(&name) || wanted.iter().any(|p| p.name == name) {
                continue;
            }
            wanted.push(Prop::new(name, unset).why(format!("{directive} (as planned: unset)")));
        }
        for p in &mut wanted {
            let PropValue::DevU64(list) = &mut p.value else {
                continue;
            };
            let held = current
                .get(&p.name)
                .and_then(|v| props::from_dbus(v, &PropValue::DevU64(vec![])));
            if let Some(PropValue::DevU64(held)) = held {
                for (path, _) in held {
                    if !list.iter().any(|(q, _)| *q == path) {
                        list.push((path, u64::MAX));
                    }
                }
            }
        }
        wanted
    }

    /// The unit's FreezerState (`running`, `frozen`, `freezing`, `thawing`), where systemd
    /// has one (246+).
    fn freezer_state(&self, unit: &str) -> Option<String> {
        let v = self
            .bus
            .unit_property(unit, "org.freedesktop.systemd1.Unit", "FreezerState")
            .ok()??;
        <&str>::try_from(&*v).ok().map(String::from)
    }
}
