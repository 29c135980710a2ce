//! [`Plan`] + [`Host`] -> [`ResolvedPlan`]: every value in bytes, weights and device numbers.

mod cpu;
mod io;
mod memory;

use super::{At, CpuWeight, MemSpec, MemValue, Plan, SliceName, TasksSpec, Value};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::{DevNum, Host};
use bulkhead_sys::units::{human_bytes, IdSet, Limit};
use std::collections::BTreeMap;

/// cpu.max / cfs_quota_us + cfs_period_us.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CpuMax {
    pub quota_us: u64,
    pub period_us: u64,
}

/// One device's io.max line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct IoMax {
    pub rbps: Option<Limit>,
    pub wbps: Option<Limit>,
    pub riops: Option<Limit>,
    pub wiops: Option<Limit>,
}

/// A resolved value as `plan show` prints it: directive, value, and how it was derived.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Setting {
    pub directive: String,
    pub value: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The value as plan TOML (device and huge page settings are one entry of a list/table).
    #[serde(skip)]
    pub toml: String,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ResolvedSlice {
    pub name: Option<SliceName>,
    pub unit: String,
    pub cgroup_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Created only because a child needs it.
    pub implicit: bool,
    #[serde(skip)]
    pub cpu_weight: Option<CpuWeight>,
    #[serde(skip)]
    pub cpu_max: Option<CpuMax>,
    /// CPUSchedulingSliceSec, nanoseconds: set on the slice's tasks by bulkhead.
    #[serde(skip)]
    pub sched_slice_ns: Option<u64>,
    #[serde(skip)]
    pub allowed_cpus: Option<IdSet>,
    #[serde(skip)]
    pub allowed_mems: Option<IdSet>,
    #[serde(skip)]
    pub memory_min: Option<Limit>,
    #[serde(skip)]
    pub memory_low: Option<Limit>,
    #[serde(skip)]
    pub memory_high: Option<Limit>,
    #[serde(skip)]
    pub memory_max: Option<Limit>,
    #[serde(skip)]
    pub memory_swap_max: Option<Limit>,
    #[serde(skip)]
    pub io_weight: Option<u64>,
    #[serde(skip)]
    pub io_device_weight: BTreeMap<DevNum, u64>,
    #[serde(skip)]
    pub io_max: BTreeMap<DevNum, IoMax>,
    /// IODeviceLatencyTargetSec: io.latency's target per disk in microseconds (None: none).
    #[serde(skip)]
    pub io_latency: BTreeMap<DevNum, Option<u64>>,
    /// The path the plan names for each device (systemd takes paths, not numbers).
    #[serde(skip)]
    pub device_paths: BTreeMap<DevNum, String>,
    #[serde(skip)]
    pub tasks_max: Option<Limit>,
    /// page size in bytes -> limit
    #[serde(skip)]
    pub hugetlb_max: BTreeMap<u64, Limit>,
    /// Every directive as resolved, for people and `--json`.
    pub settings: Vec<Setting>,
}

