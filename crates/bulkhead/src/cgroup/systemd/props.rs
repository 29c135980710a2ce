//! Plan directives -> systemd unit properties, as plain data: the D-Bus name and type of each
//! property, the versions of systemd that know it, and what older versions take instead.
//!
//! The same table drives the transient units of `apply` (D-Bus properties) and the unit files
//! of `export systemd` and `apply --persist` (directive lines), so both say the same thing.

use bulkhead_plan::{CpuWeight, ResolvedSlice};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::units::{IdSet, Limit};
use std::fmt;

/// A D-Bus property value, typed as systemd's API takes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "type", content = "value")]
pub enum PropValue {
    #[serde(rename = "t")]
    U64(u64),
    #[serde(rename = "b")]
    Bool(bool),
    #[serde(rename = "s")]
    Str(String),
    #[serde(rename = "as")]
    Strs(Vec<String>),
    #[serde(rename = "ay")]
    Bytes(Vec<u8>),
    /// (device path, value) pairs: IODeviceWeight, IOReadBandwidthMax, ...
    #[serde(rename = "a(st)")]
    DevU64(Vec<(String, u64)>),
    #[serde(rename = "au")]
    Pids(Vec<u32>),
    /// ExecStart: (path, argv, ignore failure)
    #[serde(rename = "a(sasb)")]
    Exec(Vec<(String, Vec<String>, bool)>),
    /// A file descriptor of bulkhead's, passed along with the call.
    #[serde(rename = "h")]
    Fd(i32),
}

impl PropValue {
    /// The D-Bus type signature.
    pub fn signature(&self) -> &'static str {
        match self {
            PropValue::U64(_) => "t",
            PropValue::Bool(_) => "b",
            PropValue::Str(_) => "s",
            PropValue::Strs(_) => "as",
            PropValue::Bytes(_) => "ay",
            PropValue::DevU64(_) => "a(st)",
            PropValue::Pids(_) => "au",
            PropValue::Exec(_) => "a(sasb)",
            PropValue::Fd(_) => "h",
        }
    }
}

impl fmt::Display for PropValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PropValue::U64(u64::MAX) => f.write_str("18446744073709551615 (infinity)"),
            PropValue::U64(n) => write!(f, "{n}"),
            PropValue::Bool(b) => write!(f, "{b}"),
            PropValue::Str(s) => write!(f, "{s:?}"),
            PropValue::Strs(v) => write!(f, "{v:?}"),
            PropValue::Bytes(b) => write!(
                f,
                "[{}] (CPUs/nodes {})",
                b.iter()
                    .map(|x| format!("0x{x:02x}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                bitmask_to_ids(b)
            ),
            PropValue::DevU64(v) => {
                let items: Vec<String> = v.iter().map(|(d, n)| format!("({d:?}, {n})")).collect();
                write!(f, "[{}]", items.join(", "))
            }
            PropValue::Pids(v) => write!(f, "{v:?}"),
            PropValue::Exec(v) => {
                let items: Vec<String> = v
                    .iter()
                    .map(|(p, a, i)| format!("({p:?}, {a:?}, {i})"))
                    .collect();
                write!(f, "[{}]", items.join(", "))
            }
            PropValue::Fd(n) => write!(f, "fd {n}"),
        }
    }
}

/// One property of a unit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Prop {
    pub name: String,
    pub value: PropValue,
    /// The plan directive it carries out, e.g. `MemoryMax=1400M`; empty for bookkeeping.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub directive: String,
}

impl Prop {
    pub fn new(name: &str, value: PropValue) -> Prop {
        Prop {
            name: name.into(),
            value,
            directive: String::new(),
        }
    }
    pub fn why(mut self, directive: impl Into<String>) -> Prop {
        self.directive = directive.into();
        self
    }
}

impl fmt::Display for Prop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} = {}",
            self.value.signature(),
            self.name,
            self.value
        )?;
        if !self.directive.is_empty() {
            write!(f, "  # {}", self.directive)?;
        }
        Ok(())
    }
}

/// A version of systemd (the number before the first dot of `systemctl --version`).
pub type Version = u32;

/// The version assumed when none is given: one that knows every directive bulkhead writes.
pub const CURRENT: Version = 252;

/// What systemd versions know a plan directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    /// The first version that takes the directive.
    pub since: Version,
    /// The deprecated cgroup-v1 directive older versions take instead.
    pub legacy: Option<&'static str>,
}

