//! The directives a slice accepts: systemd's names, systemd's value syntax.

use bulkhead_sys::units::{parse_duration, parse_percent, parse_size, IdSet, Limit};
use std::time::Duration;

/// CPUWeight: a weight, or `idle` (the lowest priority the scheduler has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuWeight {
    Weight(u64),
    Idle,
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemValue {
    Bytes(u64),
    /// A fraction of the host's RAM (0.04 for "4%").
    Percent(f64),
    Infinity,
}

/// A memory value with optional bounds: `{ value = "4%", min = "1200M" }` is "4% of RAM, but
/// at least 1200M", for hosts too small for the percentage.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MemSpec {
    pub value: MemValue,
    pub min: Option<u64>,
    pub max: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TasksSpec {
    Count(u64),
    Percent(f64),
    Infinity,
}

/// A type-checked directive value, before host resolution.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Value {
    CpuWeight(CpuWeight),
    /// CPUQuota as a fraction of one CPU (1.5 for "150%").
    Quota(f64),
    Period(Duration),
    /// CPUSchedulingSliceSec: the EEVDF slice the slice's tasks ask for.
    SchedSlice(Duration),
    Ids(IdSet),
    Memory(MemSpec),
    Weight(u64),
    /// (device path, weight)
    DeviceWeights(Vec<(String, u64)>),
    /// (device path, bytes/s or IOPS)
    DeviceLimits(Vec<(String, Limit)>),
    /// (device path, io.latency target; None: "infinity", no target)
    DeviceLatency(Vec<(String, Option<Duration>)>),
    Tasks(TasksSpec),
    /// (page size in bytes, limit)
    Hugetlb(Vec<(u64, MemSpec)>),
    Text(String),
    Flag(bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    CpuWeight,
    Quota,
    Period,
    SchedSlice,
    Ids,
    Memory,
    Weight,
    DeviceWeights,
    DeviceBandwidth,
    DeviceIops,
    DeviceLatency,
    Tasks,
    Hugetlb,
    Text,
    Flag,
}

pub(crate) struct Info {
    pub name: &'static str,
    pub kind: Kind,
}

const fn d(name: &'static str, kind: Kind) -> Info {
    Info { name, kind }
}

/// Every directive a slice takes, in the order `plan show` prints them.
pub(crate) const DIRECTIVES: &[Info] = &[
    d("Description", Kind::Text),
    d("CPUWeight", Kind::CpuWeight),
    d("CPUQuota", Kind::Quota),
    d("CPUQuotaPeriodSec", Kind::Period),
    // Not systemd's: the kernel's custom EEVDF slice (Linux 6.12+), set on every task of the
    // slice by bulkhead itself; export keeps it in [X-Bulkhead].
    d("CPUSchedulingSliceSec", Kind::SchedSlice),
    d("AllowedCPUs", Kind::Ids),
    d("AllowedMemoryNodes", Kind::Ids),
    d("MemoryMin", Kind::Memory),
    d("MemoryLow", Kind::Memory),
    d("MemoryHigh", Kind::Memory),
    d("MemoryMax", Kind::Memory),
    d("MemorySwapMax", Kind::Memory),
    d("IOWeight", Kind::Weight),
    d("IODeviceWeight", Kind::DeviceWeights),
    d("IODeviceLatencyTargetSec", Kind::DeviceLatency),
    d("IOReadBandwidthMax", Kind::DeviceBandwidth),
    d("IOWriteBandwidthMax", Kind::DeviceBandwidth),
    d("IOReadIOPSMax", Kind::DeviceIops),
    d("IOWriteIOPSMax", Kind::DeviceIops),
    d("TasksMax", Kind::Tasks),
    d("HugetlbMax", Kind::Hugetlb),
    // Accounting is always on in bulkhead; these are accepted so slice files paste as they are.
    d("CPUAccounting", Kind::Flag),
    d("MemoryAccounting", Kind::Flag),
    d("IOAccounting", Kind::Flag),
    d("BlockIOAccounting", Kind::Flag),
    d("TasksAccounting", Kind::Flag),
];