impl ResolvedSlice {
    pub fn name(&self) -> &SliceName {
        self.name.as_ref().expect("resolved slices have names")
    }
    pub fn uses_cpuset(&self) -> bool {
        self.allowed_cpus.is_some() || self.allowed_mems.is_some()
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ResolvedPlan {
    /// The plan this was resolved from (unit files keep its own spellings: percentages,
    /// floors).
    #[serde(skip)]
    pub plan: Plan,
    pub source: String,
    pub host: Host,
    /// Parents before children.
    pub slices: Vec<ResolvedSlice>,
    /// The `[iocost]` section for this host: io.cost on these disks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iocost: Option<crate::iocost::ResolvedIocost>,
    pub notes: Vec<Diagnostic>,
}

impl ResolvedPlan {
    pub fn slice(&self, name: &SliceName) -> Option<&ResolvedSlice> {
        self.slices.iter().find(|s| s.name() == name)
    }
}

struct Ctx<'a> {
    plan: &'a Plan,
    host: &'a Host,
    errors: Vec<Diagnostic>,
    notes: Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn err(&mut self, slice: &SliceName, key: &str, at: &At<Value>, msg: String, hint: &str) {
        let mut d = Diagnostic::error(format!("{key} = {}: {msg}", at.raw))
            .at(self.plan.source.at(at.loc))
            .context(format!("[slice.{slice}]"));
        if !hint.is_empty() {
            d = d.hint(hint);
        }
        self.errors.push(d);
    }

    fn memory(&self, spec: &MemSpec) -> (Limit, Option<String>) {
        let page = self.host.page_size;
        let (mut bytes, mut from) = match spec.value {
            MemValue::Infinity => return (Limit::Infinity, None),
            MemValue::Bytes(b) => (b, None),
            MemValue::Percent(p) => {
                let b = (self.host.memory as f64 * p) as u64;
                (
                    b,
                    Some(format!(
                        "{}% of {} RAM = {}",
                        trim_float(p * 100.0),
                        human_bytes(self.host.memory),
                        human_bytes(b / page * page)
                    )),
                )
            }
        };
        if let Some(min) = spec.min {
            if bytes < min {
                bytes = min;
                from = Some(format!(
                    "{}, raised to the floor {}",
                    from.unwrap_or_default(),
                    human_bytes(min)
                ));
            }
        }
        if let Some(max) = spec.max {
            if bytes > max {
                bytes = max;
                from = Some(format!(
                    "{}, lowered to the ceiling {}",
                    from.unwrap_or_default(),
                    human_bytes(max)
                ));
            }
        }
        // The kernel counts memory in pages; round down as it would.
        (Limit::Bytes(bytes / page * page), from)
    }
}

fn trim_float(f: f64) -> String {
    let s = format!("{f:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn limit_setting(directive: &str, l: Limit, from: Option<String>) -> Setting {
    Setting {
        directive: directive.into(),
        value: match l {
            Limit::Bytes(b) => b.to_string(),
            Limit::Infinity => "infinity".into(),
        },
        bytes: l.bytes(),
        from: from.or_else(|| l.bytes().map(human_bytes)),
        toml: l.bytes().map_or("\"infinity\"".into(), |b| b.to_string()),
    }
}

pub(super) fn resolve(plan: &Plan, host: &Host) -> Result<ResolvedPlan> {
    let mut cx = Ctx {
        plan,
        host,
        errors: vec![],
        notes: plan.notes.clone(),
    };
    // Parents first: sort by depth, then name.
    let mut specs: Vec<_> = plan.slices.values().collect();
    specs.sort_by(|a, b| (a.name.depth(), a.name.as_str()).cmp(&(b.name.depth(), b.name.as_str())));
    let mut out: Vec<ResolvedSlice> = Vec::new();
    for spec in specs {
        let name = &spec.name;
        let mut r = ResolvedSlice {
            name: Some(name.clone()),
            unit: name.unit(),
            cgroup_path: name.cgroup_path().display().to_string(),
            description: spec.description.clone(),
            implicit: spec.implicit(),
            ..Default::default()
        };
        for info in super::directives::DIRECTIVES {
            let key = info.name;
            let Some(at) = spec.directives.get(key) else {
                continue;
            };
            resolve_one(&mut cx, name, key, at, &mut r);
        }
        // CPUQuotaPeriodSec without CPUQuota does nothing, as in systemd.
        if let (Some(at), None) = (spec.directives.get("CPUQuotaPeriodSec"), r.cpu_max) {
            cx.notes.push(
                Diagnostic::warning("CPUQuotaPeriodSec has no effect without CPUQuota")
                    .at(plan.source.at(at.loc))
                    .context(format!("[slice.{name}]")),
            );
        }
        cpu::check_nested_cpuset(&mut cx, spec, &r, &out);
        out.push(r);
    }
    let iocost = plan
        .iocost
        .as_ref()
        .and_then(|c| crate::iocost::resolve(c, &plan.source, host, &mut cx.errors));
    if !cx.errors.is_empty() {
        return Err(Error::Invalid(cx.errors));
    }
    Ok(ResolvedPlan {
        plan: plan.clone(),
        source: plan.source.label(),
        host: host.clone(),
        slices: out,
        iocost,
        notes: cx.notes,
    })
}

/// The nearest ancestor-or-self value of a cpuset field, with the slice that sets it.
fn effective(
    out: &[ResolvedSlice],
    start: &ResolvedSlice,
    f: impl Fn(&ResolvedSlice) -> &Option<IdSet>,
) -> Option<(SliceName, IdSet)> {
    let mut cur = Some(start);
    while let Some(s) = cur {
        if let Some(v) = f(s) {
            return Some((s.name().clone(), v.clone()));
        }
        cur = s
            .name()
            .parent()
            .and_then(|p| out.iter().find(|x| x.name() == &p));
    }
    None
}

/// One directive of one slice, by its family.
fn resolve_one(
    cx: &mut Ctx,
    name: &SliceName,
    key: &'static str,
    at: &At<Value>,
    r: &mut ResolvedSlice,
) {
    match &at.value {
        Value::CpuWeight(w) => cpu::weight(r, key, *w),
        Value::Quota(frac) => cpu::quota(cx, name, key, at, *frac, r),
        Value::Ids(ids) => cpu::cpuset(cx, name, key, at, ids, r),
        Value::Memory(spec) => memory::limit(cx, name, key, at, spec, r),
        Value::Hugetlb(list) => memory::hugetlb(cx, name, key, at, list, r),
        Value::Weight(w) => io::weight(r, key, *w),
        Value::DeviceWeights(list) => io::device_weights(cx, name, key, at, list, r),
        Value::DeviceLimits(list) => io::device_limits(cx, name, key, at, list, r),
        Value::DeviceLatency(list) => io::device_latency(cx, name, key, at, list, r),
        Value::Tasks(t) => tasks(cx, key, *t, r),
        Value::SchedSlice(d) => cpu::sched_slice(r, key, *d),
        // CPUQuotaPeriodSec is folded into CPUQuota; the rest set nothing in a cgroup.
        Value::Period(_) | Value::Text(_) | Value::Flag(_) => {}
    }
}

/// TasksMax: a count, infinity, or a share of the system's task limit.
fn tasks(cx: &Ctx, key: &str, t: TasksSpec, r: &mut ResolvedSlice) {
    let (limit, from) = match t {
        TasksSpec::Count(n) => (Limit::Bytes(n), None),
        TasksSpec::Infinity => (Limit::Infinity, None),
        TasksSpec::Percent(p) => {
            let n = ((cx.host.tasks_max as f64) * p).max(1.0) as u64;
            (
                Limit::Bytes(n),
                Some(format!(
                    "{}% of the system's {} tasks",
                    trim_float(p * 100.0),
                    cx.host.tasks_max
                )),
            )
        }
    };
    r.tasks_max = Some(limit);
    r.settings.push(Setting {
        directive: key.into(),
        value: limit.bytes().map_or("infinity".into(), |n| n.to_string()),
        bytes: None,
        from,
        toml: limit
            .bytes()
            .map_or("\"infinity\"".into(), |n| n.to_string()),
    });
}

/// A setting with no derivation.
fn plain(directive: &str, value: String, toml: String) -> Setting {
    Setting {
        directive: directive.into(),
        value,
        bytes: None,
        from: None,
        toml,
    }
}