/// The first systemd version for each directive (systemd.resource-control(5)), and the
/// directive versions before it understand. `None`: systemd has no such directive.
pub fn support(directive: &str) -> Option<Support> {
    let s = |since, legacy| Some(Support { since, legacy });
    match directive {
        "Description" => s(1, None),
        "CPUWeight" => s(232, Some("CPUShares")),
        "CPUQuota" => s(213, None),
        "CPUQuotaPeriodSec" => s(242, None),
        "AllowedCPUs" | "AllowedMemoryNodes" => s(244, None),
        "MemoryMin" => s(240, None),
        "MemoryLow" | "MemoryHigh" => s(231, None),
        "MemoryMax" => s(231, Some("MemoryLimit")),
        "MemorySwapMax" => s(232, None),
        "IOWeight" => s(230, Some("BlockIOWeight")),
        "IODeviceWeight" => s(230, Some("BlockIODeviceWeight")),
        "IOReadBandwidthMax" => s(230, Some("BlockIOReadBandwidth")),
        "IOWriteBandwidthMax" => s(230, Some("BlockIOWriteBandwidth")),
        "IOReadIOPSMax" | "IOWriteIOPSMax" => s(230, None),
        "TasksMax" | "TasksAccounting" => s(227, None),
        "CPUAccounting" | "MemoryAccounting" | "BlockIOAccounting" => s(208, None),
        "IOAccounting" => s(230, Some("BlockIOAccounting")),
        _ => None,
    }
}

/// `CPUWeight=idle` (cpu.idle) came later than CPUWeight itself.
pub const CPU_IDLE_SINCE: Version = 250;
/// Percentages of RAM in memory directives and of the task limit in TasksMax.
pub const PERCENT_SINCE: Version = 231;
/// AttachProcessesToUnit, which `move` uses.
pub const ATTACH_SINCE: Version = 238;
/// AddRef= and Type=exec, which `run` uses to wait for a transient service and read its status.
pub const RUN_SERVICE_SINCE: Version = 240;
/// CollectMode=, so failed transient units are not left behind.
pub const COLLECT_MODE_SINCE: Version = 236;

/// CPUWeight -> CPUShares for systemd before 232, rounded up so that `import` (which takes
/// shares * 100 / 1024) gives the same weight back.
pub fn weight_to_shares(w: u64) -> u64 {
    (w * 1024).div_ceil(100).clamp(2, 262_144)
}

/// IOWeight -> BlockIOWeight (systemd's own mapping, 10..1000).
pub fn weight_to_blkio(w: u64) -> u64 {
    (w * 500 / 100).clamp(10, 1000)
}

/// systemd's CPU and NUMA node bitmask (`ay`): bit `i % 8` of byte `i / 8` is CPU `i`.
pub fn ids_to_bitmask(ids: &IdSet) -> Vec<u8> {
    let Some(max) = ids.0.iter().max() else {
        return vec![];
    };
    let mut out = vec![0u8; *max as usize / 8 + 1];
    for &i in &ids.0 {
        out[i as usize / 8] |= 1 << (i % 8);
    }
    out
}

pub fn bitmask_to_ids(b: &[u8]) -> IdSet {
    let mut ids = IdSet::default();
    for (byte, v) in b.iter().enumerate() {
        for bit in 0..8 {
            if v & (1 << bit) != 0 {
                ids.0.insert(byte as u32 * 8 + bit);
            }
        }
    }
    ids
}

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