/// systemd's deprecated cgroup-v1 directives and what they become.
pub(crate) struct Legacy {
    pub name: &'static str,
    pub becomes: &'static str,
    /// Converts the legacy number into the modern one (None: same value).
    pub convert: Option<fn(u64) -> u64>,
}

pub(crate) const LEGACY: &[Legacy] = &[
    Legacy {
        name: "CPUShares",
        becomes: "CPUWeight",
        convert: Some(crate::convert::shares_to_weight),
    },
    Legacy {
        name: "MemoryLimit",
        becomes: "MemoryMax",
        convert: None,
    },
    Legacy {
        name: "BlockIOWeight",
        becomes: "IOWeight",
        convert: Some(crate::convert::blkio_to_io_weight),
    },
    Legacy {
        name: "BlockIODeviceWeight",
        becomes: "IODeviceWeight",
        convert: Some(crate::convert::blkio_to_io_weight),
    },
    Legacy {
        name: "BlockIOReadBandwidth",
        becomes: "IOReadBandwidthMax",
        convert: None,
    },
    Legacy {
        name: "BlockIOWriteBandwidth",
        becomes: "IOWriteBandwidthMax",
        convert: None,
    },
];

pub(crate) fn info(name: &str) -> Option<&'static Info> {
    DIRECTIVES.iter().find(|i| i.name == name)
}

/// All directive names a slice accepts (modern ones first).
pub fn directive_names() -> Vec<&'static str> {
    DIRECTIVES
        .iter()
        .map(|i| i.name)
        .chain(LEGACY.iter().map(|l| l.name))
        .collect()
}

