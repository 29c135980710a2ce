//! A slice of the resolved plan as the D-Bus properties of its transient unit, for one
//! systemd version, with a warning for each directive that version cannot take.

use super::props::{ids_to_bitmask, Prop, PropValue};
use super::versions::{knows, spelling, Spelling, Version, CPU_IDLE_SINCE};
use bulkhead_plan::convert::{io_weight_to_blkio, weight_to_shares};
use bulkhead_plan::{CpuWeight, ResolvedSlice};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::units::Limit;

fn trim_float(f: f64) -> String {
    let s = format!("{f:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn limit(l: Limit) -> u64 {
    l.bytes().unwrap_or(u64::MAX)
}

fn limit_text(l: Limit) -> String {
    match l {
        Limit::Bytes(0) => "0".into(),
        Limit::Bytes(b) => bulkhead_sys::units::human_bytes(b),
        Limit::Infinity => "infinity".into(),
    }
}

/// What a slice's transient unit gets: its properties for this systemd version, and a
/// warning for each directive systemd cannot take.
pub struct SliceProps {
    pub props: Vec<Prop>,
    pub warnings: Vec<Diagnostic>,
}

/// The D-Bus properties of one slice of the resolved plan, for systemd `version`.
pub fn slice_props(s: &ResolvedSlice, version: Version) -> SliceProps {
    let mut b = Builder {
        s,
        version,
        ctx: format!("[slice.{}]", s.name()),
        out: SliceProps {
            props: vec![],
            warnings: vec![],
        },
    };
    if let Some(d) = &s.description {
        b.push(Prop::new("Description", PropValue::Str(d.clone())).why("Description"));
    }
    b.accounting();
    b.cpu();
    b.cpuset();
    b.memory();
    b.io_weights();
    b.io_limits();
    b.io_latency();
    b.tasks();
    b.hugetlb();
    b.out
}

struct Builder<'a> {
    s: &'a ResolvedSlice,
    version: Version,
    ctx: String,
    out: SliceProps,
}