/// The properties bulkhead manages on a slice, with the value that means "not set" (what a
/// directive removed from the plan is reset to). Only properties this version knows.
pub fn managed(version: Version) -> Vec<(&'static str, &'static str, PropValue)> {
    // (property, directive, default)
    let all: [(&str, &str, PropValue); 17] = [
        ("CPUWeight", "CPUWeight", PropValue::U64(u64::MAX)),
        ("CPUQuotaPerSecUSec", "CPUQuota", PropValue::U64(u64::MAX)),
        (
            "CPUQuotaPeriodUSec",
            "CPUQuotaPeriodSec",
            PropValue::U64(u64::MAX),
        ),
        ("AllowedCPUs", "AllowedCPUs", PropValue::Bytes(vec![])),
        (
            "AllowedMemoryNodes",
            "AllowedMemoryNodes",
            PropValue::Bytes(vec![]),
        ),
        ("MemoryMin", "MemoryMin", PropValue::U64(0)),
        ("MemoryLow", "MemoryLow", PropValue::U64(0)),
        ("MemoryHigh", "MemoryHigh", PropValue::U64(u64::MAX)),
        ("MemoryMax", "MemoryMax", PropValue::U64(u64::MAX)),
        ("MemorySwapMax", "MemorySwapMax", PropValue::U64(u64::MAX)),
        ("IOWeight", "IOWeight", PropValue::U64(u64::MAX)),
        (
            "IODeviceWeight",
            "IODeviceWeight",
            PropValue::DevU64(vec![]),
        ),
        (
            "IOReadBandwidthMax",
            "IOReadBandwidthMax",
            PropValue::DevU64(vec![]),
        ),
        (
            "IOWriteBandwidthMax",
            "IOWriteBandwidthMax",
            PropValue::DevU64(vec![]),
        ),
        ("IOReadIOPSMax", "IOReadIOPSMax", PropValue::DevU64(vec![])),
        (
            "IOWriteIOPSMax",
            "IOWriteIOPSMax",
            PropValue::DevU64(vec![]),
        ),
        ("TasksMax", "TasksMax", PropValue::U64(u64::MAX)),
    ];
    all.into_iter()
        .filter(|(_, d, _)| support(d).is_some_and(|s| s.since <= version))
        .collect()
}

/// What a slice's transient unit gets: its properties for this systemd version, and a
/// warning for each directive systemd cannot take.
pub struct SliceProps {
    pub props: Vec<Prop>,
    pub warnings: Vec<Diagnostic>,
}