/// The nearest of `candidates` to `name` (case-insensitive Jaro-Winkler), for "did you mean".
pub fn nearest<'a>(name: &str, candidates: &'a [String]) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| {
            (
                strsim::jaro_winkler(&lower, &c.to_ascii_lowercase()),
                c.as_str(),
            )
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// The nearest known directive name, for "did you mean".
pub(crate) fn suggest(name: &str, candidates: &[&'static str]) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if let Some(exact) = candidates.iter().find(|c| c.to_ascii_lowercase() == lower) {
        return Some(exact);
    }
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(&lower, &c.to_ascii_lowercase()), *c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// The largest CPUQuota, in CPUs: Linux has at most 8192 (NR_CPUS).
pub(crate) const MAX_QUOTA: f64 = 10_000.0;

/// A failed value check: the message and an optional hint.
pub(crate) type Bad = (String, Option<String>);

fn bad(msg: impl Into<String>, hint: impl Into<String>) -> Bad {
    (msg.into(), Some(hint.into()))
}

/// A scalar written as a TOML string or number.
#[derive(Debug, Clone)]
pub(crate) enum Scalar {
    Str(String),
    Int(i128),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    pub fn text(&self) -> String {
        match self {
            Scalar::Str(s) => s.clone(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// The parsed TOML shape of a directive value, independent of the TOML library.
#[derive(Debug, Clone)]
pub(crate) enum Raw {
    Scalar(Scalar),
    List(Vec<Scalar>),
    Table(Vec<(String, Scalar)>),
}

fn weight(s: &Scalar, lo: u64, hi: u64, what: &str) -> Result<u64, Bad> {
    let n: i128 = match s {
        Scalar::Int(i) => *i,
        Scalar::Str(t) => t.trim().parse().map_err(|_| {
            bad(
                format!("'{t}' is not a number"),
                format!("{what} takes a whole number from {lo} to {hi}"),
            )
        })?,
        other => {
            return Err(bad(
                format!("'{}' is not a number", other.text()),
                format!("{what} takes a whole number from {lo} to {hi}"),
            ))
        }
    };
    if n < lo as i128 || n > hi as i128 {
        return Err(bad(
            format!("{n} is out of range"),
            format!("{what} takes a whole number from {lo} to {hi}"),
        ));
    }
    Ok(n as u64)
}

fn non_negative_int(s: &Scalar) -> Option<Result<u64, Bad>> {
    match s {
        Scalar::Int(i) if *i < 0 => Some(Err(bad(
            format!("{i} is negative"),
            "sizes and counts must be zero or more",
        ))),
        Scalar::Int(i) => Some(u64::try_from(*i).map_err(|_| bad("value is too large", ""))),
        _ => None,
    }
}

pub(crate) fn mem_value(s: &Scalar) -> Result<MemValue, Bad> {
    if let Some(n) = non_negative_int(s) {
        return n.map(MemValue::Bytes);
    }
    let Scalar::Str(t) = s else {
        return Err(bad(
            format!("'{}' is not a size", s.text()),
            "use bytes with K/M/G/T suffixes (\"1200M\"), a percentage of RAM (\"4%\") or \"infinity\"",
        ));
    };
    let t = t.trim();
    if t == "infinity" || t == "max" {
        return Ok(MemValue::Infinity);
    }
    if t.starts_with('-') {
        return Err(bad(
            format!("'{t}' is negative"),
            "sizes must be zero or more",
        ));
    }
    if let Some(p) = parse_percent(t) {
        let p = p.map_err(|m| bad(m, "write a percentage like \"4%\""))?;
        if p > 1.0 {
            return Err(bad(
                format!("'{t}' is more than 100% of RAM"),
                "a percentage of RAM must be between 0% and 100%",
            ));
        }
        return Ok(MemValue::Percent(p));
    }
    parse_size(t, 1024).map(MemValue::Bytes).map_err(|m| {
        bad(
            m,
            "use bytes with K/M/G/T suffixes (\"1200M\"), a percentage of RAM (\"4%\") or \"infinity\"",
        )
    })
}

fn mem_bound(s: &Scalar) -> Result<u64, Bad> {
    match mem_value(s)? {
        MemValue::Bytes(b) => Ok(b),
        _ => Err(bad(
            format!("'{}' is not a size", s.text()),
            "min and max take a size like \"1200M\"",
        )),
    }
}

pub(crate) fn mem_spec(raw: &Raw) -> Result<MemSpec, Bad> {
    match raw {
        Raw::Scalar(s) => Ok(MemSpec {
            value: mem_value(s)?,
            min: None,
            max: None,
        }),
        Raw::Table(entries) => {
            let mut spec = MemSpec {
                value: MemValue::Infinity,
                min: None,
                max: None,
            };
            let mut has_value = false;
            for (k, v) in entries {
                match k.as_str() {
                    "value" => {
                        spec.value = mem_value(v)?;
                        has_value = true;
                    }
                    "min" => spec.min = Some(mem_bound(v)?),
                    "max" => spec.max = Some(mem_bound(v)?),
                    other => {
                        return Err(bad(
                            format!("unknown key '{other}'"),
                            "write { value = \"4%\", min = \"1200M\" } (keys: value, min, max)",
                        ))
                    }
                }
            }
            if !has_value {
                return Err(bad(
                    "the table has no 'value'",
                    "write { value = \"4%\", min = \"1200M\" }",
                ));
            }
            if let (Some(lo), Some(hi)) = (spec.min, spec.max) {
                if lo > hi {
                    return Err(bad(
                        format!("min ({lo} bytes) is above max ({hi} bytes)"),
                        "min is the floor and max the ceiling of the value",
                    ));
                }
            }
            Ok(spec)
        }
        Raw::List(_) => Err(bad(
            "a list is not a size",
            "use a size (\"1200M\"), a percentage (\"4%\") or { value = \"4%\", min = \"1200M\" }",
        )),
    }
}

fn scalar(raw: &Raw, what: &str) -> Result<Scalar, Bad> {
    match raw {
        Raw::Scalar(s) => Ok(s.clone()),
        _ => Err(bad(
            "expected a single value",
            format!("{what} takes one value, not a list or table"),
        )),
    }
}

fn strings(raw: &Raw, what: &str) -> Result<Vec<String>, Bad> {
    match raw {
        Raw::Scalar(Scalar::Str(s)) => Ok(vec![s.clone()]),
        Raw::List(items) => items
            .iter()
            .map(|i| match i {
                Scalar::Str(s) => Ok(s.clone()),
                other => Err(bad(
                    format!("'{}' is not a string", other.text()),
                    format!("{what} takes \"DEVICE VALUE\" strings"),
                )),
            })
            .collect(),
        _ => Err(bad(
            "expected \"DEVICE VALUE\"",
            format!("{what} takes a string like \"/dev/vda 10M\", or a list of them"),
        )),
    }
}

fn split_device<'a>(s: &'a str, what: &str) -> Result<(&'a str, &'a str), Bad> {
    let t = s.trim();
    match t.rsplit_once(char::is_whitespace) {
        Some((dev, val)) if !dev.trim().is_empty() => Ok((dev.trim(), val.trim())),
        _ => Err(bad(
            format!("'{s}' is not \"DEVICE VALUE\""),
            format!("{what} takes a device path and a value, like \"/dev/vda 10M\""),
        )),
    }
}

fn device_path(dev: &str, what: &str) -> Result<String, Bad> {
    if !dev.starts_with('/') {
        return Err(bad(
            format!("'{dev}' is not an absolute path"),
            format!("{what} names a device node (/dev/vda) or a path on its file system"),
        ));
    }
    // systemd refuses paths that are not normalized (path_is_normalized()).
    let odd = dev.contains("//")
        || (dev.len() > 1 && dev.ends_with('/'))
        || dev.split('/').any(|c| c == "." || c == "..");
    if odd {
        return Err(bad(
            format!("'{dev}' is not a normalized path"),
            "write it without '//', '.', '..' or a trailing '/', as systemd takes it",
        ));
    }
    Ok(dev.to_string())
}

/// Type-check one directive's value.
pub(crate) fn check(kind: Kind, name: &str, raw: &Raw) -> Result<Value, Bad> {
    match kind {
        Kind::Text => match scalar(raw, name)? {
            Scalar::Str(s) => Ok(Value::Text(s)),
            other => Ok(Value::Text(other.text())),
        },
        Kind::Flag => check_flag(name, raw),
        Kind::CpuWeight => check_cpu_weight(name, raw),
        Kind::Weight => weight(&scalar(raw, name)?, 1, 10000, name).map(Value::Weight),
        Kind::Quota => check_quota(name, raw),
        Kind::Period => check_period(name, raw),
        Kind::SchedSlice => check_sched_slice(name, raw),
        Kind::Ids => check_ids(name, raw),
        Kind::Memory => mem_spec(raw).map(Value::Memory),
        Kind::Tasks => check_tasks(name, raw),
        Kind::DeviceWeights => check_device_weights(name, raw),
        Kind::DeviceBandwidth | Kind::DeviceIops => check_device_limits(kind, name, raw),
        Kind::DeviceLatency => check_device_latency(name, raw),
        Kind::Hugetlb => check_hugetlb(raw),
    }
}

fn check_flag(name: &str, raw: &Raw) -> Result<Value, Bad> {
    match scalar(raw, name)? {
        Scalar::Bool(b) => Ok(Value::Flag(b)),
        Scalar::Str(s) => match s.as_str() {
            "yes" | "true" | "on" | "1" => Ok(Value::Flag(true)),
            "no" | "false" | "off" | "0" => Ok(Value::Flag(false)),
            _ => Err(bad(format!("'{s}' is not a boolean"), "use true or false")),
        },
        other => Err(bad(
            format!("'{}' is not a boolean", other.text()),
            "use true or false",
        )),
    }
}

fn check_cpu_weight(name: &str, raw: &Raw) -> Result<Value, Bad> {
    let s = scalar(raw, name)?;
    if let Scalar::Str(t) = &s {
        if t.trim() == "idle" {
            return Ok(Value::CpuWeight(CpuWeight::Idle));
        }
    }
    weight(&s, 1, 10000, "CPUWeight")
        .map(|w| Value::CpuWeight(CpuWeight::Weight(w)))
        .map_err(|(m, _)| (m, Some("CPUWeight takes 1..10000 or \"idle\"".into())))
}

fn check_quota(name: &str, raw: &Raw) -> Result<Value, Bad> {
    let s = scalar(raw, name)?;
    let t = s.text();
    match parse_percent(&t) {
        // The backends count it in microseconds per second: "1e300%" overflowed.
        Some(Ok(f)) if f > MAX_QUOTA => Err(bad(
            format!("'{t}' is more CPU than any machine has"),
            format!(
                "CPUQuota is a percentage of one CPU, at most {}% ({} CPUs)",
                MAX_QUOTA * 100.0,
                MAX_QUOTA
            ),
        )),
        Some(Ok(f)) if f > 0.0 => Ok(Value::Quota(f)),
        Some(Ok(_)) => Err(bad(
            "CPUQuota must be above 0%",
            "CPUQuota is a percentage of one CPU: \"50%\" is half a CPU, \"200%\" two CPUs",
        )),
        _ => Err(bad(
            format!("'{t}' is not a percentage"),
            "CPUQuota is a percentage of one CPU: \"50%\" is half a CPU, \"200%\" two CPUs",
        )),
    }
}

fn check_period(name: &str, raw: &Raw) -> Result<Value, Bad> {
    let t = scalar(raw, name)?.text();
    let d = parse_duration(&t).map_err(|m| bad(m, "write a time like \"100ms\""))?;
    if d < Duration::from_millis(1) || d > Duration::from_secs(1) {
        return Err(bad(
            format!("'{t}' is outside 1ms..1s"),
            "the kernel accepts CPU quota periods from 1ms to 1s (default 100ms)",
        ));
    }
    Ok(Value::Period(d))
}

fn check_sched_slice(name: &str, raw: &Raw) -> Result<Value, Bad> {
    let t = scalar(raw, name)?.text();
    let d = parse_duration(&t).map_err(|m| bad(m, "write a time like \"0.5ms\""))?;
    if d < Duration::from_micros(100) || d > Duration::from_millis(100) {
        return Err(bad(
                format!("'{t}' is outside 0.1ms..100ms"),
                "the kernel takes custom scheduler slices from 0.1ms to 100ms; a shorter slice lets the slice's tasks preempt others sooner when they wake",
            ));
    }
    Ok(Value::SchedSlice(d))
}

fn check_ids(name: &str, raw: &Raw) -> Result<Value, Bad> {
    let t = scalar(raw, name)?.text();
    let ids = IdSet::parse(&t).map_err(|m| bad(m, "write a list like \"0-3,8\""))?;
    if ids.0.is_empty() {
        return Err(bad("the list is empty", "write a list like \"0-3,8\""));
    }
    Ok(Value::Ids(ids))
}

fn check_tasks(name: &str, raw: &Raw) -> Result<Value, Bad> {
    let s = scalar(raw, name)?;
    if let Some(n) = non_negative_int(&s) {
        let n = n?;
        if n == 0 {
            return Err(bad(
                "TasksMax = 0 would forbid every process",
                "use 1 or more, or \"infinity\"",
            ));
        }
        return Ok(Value::Tasks(TasksSpec::Count(n)));
    }
    let t = s.text();
    let t = t.trim();
    if t == "infinity" || t == "max" {
        return Ok(Value::Tasks(TasksSpec::Infinity));
    }
    if let Some(p) = parse_percent(t) {
        let p = p.map_err(|m| bad(m, "write a percentage like \"10%\""))?;
        if p > 1.0 || p <= 0.0 {
            return Err(bad(
                format!("'{t}' is outside 0%..100%"),
                "TasksMax as a percentage is a share of the system's task limit",
            ));
        }
        return Ok(Value::Tasks(TasksSpec::Percent(p)));
    }
    match t.parse::<u64>() {
        Ok(0) => Err(bad(
            "TasksMax = 0 would forbid every process",
            "use 1 or more, or \"infinity\"",
        )),
        Ok(n) => Ok(Value::Tasks(TasksSpec::Count(n))),
        Err(_) => Err(bad(
            format!("'{t}' is not a task count"),
            "TasksMax takes a number, a percentage or \"infinity\"",
        )),
    }
}

/// `DEVICE WEIGHT` lines.
fn check_device_weights(name: &str, raw: &Raw) -> Result<Value, Bad> {
    strings(raw, name)?
        .iter()
        .map(|s| {
            let (dev, w) = split_device(s, name)?;
            let w = weight(&Scalar::Str(w.to_string()), 1, 10000, name)?;
            Ok((device_path(dev, name)?, w))
        })
        .collect::<Result<_, _>>()
        .map(Value::DeviceWeights)
}

/// `DEVICE BYTES|IOPS` lines (or infinity).
fn check_device_limits(kind: Kind, name: &str, raw: &Raw) -> Result<Value, Bad> {
    strings(raw, name)?
        .iter()
        .map(|s| {
            let (dev, v) = split_device(s, name)?;
            let limit = if v == "infinity" || v == "max" {
                Limit::Infinity
            } else {
                let n = parse_size(v, 1000).map_err(|m| {
                    bad(
                        m,
                        if kind == Kind::DeviceIops {
                            "IOPS limits are numbers (K, M, G count in thousands)"
                        } else {
                            "bandwidths are bytes per second; K, M, G count in thousands as in systemd"
                        },
                    )
                })?;
                if n == 0 {
                    return Err(bad(
                        format!("'{s}': a limit of 0 would stop all I/O"),
                        "use a positive value, or \"infinity\" for no limit",
                    ));
                }
                Limit::Bytes(n)
            };
            Ok((device_path(dev, name)?, limit))
        })
        .collect::<Result<_, _>>()
        .map(Value::DeviceLimits)
}

/// `DEVICE TARGET` lines (or infinity).
fn check_device_latency(name: &str, raw: &Raw) -> Result<Value, Bad> {
    strings(raw, name)?
        .iter()
        .map(|s| {
            let (dev, v) = split_device(s, name)?;
            let target = if v == "infinity" || v == "max" {
                None
            } else {
                let d = parse_duration(v).map_err(|m| {
                    bad(m, "write the target as a time, like \"/var/lib/postgresql 10ms\"")
                })?;
                if d.is_zero() {
                    return Err(bad(
                        format!("'{s}': a target of 0 sets no target"),
                        "give the latency the slice's I/O should keep to (\"10ms\"), or \"infinity\" for none",
                    ));
                }
                Some(d)
            };
            Ok((device_path(dev, name)?, target))
        })
        .collect::<Result<_, _>>()
        .map(Value::DeviceLatency)
}

/// `{ "2M" = "8G" }`.
fn check_hugetlb(raw: &Raw) -> Result<Value, Bad> {
    let Raw::Table(entries) = raw else {
        return Err(bad(
            "expected a table of page size = limit",
            "write HugetlbMax = { \"2M\" = \"8G\" }",
        ));
    };
    let mut out = Vec::new();
    for (k, v) in entries {
        let size = bulkhead_sys::host::parse_page_size(k).ok_or_else(|| {
            bad(
                format!("'{k}' is not a huge page size"),
                "name page sizes like \"2M\" or \"1G\"",
            )
        })?;
        out.push((size, mem_spec(&Raw::Scalar(v.clone()))?));
    }
    Ok(Value::Hugetlb(out))
}

impl Value {
    /// Apply a legacy directive's numeric conversion (CPUShares -> CPUWeight, ...).
    pub(crate) fn convert_legacy(self, f: fn(u64) -> u64) -> Value {
        match self {
            Value::Weight(w) => Value::Weight(f(w)),
            Value::CpuWeight(CpuWeight::Weight(w)) => Value::CpuWeight(CpuWeight::Weight(f(w))),
            Value::DeviceWeights(v) => {
                Value::DeviceWeights(v.into_iter().map(|(d, w)| (d, f(w))).collect())
            }
            other => other,
        }
    }
}

/// How a legacy directive's value is type-checked before conversion.
pub(crate) fn legacy_kind(l: &Legacy) -> Kind {
    match l.name {
        "CPUShares" | "BlockIOWeight" => Kind::Weight,
        _ => info(l.becomes).map_or(Kind::Text, |i| i.kind),
    }
}

/// Range check for legacy weights, which have their own ranges.
pub(crate) fn check_legacy(l: &Legacy, raw: &Raw) -> Result<Value, Bad> {
    match l.name {
        "CPUShares" => {
            let w = weight(&scalar(raw, l.name)?, 2, 262144, "CPUShares")?;
            Ok(Value::CpuWeight(CpuWeight::Weight(w)))
        }
        "BlockIOWeight" => Ok(Value::Weight(weight(
            &scalar(raw, l.name)?,
            10,
            1000,
            "BlockIOWeight",
        )?)),
        _ => check(legacy_kind(l), l.name, raw),
    }
}
