//! [`Plan`] + [`Host`] -> [`ResolvedPlan`]: every value in bytes, weights and device numbers.

use super::{At, CpuWeight, MemSpec, MemValue, Plan, SliceName, TasksSpec, Value};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::{page_size_cgroup_name, DevNum, Host};
use bulkhead_sys::units::{human_bytes, IdSet, Limit};
use std::collections::BTreeMap;
use std::path::Path;

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
        // A child's cpuset must be inside its parent's.
        if let Some(parent) = name
            .parent()
            .and_then(|p| out.iter().find(|s| s.name() == &p))
        {
            for (key, mine, theirs) in [
                (
                    "AllowedCPUs",
                    &r.allowed_cpus,
                    effective(&out, parent, |s| &s.allowed_cpus),
                ),
                (
                    "AllowedMemoryNodes",
                    &r.allowed_mems,
                    effective(&out, parent, |s| &s.allowed_mems),
                ),
            ] {
                if let (Some(m), Some((owner, t))) = (mine, theirs) {
                    if !m.is_subset(&t) {
                        let at = &spec.directives[key];
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
        out.push(r);
    }
    if !cx.errors.is_empty() {
        return Err(Error::Invalid(cx.errors));
    }
    Ok(ResolvedPlan {
        plan: plan.clone(),
        source: plan.source.label(),
        host: host.clone(),
        slices: out,
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

fn resolve_one(
    cx: &mut Ctx,
    name: &SliceName,
    key: &'static str,
    at: &At<Value>,
    r: &mut ResolvedSlice,
) {
    let mut push = |s: Setting| r.settings.push(s);
    match (&at.value, key) {
        (Value::CpuWeight(w), _) => {
            r.cpu_weight = Some(*w);
            push(Setting {
                directive: key.into(),
                value: match w {
                    CpuWeight::Weight(n) => n.to_string(),
                    CpuWeight::Idle => "idle".into(),
                },
                bytes: None,
                from: None,
                toml: match w {
                    CpuWeight::Weight(n) => n.to_string(),
                    CpuWeight::Idle => "\"idle\"".into(),
                },
            });
        }
        (Value::Quota(frac), _) => {
            let period_us = r_period(cx, name).unwrap_or(100_000);
            let quota_us = (frac * period_us as f64).round() as u64;
            if quota_us < 1000 {
                cx.err(
                    name,
                    key,
                    at,
                    format!(
                        "{quota_us}us per {period_us}us period is below the kernel's 1ms minimum"
                    ),
                    "raise CPUQuota or lengthen CPUQuotaPeriodSec",
                );
                return;
            }
            let cpus = cx.host.cpu_count() as f64;
            if *frac > cpus {
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
            push(Setting {
                directive: key.into(),
                value: format!("{}%", trim_float(frac * 100.0)),
                bytes: None,
                from: Some(format!("{quota_us}us per {period_us}us")),
                toml: format!("\"{}%\"", trim_float(frac * 100.0)),
            });
            if period_us != 100_000 {
                push(Setting {
                    directive: "CPUQuotaPeriodSec".into(),
                    value: format!("{}us", period_us),
                    bytes: None,
                    from: None,
                    toml: format!("\"{period_us}us\""),
                });
            }
        }
        (Value::Period(_), _) => {} // folded into CPUQuota
        (Value::Ids(ids), "AllowedCPUs" | "AllowedMemoryNodes") => {
            let (avail, what) = if key == "AllowedCPUs" {
                (&cx.host.cpus, "online CPUs")
            } else {
                (&cx.host.mem_nodes, "NUMA nodes with memory")
            };
            if !ids.is_subset(avail) {
                cx.err(
                    name,
                    key,
                    at,
                    format!("this host's {what} are {avail}"),
                    "name only CPUs or nodes that exist here",
                );
                return;
            }
            if key == "AllowedCPUs" {
                r.allowed_cpus = Some(ids.clone());
            } else {
                r.allowed_mems = Some(ids.clone());
            }
            push(Setting {
                directive: key.into(),
                value: ids.to_string(),
                bytes: None,
                from: None,
                toml: format!("\"{ids}\""),
            });
        }
        (Value::Memory(spec), _) => {
            let (limit, from) = cx.memory(spec);
            if let Limit::Bytes(b) = limit {
                if b > cx.host.memory && key != "MemorySwapMax" {
                    cx.notes.push(
                        Diagnostic::warning(format!(
                            "{key} = {} is more than this host's {} of RAM, so it never limits",
                            at.raw,
                            human_bytes(cx.host.memory)
                        ))
                        .at(cx.plan.source.at(at.loc))
                        .context(format!("[slice.{name}]")),
                    );
                }
            }
            match key {
                "MemoryMin" => r.memory_min = Some(limit),
                "MemoryLow" => r.memory_low = Some(limit),
                "MemoryHigh" => r.memory_high = Some(limit),
                "MemoryMax" => r.memory_max = Some(limit),
                _ => r.memory_swap_max = Some(limit),
            }
            push(limit_setting(key, limit, from));
        }
        (Value::Weight(w), _) => {
            r.io_weight = Some(*w);
            push(Setting {
                directive: key.into(),
                value: w.to_string(),
                bytes: None,
                from: None,
                toml: w.to_string(),
            });
        }
        (Value::DeviceWeights(list), _) => {
            for (dev, w) in list {
                match DevNum::resolve(Path::new(dev)) {
                    Ok(d) => {
                        r.io_device_weight.insert(d, *w);
                        r.device_paths.insert(d, dev.clone());
                        push(Setting {
                            directive: key.into(),
                            value: format!("{d} {w}"),
                            bytes: None,
                            from: Some(format!("device {d}")),
                            toml: format!("\"{dev} {w}\""),
                        });
                    }
                    Err(m) => cx.err(
                        name,
                        key,
                        at,
                        m,
                        "name an existing block device or a path on one",
                    ),
                }
            }
        }
        (Value::DeviceLimits(list), _) => {
            for (dev, l) in list {
                match DevNum::resolve(Path::new(dev)) {
                    Ok(d) => {
                        r.device_paths.insert(d, dev.clone());
                        let e = r.io_max.entry(d).or_default();
                        match key {
                            "IOReadBandwidthMax" => e.rbps = Some(*l),
                            "IOWriteBandwidthMax" => e.wbps = Some(*l),
                            "IOReadIOPSMax" => e.riops = Some(*l),
                            _ => e.wiops = Some(*l),
                        }
                        push(Setting {
                            directive: key.into(),
                            value: format!(
                                "{d} {}",
                                l.bytes().map_or("infinity".into(), |b| b.to_string())
                            ),
                            bytes: None,
                            from: Some(format!("device {d}")),
                            toml: format!(
                                "\"{dev} {}\"",
                                l.bytes().map_or("infinity".into(), |b| b.to_string())
                            ),
                        });
                    }
                    Err(m) => cx.err(
                        name,
                        key,
                        at,
                        m,
                        "name an existing block device or a path on one",
                    ),
                }
            }
        }
        (Value::Tasks(t), _) => {
            let (limit, from) = match t {
                TasksSpec::Count(n) => (Limit::Bytes(*n), None),
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
            push(Setting {
                directive: key.into(),
                value: limit.bytes().map_or("infinity".into(), |n| n.to_string()),
                bytes: None,
                from,
                toml: limit
                    .bytes()
                    .map_or("\"infinity\"".into(), |n| n.to_string()),
            });
        }
        (Value::Hugetlb(list), _) => {
            for (size, spec) in list {
                if !cx.host.hugepage_sizes.contains(size) {
                    let offered: Vec<String> = cx
                        .host
                        .hugepage_sizes
                        .iter()
                        .map(|s| human_bytes(*s))
                        .collect();
                    cx.err(
                        name,
                        key,
                        at,
                        format!("this kernel has no {} huge pages", human_bytes(*size)),
                        &format!(
                            "page sizes here (from /sys/kernel/mm/hugepages): {}",
                            offered.join(", ")
                        ),
                    );
                    continue;
                }
                let (limit, from) = cx.memory(spec);
                // Whole pages only.
                let limit = match limit {
                    Limit::Bytes(b) => Limit::Bytes(b / size * size),
                    l => l,
                };
                r.hugetlb_max.insert(*size, limit);
                let mut s = limit_setting("HugetlbMax", limit, from);
                s.value = format!("{}={}", page_size_cgroup_name(*size), s.value);
                s.toml = format!("\"{}\" = {}", human_bytes(*size), s.toml);
                if let Limit::Bytes(b) = limit {
                    s.from = Some(format!("{} pages of {}", b / size, human_bytes(*size)));
                }
                push(s);
            }
        }
        (Value::Text(_), _) | (Value::Flag(_), _) => {}
        (v, k) => unreachable!("directive {k} has value {v:?}"),
    }

    fn r_period(cx: &Ctx, name: &SliceName) -> Option<u64> {
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
}
