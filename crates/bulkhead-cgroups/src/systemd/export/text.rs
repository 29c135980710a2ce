//! How values are spelled in unit files and in plan TOML: sizes, SI counts, durations,
//! specifier escapes, and a plan value as TOML (for [X-Bulkhead]).

use bulkhead_plan::{CpuWeight, MemSpec, MemValue, TasksSpec, Value};
use bulkhead_sys::units::{human_bytes, Limit};
use std::fmt::Write as _;

/// Escape `%` (systemd's specifier character) in values systemd expands specifiers in.
pub(super) fn esc(s: &str) -> String {
    s.replace('%', "%%").replace('\n', " ")
}

pub(super) fn trim_float(f: f64) -> String {
    let s = format!("{f:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Bytes as systemd and the plan both read them: `1200M`, or a plain number.
pub(super) fn size(b: u64) -> String {
    let h = human_bytes(b);
    if h.contains('.') || h.ends_with('B') {
        b.to_string()
    } else {
        h
    }
}

/// Bandwidths and IOPS count in thousands, as systemd does.
pub(super) fn si(n: u64) -> String {
    for (s, u) in [
        ("T", 1_000_000_000_000u64),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("K", 1000),
    ] {
        if n >= u && n.is_multiple_of(u) {
            return format!("{}{s}", n / u);
        }
    }
    n.to_string()
}

pub(super) fn mem_text(v: MemValue) -> String {
    match v {
        MemValue::Bytes(b) => size(b),
        MemValue::Percent(p) => format!("{}%", trim_float(p * 100.0)),
        MemValue::Infinity => "infinity".into(),
    }
}

pub(super) fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

pub(super) fn mem_toml(spec: &MemSpec) -> String {
    let v = toml_str(&mem_text(spec.value));
    if spec.min.is_none() && spec.max.is_none() {
        return v;
    }
    let mut out = format!("{{ value = {v}");
    if let Some(m) = spec.min {
        let _ = write!(out, ", min = {}", toml_str(&size(m)));
    }
    if let Some(m) = spec.max {
        let _ = write!(out, ", max = {}", toml_str(&size(m)));
    }
    out.push_str(" }");
    out
}

pub(super) fn limit_text(l: &bulkhead_sys::units::Limit) -> String {
    match l {
        Limit::Bytes(b) => si(*b),
        Limit::Infinity => "infinity".into(),
    }
}

/// A plan value as plan TOML (what `import` writes back for [X-Bulkhead] entries).
pub fn value_toml(v: &Value) -> String {
    match v {
        Value::CpuWeight(CpuWeight::Weight(n)) | Value::Weight(n) => n.to_string(),
        Value::CpuWeight(CpuWeight::Idle) => "\"idle\"".into(),
        Value::Quota(f) => toml_str(&format!("{}%", trim_float(f * 100.0))),
        Value::Period(d) | Value::SchedSlice(d) => toml_str(&duration(*d)),
        Value::Ids(ids) => toml_str(&ids.to_string()),
        Value::Memory(spec) => mem_toml(spec),
        Value::DeviceWeights(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|(d, w)| toml_str(&format!("{d} {w}")))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Value::DeviceLimits(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|(d, l)| toml_str(&format!("{d} {}", limit_text(l))))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Value::DeviceLatency(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|(d, t)| toml_str(&format!("{d} {}", latency_text(*t))))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Value::Tasks(TasksSpec::Count(n)) => n.to_string(),
        Value::Tasks(TasksSpec::Percent(p)) => toml_str(&format!("{}%", trim_float(p * 100.0))),
        Value::Tasks(TasksSpec::Infinity) => "\"infinity\"".into(),
        Value::Hugetlb(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|(size, spec)| {
                    format!("{} = {}", toml_str(&human_bytes(*size)), mem_toml(spec))
                })
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
        Value::Text(t) => toml_str(t),
        Value::Flag(b) => b.to_string(),
    }
}

/// An io.latency target as systemd and the plan read it: `10ms`, or `infinity`.
pub(super) fn latency_text(t: Option<std::time::Duration>) -> String {
    t.map_or("infinity".into(), duration)
}

pub(super) fn duration(d: std::time::Duration) -> String {
    let us = d.as_micros();
    if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}
