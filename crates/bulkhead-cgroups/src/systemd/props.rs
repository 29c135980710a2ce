//! Plan directives -> systemd unit properties, as plain data: the D-Bus name and type of each
//! property, the versions of systemd that know it, and what older versions take instead.
//!
//! The same table drives the transient units of `apply` (D-Bus properties) and the unit files
//! of `export systemd` and `apply --persist` (directive lines), so both say the same thing.

use super::versions::{support, Version};
use bulkhead_sys::units::IdSet;
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

/// The properties bulkhead manages on a slice, with the value that means "not set" (what a
/// directive removed from the plan is reset to). Only properties this version knows.
pub fn managed(version: Version) -> Vec<(&'static str, &'static str, PropValue)> {
    // (property, directive, default)
    let all: [(&str, &str, PropValue); 18] = [
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
        (
            "IODeviceLatencyTargetUSec",
            "IODeviceLatencyTargetSec",
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

/// What to set so systemd holds `wanted`, and what to set back to undo it, against the
/// unit's `current` properties. `(prop, asked)`: a property systemd does not report is set
/// only when the plan asks for it.
pub fn differences<'a>(
    current: &std::collections::HashMap<String, zbus::zvariant::OwnedValue>,
    wanted: impl IntoIterator<Item = (&'a Prop, bool)>,
) -> (Vec<Prop>, Vec<Prop>) {
    let mut set = Vec::new();
    let mut restore = Vec::new();
    for (p, asked) in wanted {
        match current.get(&p.name).and_then(|v| from_dbus(v, &p.value)) {
            Some(c) if same(&c, &p.value) => {}
            Some(c) => {
                restore.push(Prop::new(&p.name, c));
                set.push(p.clone());
            }
            None if asked => set.push(p.clone()),
            None => {}
        }
    }
    (set, restore)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systemd::versions::CURRENT;

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