impl Builder<'_> {
    fn push(&mut self, p: Prop) {
        self.out.props.push(p);
    }

    fn warn(&mut self, d: Diagnostic) {
        self.out.warnings.push(d.context(self.ctx.clone()));
    }

    /// Push `value` as the directive's property for this version (its own, or the legacy
    /// one with `legacy_value`), or warn that this version cannot take it.
    fn set(
        &mut self,
        directive: &str,
        value: PropValue,
        legacy_value: impl FnOnce() -> PropValue,
        why: String,
    ) {
        self.set_as(directive, directive, value, legacy_value, why)
    }

    /// [`Self::set`] for a directive whose D-Bus property has another name.
    fn set_as(
        &mut self,
        directive: &str,
        property: &str,
        value: PropValue,
        legacy_value: impl FnOnce() -> PropValue,
        why: String,
    ) {
        match spelling(directive, self.version) {
            Spelling::Native => self.push(Prop::new(property, value).why(why)),
            Spelling::Legacy(old) => self.push(Prop::new(old, legacy_value()).why(why)),
            Spelling::Missing { since } => {
                let version = self.version;
                let came = since.map_or("systemd has no such directive".to_string(), |v| {
                    format!("it came in systemd {v}")
                });
                self.warn(
                    Diagnostic::warning(format!(
                        "{directive} is not applied: systemd {version} does not know it ({came})"
                    ))
                    .hint("upgrade systemd, or use --backend cgroupfs"),
                );
            }
        }
    }

    /// Accounting is always on in bulkhead (status reads it, and on v1 hosts it makes
    /// systemd create the slice in every controller's hierarchy).
    fn accounting(&mut self) {
        for a in ["CPUAccounting", "MemoryAccounting", "TasksAccounting"] {
            if knows(a, self.version) {
                self.push(Prop::new(a, PropValue::Bool(true)));
            }
        }
        let io = match spelling("IOAccounting", self.version) {
            Spelling::Legacy(old) => old,
            _ => "IOAccounting",
        };
        self.push(Prop::new(io, PropValue::Bool(true)));
    }

    fn cpu(&mut self) {
        let s = self.s;
        if let Some(w) = s.cpu_weight {
            let version = self.version;
            let (weight, text) = match w {
                CpuWeight::Weight(n) => (n, n.to_string()),
                CpuWeight::Idle if version >= CPU_IDLE_SINCE => (0, "idle".into()),
                CpuWeight::Idle => {
                    self.warn(Diagnostic::warning(format!(
                        "CPUWeight = \"idle\" becomes CPUWeight=1: systemd {version} has no idle scheduling (it came in systemd {CPU_IDLE_SINCE})"
                    )));
                    (1, "idle".into())
                }
            };
            self.set(
                "CPUWeight",
                PropValue::U64(weight),
                || PropValue::U64(weight_to_shares(weight.max(1))),
                format!("CPUWeight={text}"),
            );
        }
        if let Some(q) = s.cpu_max {
            let per_sec = q.quota_us * 1_000_000 / q.period_us;
            self.push(
                Prop::new("CPUQuotaPerSecUSec", PropValue::U64(per_sec)).why(format!(
                    "CPUQuota={}%",
                    trim_float(q.quota_us as f64 * 100.0 / q.period_us as f64)
                )),
            );
            if q.period_us != 100_000 {
                let v = PropValue::U64(q.period_us);
                self.set_as(
                    "CPUQuotaPeriodSec",
                    "CPUQuotaPeriodUSec",
                    v.clone(),
                    || v,
                    format!("CPUQuotaPeriodSec={}us", q.period_us),
                );
            }
        }
    }

    fn cpuset(&mut self) {
        for (d, ids) in [
            ("AllowedCPUs", &self.s.allowed_cpus),
            ("AllowedMemoryNodes", &self.s.allowed_mems),
        ] {
            if let Some(ids) = ids {
                let v = PropValue::Bytes(ids_to_bitmask(ids));
                self.set(d, v.clone(), || v, format!("{d}={ids}"));
            }
        }
    }

    fn memory(&mut self) {
        let s = self.s;
        for (d, l) in [
            ("MemoryMin", s.memory_min),
            ("MemoryLow", s.memory_low),
            ("MemoryHigh", s.memory_high),
            ("MemoryMax", s.memory_max),
            ("MemorySwapMax", s.memory_swap_max),
        ] {
            if let Some(l) = l {
                let v = PropValue::U64(limit(l));
                self.set(d, v.clone(), || v, format!("{d}={}", limit_text(l)));
            }
        }
    }

    /// The path the plan names for a device (systemd resolves it itself).
    fn path(&self, d: &bulkhead_sys::host::DevNum) -> String {
        self.s
            .device_paths
            .get(d)
            .cloned()
            .unwrap_or_else(|| format!("/dev/block/{d}"))
    }

    fn io_weights(&mut self) {
        let s = self.s;
        if let Some(w) = s.io_weight {
            self.set(
                "IOWeight",
                PropValue::U64(w),
                || PropValue::U64(io_weight_to_blkio(w)),
                format!("IOWeight={w}"),
            );
        }
        if s.io_device_weight.is_empty() {
            return;
        }
        let list: Vec<(String, u64)> = s
            .io_device_weight
            .iter()
            .map(|(d, w)| (self.path(d), *w))
            .collect();
        let why = list
            .iter()
            .map(|(p, w)| format!("IODeviceWeight={p} {w}"))
            .collect::<Vec<_>>()
            .join(", ");
        let legacy: Vec<(String, u64)> = list
            .iter()
            .map(|(p, w)| (p.clone(), io_weight_to_blkio(*w)))
            .collect();
        self.set(
            "IODeviceWeight",
            PropValue::DevU64(list),
            || PropValue::DevU64(legacy),
            why,
        );
    }

    fn io_limits(&mut self) {
        type Pick = fn(&bulkhead_plan::IoMax) -> Option<Limit>;
        let io: [(&str, Pick); 4] = [
            ("IOReadBandwidthMax", |m| m.rbps),
            ("IOWriteBandwidthMax", |m| m.wbps),
            ("IOReadIOPSMax", |m| m.riops),
            ("IOWriteIOPSMax", |m| m.wiops),
        ];
        for (d, pick) in io {
            let list: Vec<(String, u64)> = self
                .s
                .io_max
                .iter()
                .filter_map(|(dev, m)| pick(m).map(|l| (self.path(dev), limit(l))))
                .collect();
            if list.is_empty() {
                continue;
            }
            let why = list
                .iter()
                .map(|(p, n)| match *n {
                    u64::MAX => format!("{d}={p} infinity"),
                    n => format!("{d}={p} {n}"),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let v = PropValue::DevU64(list);
            self.set(d, v.clone(), || v, why);
        }
    }

    /// IODeviceLatencyTargetSec: the D-Bus property counts microseconds (`infinity` is
    /// u64::MAX, systemd's USEC_INFINITY).
    fn io_latency(&mut self) {
        if self.s.io_latency.is_empty() {
            return;
        }
        let list: Vec<(String, u64)> = self
            .s
            .io_latency
            .iter()
            .map(|(d, t)| (self.path(d), t.unwrap_or(u64::MAX)))
            .collect();
        let why = list
            .iter()
            .map(|(p, t)| match *t {
                u64::MAX => format!("IODeviceLatencyTargetSec={p} infinity"),
                t => format!("IODeviceLatencyTargetSec={p} {t}us"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let v = PropValue::DevU64(list);
        self.set_as(
            "IODeviceLatencyTargetSec",
            "IODeviceLatencyTargetUSec",
            v.clone(),
            || v,
            why,
        );
    }

    fn tasks(&mut self) {
        if let Some(t) = self.s.tasks_max {
            let v = PropValue::U64(limit(t));
            let text = t.bytes().map_or("infinity".into(), |n| n.to_string());
            self.set("TasksMax", v.clone(), || v, format!("TasksMax={text}"));
        }
    }

    fn hugetlb(&mut self) {
        if !self.s.hugetlb_max.is_empty() {
            self.warn(
                Diagnostic::warning(
                    "HugetlbMax is not applied: systemd has no directive for the hugetlb controller",
                )
                .hint("use --backend cgroupfs for huge page limits, or leave HugetlbMax out on systemd hosts"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systemd::versions::CURRENT;
    use bulkhead_plan::Plan;
    use bulkhead_sys::host::Host;
    use bulkhead_sys::units::IdSet;

    fn host() -> Host {
        let mut h = Host {
            memory: 16 << 30,
            cpus: IdSet((0..16).collect()),
            mem_nodes: IdSet([0].into_iter().collect()),
            hugepage_sizes: vec![2 << 20],
            tasks_max: 4_194_304,
            page_size: 4096,
            devices: Default::default(),
        };
        h.look_up_devices(["/", "/tmp"]);
        h
    }

    fn props(plan: &str, slice: &str, version: Version) -> SliceProps {
        let p = Plan::parse(plan, None).unwrap().resolve(&host()).unwrap();
        let s = p
            .slice(&bulkhead_plan::SliceName::parse(slice).unwrap())
            .unwrap();
        slice_props(s, version)
    }

    fn get<'a>(sp: &'a SliceProps, name: &str) -> Option<&'a PropValue> {
        sp.props.iter().find(|p| p.name == name).map(|p| &p.value)
    }

    #[test]
    fn directives_become_typed_properties() {
        let sp = props(
            r#"
[slice.db-helper]
Description = "helpers"
CPUWeight = 10
CPUQuota = "150%"
CPUQuotaPeriodSec = "50ms"
AllowedCPUs = "0-3,9"
MemoryHigh = { value = "4%", min = "1200M" }
MemoryMax = "2G"
MemorySwapMax = 0
IOWeight = 10
IODeviceWeight = "/ 200"
IOReadBandwidthMax = "/ 10M"
IODeviceLatencyTargetSec = ["/ 10ms", "/tmp infinity"]
TasksMax = "infinity"
"#,
            "db-helper",
            CURRENT,
        );
        assert_eq!(
            get(&sp, "Description"),
            Some(&PropValue::Str("helpers".into()))
        );
        assert_eq!(get(&sp, "CPUWeight"), Some(&PropValue::U64(10)));
        // 150% of one CPU: 1.5 s of CPU time per second, in µs.
        assert_eq!(
            get(&sp, "CPUQuotaPerSecUSec"),
            Some(&PropValue::U64(1_500_000))
        );
        assert_eq!(
            get(&sp, "CPUQuotaPeriodUSec"),
            Some(&PropValue::U64(50_000))
        );
        // CPUs 0-3 and 9: bits 0..3 of byte 0, bit 1 of byte 1.
        assert_eq!(
            get(&sp, "AllowedCPUs"),
            Some(&PropValue::Bytes(vec![0x0f, 0x02]))
        );
        // 4% of 16G = 655M, raised to the 1200M floor.
        assert_eq!(get(&sp, "MemoryHigh"), Some(&PropValue::U64(1200 << 20)));
        assert_eq!(get(&sp, "MemoryMax"), Some(&PropValue::U64(2 << 30)));
        assert_eq!(get(&sp, "MemorySwapMax"), Some(&PropValue::U64(0)));
        assert_eq!(get(&sp, "IOWeight"), Some(&PropValue::U64(10)));
        // Device directives keep the plan's path: systemd resolves it itself.
        assert_eq!(
            get(&sp, "IODeviceWeight"),
            Some(&PropValue::DevU64(vec![("/".into(), 200)]))
        );
        assert_eq!(
            get(&sp, "IOReadBandwidthMax"),
            Some(&PropValue::DevU64(vec![("/".into(), 10_000_000)]))
        );
        // io.latency targets in microseconds, infinity as systemd's USEC_INFINITY; "/" and
        // "/tmp" share a disk here, so the later entry is the one left (named by the path the
        // plan last gave for that disk).
        assert_eq!(
            get(&sp, "IODeviceLatencyTargetUSec"),
            Some(&PropValue::DevU64(vec![("/".into(), u64::MAX)]))
        );
        assert_eq!(get(&sp, "TasksMax"), Some(&PropValue::U64(u64::MAX)));
        assert_eq!(get(&sp, "MemoryAccounting"), Some(&PropValue::Bool(true)));
        assert!(sp.warnings.is_empty(), "{:?}", sp.warnings);
        let line = sp
            .props
            .iter()
            .find(|p| p.name == "MemoryMax")
            .unwrap()
            .to_string();
        assert_eq!(line, "t MemoryMax = 2147483648  # MemoryMax=2G");
    }

    #[test]
    fn old_systemd_gets_legacy_properties_and_warnings() {
        let sp = props(
            "[slice.a]\nCPUWeight = 10\nIOWeight = 10\nMemoryMax = \"1G\"\nMemoryHigh = \"900M\"\nAllowedCPUs = \"0\"\nHugetlbMax = { \"2M\" = \"8M\" }\nIODeviceLatencyTargetSec = \"/ 10ms\"\n",
            "a",
            219,
        );
        assert_eq!(get(&sp, "CPUShares"), Some(&PropValue::U64(102)));
        assert_eq!(get(&sp, "BlockIOWeight"), Some(&PropValue::U64(50)));
        assert_eq!(get(&sp, "MemoryLimit"), Some(&PropValue::U64(1 << 30)));
        assert_eq!(get(&sp, "BlockIOAccounting"), Some(&PropValue::Bool(true)));
        assert!(get(&sp, "CPUWeight").is_none() && get(&sp, "MemoryHigh").is_none());
        let w: Vec<String> = sp.warnings.iter().map(|d| d.message.clone()).collect();
        assert!(
            w.iter()
                .any(|m| m.starts_with("MemoryHigh is not applied: systemd 219")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|m| m.starts_with("AllowedCPUs is not applied")),
            "{w:?}"
        );
        assert!(
            w.iter().any(|m| m.starts_with("HugetlbMax is not applied")),
            "{w:?}"
        );
        assert!(
            w.iter().any(|m| m
                == "IODeviceLatencyTargetSec is not applied: systemd 219 does not know it (it came in systemd 240)"),
            "{w:?}"
        );
        assert!(get(&sp, "IODeviceLatencyTargetUSec").is_none());
    }

    #[test]
    fn idle_weight() {
        let sp = props("[slice.a]\nCPUWeight = \"idle\"\n", "a", CURRENT);
        assert_eq!(get(&sp, "CPUWeight"), Some(&PropValue::U64(0)));
        let sp = props("[slice.a]\nCPUWeight = \"idle\"\n", "a", 245);
        assert_eq!(get(&sp, "CPUWeight"), Some(&PropValue::U64(1)));
        assert_eq!(sp.warnings.len(), 1);
    }
}
