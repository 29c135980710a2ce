//! CPUWeight, CPUQuota (with CPUQuotaPeriodSec), AllowedCPUs and AllowedMemoryNodes.

use super::{effective, plain, trim_float, CpuMax, Ctx, ResolvedSlice, Setting};
use crate::{At, CpuWeight, SliceName, SliceSpec, Value};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::units::IdSet;

pub fn weight(r: &mut ResolvedSlice, key: &str, w: CpuWeight) {
    r.cpu_weight = Some(w);
    let (value, toml) = match w {
        CpuWeight::Weight(n) => (n.to_string(), n.to_string()),
        CpuWeight::Idle => ("idle".into(), "\"idle\"".into()),
    };
    r.settings.push(plain(key, value, toml));
}

/// CPUSchedulingSliceSec: kept in nanoseconds for the slice's tasks.
pub fn sched_slice(r: &mut ResolvedSlice, key: &str, d: std::time::Duration) {
    let us = d.as_micros();
    r.sched_slice_ns = Some(d.as_nanos() as u64);
    r.settings
        .push(plain(key, format!("{us}us"), format!("\"{us}us\"")));
}

/// CPUQuota as cpu.max: the fraction of one CPU per period (the plan's CPUQuotaPeriodSec, or
/// 100ms).
pub fn quota(
    cx: &mut Ctx,
    name: &SliceName,
    key: &str,
    at: &At<Value>,
    frac: f64,
    r: &mut ResolvedSlice,
) {
    let period_us = period(cx, name).unwrap_or(100_000);
    let quota_us = (frac * period_us as f64).round() as u64;
    if quota_us < 1000 {
        cx.err(
            name,
            key,
            at,
            format!("{quota_us}us per {period_us}us period is below the kernel's 1ms minimum"),
            "raise CPUQuota or lengthen CPUQuotaPeriodSec",
        );
        return;
    }
    if frac > cx.host.cpu_count() as f64 {
        cx.notes.push(
            Diagnostic::warning(format!(
                "CPUQuota = {} allows more than the host's {} CPUs, so it never limits",
                at.raw,
                cx.host.cpu_count()
            ))
            .at(cx.plan.source.at(at.loc))
            .context(format!("[slice.{name}]")),
        );
    }
    r.cpu_max = Some(CpuMax {
        quota_us,
        period_us,
    });
    r.settings.push(Setting {
        directive: key.into(),
        value: format!("{}%", trim_float(frac * 100.0)),
        bytes: None,
        from: Some(format!("{quota_us}us per {period_us}us")),
        toml: format!("\"{}%\"", trim_float(frac * 100.0)),
    });
    if period_us != 100_000 {
        r.settings.push(plain(
            "CPUQuotaPeriodSec",
            format!("{period_us}us"),
            format!("\"{period_us}us\""),
        ));
    }
}

/// The slice's CPUQuotaPeriodSec, in microseconds.
fn period(cx: &Ctx, name: &SliceName) -> Option<u64> {
    match cx
        .plan
        .slices
        .get(name)?
        .directives
        .get("CPUQuotaPeriodSec")?
        .value
    {
        Value::Period(d) => Some(d.as_micros() as u64),
        _ => None,
    }
}

/// AllowedCPUs / AllowedMemoryNodes: only CPUs and nodes this host has.
pub fn cpuset(
    cx: &mut Ctx,
    name: &SliceName,
    key: &str,
    at: &At<Value>,
    ids: &IdSet,
    r: &mut ResolvedSlice,
) {
    let cpus = key == "AllowedCPUs";
    let (avail, what) = if cpus {
        (&cx.host.cpus, "online CPUs")
    } else {
        (&cx.host.mem_nodes, "NUMA nodes with memory")
    };
    if !ids.is_subset(avail) {
        let msg = format!("this host's {what} are {avail}");
        cx.err(
            name,
            key,
            at,
            msg,
            "name only CPUs or nodes that exist here",
        );
        return;
    }
    if cpus {
        r.allowed_cpus = Some(ids.clone());
    } else {
        r.allowed_mems = Some(ids.clone());
    }
    r.settings
        .push(plain(key, ids.to_string(), format!("\"{ids}\"")));
}

/// A child's cpuset must be inside its parent's (or the nearest ancestor's that sets one).
pub fn check_nested_cpuset(
    cx: &mut Ctx,
    spec: &SliceSpec,
    r: &ResolvedSlice,
    out: &[ResolvedSlice],
) {
    let name = &spec.name;
    let Some(parent) = name
        .parent()
        .and_then(|p| out.iter().find(|s| s.name() == &p))
    else {
        return;
    };
    for (key, mine, theirs) in [
        (
            "AllowedCPUs",
            &r.allowed_cpus,
            effective(out, parent, |s| &s.allowed_cpus),
        ),
        (
            "AllowedMemoryNodes",
            &r.allowed_mems,
            effective(out, parent, |s| &s.allowed_mems),
        ),
    ] {
        if let (Some(m), Some((owner, t)), Some(at)) = (mine, theirs, spec.directives.get(key)) {
            if !m.is_subset(&t) {
                cx.err(
                    name,
                    key,
                    at,
                    format!("{m} is not inside the parent slice {owner}'s {key} = {t}"),
                    "a child slice can only narrow its parent's set",
                );
            }
        }
    }
}