/// The D-Bus properties of one slice of the resolved plan, for systemd `version`.
pub fn slice_props(s: &ResolvedSlice, version: Version) -> SliceProps {
    let mut props = Vec::new();
    let mut warnings = Vec::new();
    let ctx = format!("[slice.{}]", s.name());
    let too_old = |directive: &str, since: Version, warnings: &mut Vec<Diagnostic>| {
        warnings.push(
            Diagnostic::warning(format!(
                "{directive} is not applied: systemd {version} does not know it (it came in systemd {since})"
            ))
            .context(ctx.clone())
            .hint("upgrade systemd, or use --backend cgroupfs"),
        );
    };
    let knows = |d: &str| support(d).is_some_and(|x| x.since <= version);
    let legacy = |d: &str| support(d).and_then(|x| x.legacy);
    let since = |d: &str| support(d).map_or(0, |x| x.since);

    if let Some(d) = &s.description {
        props.push(Prop::new("Description", PropValue::Str(d.clone())).why("Description"));
    }
    // Accounting is always on in bulkhead (status reads it, and on v1 hosts it makes systemd
    // create the slice in every controller's hierarchy).
    for a in ["CPUAccounting", "MemoryAccounting", "TasksAccounting"] {
        if knows(a) {
            props.push(Prop::new(a, PropValue::Bool(true)));
        }
    }
    props.push(Prop::new(
        if knows("IOAccounting") {
            "IOAccounting"
        } else {
            "BlockIOAccounting"
        },
        PropValue::Bool(true),
    ));

    if let Some(w) = s.cpu_weight {
        let (weight, text) = match w {
            CpuWeight::Weight(n) => (n, n.to_string()),
            CpuWeight::Idle if version >= CPU_IDLE_SINCE => (0, "idle".into()),
            CpuWeight::Idle => {
                warnings.push(
                    Diagnostic::warning(format!(
                        "CPUWeight = \"idle\" becomes CPUWeight=1: systemd {version} has no idle scheduling (it came in systemd {CPU_IDLE_SINCE})"
                    ))
                    .context(ctx.clone()),
                );
                (1, "idle".into())
            }
        };
        if knows("CPUWeight") {
            props.push(
                Prop::new("CPUWeight", PropValue::U64(weight)).why(format!("CPUWeight={text}")),
            );
        } else {
            props.push(
                Prop::new("CPUShares", PropValue::U64(weight_to_shares(weight.max(1))))
                    .why(format!("CPUWeight={text}")),
            );
        }
    }
    if let Some(q) = s.cpu_max {
        let per_sec = q.quota_us * 1_000_000 / q.period_us;
        props.push(
            Prop::new("CPUQuotaPerSecUSec", PropValue::U64(per_sec)).why(format!(
                "CPUQuota={}%",
                trim_float(q.quota_us as f64 * 100.0 / q.period_us as f64)
            )),
        );
        if q.period_us != 100_000 {
            if knows("CPUQuotaPeriodSec") {
                props.push(
                    Prop::new("CPUQuotaPeriodUSec", PropValue::U64(q.period_us))
                        .why(format!("CPUQuotaPeriodSec={}us", q.period_us)),
                );
            } else {
                too_old(
                    "CPUQuotaPeriodSec",
                    since("CPUQuotaPeriodSec"),
                    &mut warnings,
                );
            }
        }
    }
    for (d, ids) in [
        ("AllowedCPUs", &s.allowed_cpus),
        ("AllowedMemoryNodes", &s.allowed_mems),
    ] {
        if let Some(ids) = ids {
            if knows(d) {
                props.push(
                    Prop::new(d, PropValue::Bytes(ids_to_bitmask(ids))).why(format!("{d}={ids}")),
                );
            } else {
                too_old(d, since(d), &mut warnings);
            }
        }
    }
    for (d, l) in [
        ("MemoryMin", s.memory_min),
        ("MemoryLow", s.memory_low),
        ("MemoryHigh", s.memory_high),
        ("MemoryMax", s.memory_max),
        ("MemorySwapMax", s.memory_swap_max),
    ] {
        let Some(l) = l else { continue };
        let why = format!("{d}={}", limit_text(l));
        if knows(d) {
            props.push(Prop::new(d, PropValue::U64(limit(l))).why(why));
        } else if let Some(old) = legacy(d) {
            props.push(Prop::new(old, PropValue::U64(limit(l))).why(why));
        } else {
            too_old(d, since(d), &mut warnings);
        }
    }
    if let Some(w) = s.io_weight {
        if knows("IOWeight") {
            props.push(Prop::new("IOWeight", PropValue::U64(w)).why(format!("IOWeight={w}")));
        } else {
            props.push(
                Prop::new("BlockIOWeight", PropValue::U64(weight_to_blkio(w)))
                    .why(format!("IOWeight={w}")),
            );
        }
    }
    let path = |d: &bulkhead_sys::host::DevNum| {
        s.device_paths
            .get(d)
            .cloned()
            .unwrap_or_else(|| format!("/dev/block/{d}"))
    };
    if !s.io_device_weight.is_empty() {
        let list: Vec<(String, u64)> = s
            .io_device_weight
            .iter()
            .map(|(d, w)| (path(d), *w))
            .collect();
        let why = list
            .iter()
            .map(|(p, w)| format!("IODeviceWeight={p} {w}"))
            .collect::<Vec<_>>()
            .join(", ");
        if knows("IODeviceWeight") {
            props.push(Prop::new("IODeviceWeight", PropValue::DevU64(list)).why(why));
        } else {
            let list = list
                .into_iter()
                .map(|(p, w)| (p, weight_to_blkio(w)))
                .collect();
            props.push(Prop::new("BlockIODeviceWeight", PropValue::DevU64(list)).why(why));
        }
    }
    type Pick = fn(&bulkhead_plan::IoMax) -> Option<Limit>;
    let io: [(&str, Pick); 4] = [
        ("IOReadBandwidthMax", |m| m.rbps),
        ("IOWriteBandwidthMax", |m| m.wbps),
        ("IOReadIOPSMax", |m| m.riops),
        ("IOWriteIOPSMax", |m| m.wiops),
    ];
    for (d, pick) in io {
        let list: Vec<(String, u64)> = s
            .io_max
            .iter()
            .filter_map(|(dev, m)| pick(m).map(|l| (path(dev), limit(l))))
            .collect();
        if list.is_empty() {
            continue;
        }
        let why = list
            .iter()
            .map(|(p, n)| {
                format!(
                    "{d}={p} {}",
                    if *n == u64::MAX {
                        "infinity".to_string()
                    } else {
                        n.to_string()
                    }
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        if knows(d) {
            props.push(Prop::new(d, PropValue::DevU64(list)).why(why));
        } else if let Some(old) = legacy(d) {
            props.push(Prop::new(old, PropValue::DevU64(list)).why(why));
        } else {
            too_old(d, since(d), &mut warnings);
        }
    }
    if let Some(t) = s.tasks_max {
        if knows("TasksMax") {
            props.push(Prop::new("TasksMax", PropValue::U64(limit(t))).why(format!(
                "TasksMax={}",
                t.bytes().map_or("infinity".into(), |n| n.to_string())
            )));
        } else {
            too_old("TasksMax", since("TasksMax"), &mut warnings);
        }
    }
    if !s.hugetlb_max.is_empty() {
        warnings.push(
            Diagnostic::warning(
                "HugetlbMax is not applied: systemd has no directive for the hugetlb controller",
            )
            .context(ctx.clone())
            .hint("use --backend cgroupfs for huge page limits, or leave HugetlbMax out on systemd hosts"),
        );
    }
    SliceProps { props, warnings }
}

/// Convert a property value read from systemd into the shape of `like`, for comparison.
pub fn from_dbus(v: &zbus::zvariant::OwnedValue, like: &PropValue) -> Option<PropValue> {
    use zbus::zvariant::Value;
    let v: &Value = v;
    Some(match like {
        PropValue::U64(_) => PropValue::U64(u64::try_from(v).ok()?),
        PropValue::Bool(_) => PropValue::Bool(bool::try_from(v).ok()?),
        PropValue::Str(_) => PropValue::Str(<&str>::try_from(v).ok()?.to_string()),
        PropValue::Strs(_) => PropValue::Strs(Vec::<String>::try_from(v.try_clone().ok()?).ok()?),
        PropValue::Bytes(_) => {
            let mut b = Vec::<u8>::try_from(v.try_clone().ok()?).ok()?;
            while b.last() == Some(&0) {
                b.pop();
            }
            PropValue::Bytes(b)
        }
        PropValue::DevU64(_) => {
            PropValue::DevU64(Vec::<(String, u64)>::try_from(v.try_clone().ok()?).ok()?)
        }
        PropValue::Pids(_) => PropValue::Pids(Vec::<u32>::try_from(v.try_clone().ok()?).ok()?),
        PropValue::Exec(_) | PropValue::Fd(_) => return None,
    })
}

/// Whether a value read back from systemd matches the wanted one. Device lists compare as
/// sets; systemd keeps them in the order they were set.
pub fn same(current: &PropValue, wanted: &PropValue) -> bool {
    match (current, wanted) {
        (PropValue::DevU64(a), PropValue::DevU64(b)) => {
            let mut a = a.clone();
            let mut b = b.clone();
            a.sort();
            b.sort();
            a == b
        }
        _ => current == wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_plan::Plan;
    use bulkhead_sys::host::Host;

    fn host() -> Host {
        Host {
            memory: 16 << 30,
            cpus: IdSet((0..16).collect()),
            mem_nodes: IdSet([0].into_iter().collect()),
            hugepage_sizes: vec![2 << 20],
            tasks_max: 4_194_304,
            page_size: 4096,
        }
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
            "[slice.a]\nCPUWeight = 10\nIOWeight = 10\nMemoryMax = \"1G\"\nMemoryHigh = \"900M\"\nAllowedCPUs = \"0\"\nHugetlbMax = { \"2M\" = \"8M\" }\n",
            "a",
            219,
        );
        assert_eq!(get(&sp, "CPUShares"), Some(&PropValue::U64(103)));
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
    }

    #[test]
    fn idle_weight() {
        let sp = props("[slice.a]\nCPUWeight = \"idle\"\n", "a", CURRENT);
        assert_eq!(get(&sp, "CPUWeight"), Some(&PropValue::U64(0)));
        let sp = props("[slice.a]\nCPUWeight = \"idle\"\n", "a", 245);
        assert_eq!(get(&sp, "CPUWeight"), Some(&PropValue::U64(1)));
        assert_eq!(sp.warnings.len(), 1);
    }

    #[test]
    fn shares_round_trip_through_import_conversion() {
        // import turns CPUShares into CPUWeight with shares * 100 / 1024.
        for w in 1..=10000u64 {
            assert_eq!(weight_to_shares(w) * 100 / 1024, w, "weight {w}");
        }
        for w in 2..=200u64 {
            assert_eq!(weight_to_blkio(w) * 100 / 500, w, "io weight {w}");
        }
    }

    #[test]
    fn bitmask() {
        let ids = IdSet::parse("0,7-8,63").unwrap();
        let b = ids_to_bitmask(&ids);
        assert_eq!(b.len(), 8);
        assert_eq!(b[0], 0x81);
        assert_eq!(b[1], 0x01);
        assert_eq!(b[7], 0x80);
        assert_eq!(bitmask_to_ids(&b), ids);
        assert!(ids_to_bitmask(&IdSet::default()).is_empty());
    }

    #[test]
    fn managed_properties_follow_the_version() {
        let names: Vec<&str> = managed(CURRENT).iter().map(|m| m.0).collect();
        assert!(names.contains(&"AllowedCPUs") && names.contains(&"MemoryMin"));
        let old: Vec<&str> = managed(230).iter().map(|m| m.0).collect();
        assert!(!old.contains(&"MemoryMax") && old.contains(&"IOWeight"));
    }
}
