//! What one plan directive becomes in a unit file for one systemd version: lines for the
//! `.slice`, lines for the floor drop-in, and what [X-Bulkhead] keeps when the lines do not
//! carry the plan's value exactly.

use super::super::versions::{spelling, Spelling, Version, CPU_IDLE_SINCE, PERCENT_SINCE};
use super::text::{
    duration, esc, latency_text, limit_text, mem_text, size, trim_float, value_toml,
};
use bulkhead_plan::convert::{
    blkio_to_io_weight, io_weight_to_blkio, shares_to_weight, weight_to_shares,
};
use bulkhead_plan::{CpuWeight, MemSpec, MemValue, ResolvedSlice, TasksSpec, Value};
use bulkhead_sys::host::Host;
use bulkhead_sys::units::{human_bytes, Limit};

/// What one directive becomes.
#[derive(Default)]
pub struct Lines {
    pub slice: Vec<String>,
    pub floor: Vec<String>,
    /// The plan's own value for [X-Bulkhead], when the lines above do not carry it exactly.
    pub keep: Option<String>,
    pub comment: Option<String>,
}

/// The directive, its value, and where the lines go.
struct Cx<'a> {
    key: &'a str,
    v: &'a Value,
    r: &'a ResolvedSlice,
    host: &'a Host,
    version: Version,
    spelling: Spelling,
    l: Lines,
}

pub fn lines_for(key: &str, v: &Value, r: &ResolvedSlice, host: &Host, version: Version) -> Lines {
    let mut cx = Cx {
        key,
        v,
        r,
        host,
        version,
        spelling: spelling(key, version),
        l: Lines::default(),
    };
    match v {
        Value::Flag(b) => cx.flag(*b),
        Value::CpuWeight(w) => cx.cpu_weight(*w),
        Value::Quota(f) => {
            cx.l.slice
                .push(format!("CPUQuota={}%", trim_float(f * 100.0)))
        }
        Value::Period(d) => {
            let text = duration(*d);
            cx.native_or_drop(|k| format!("{k}={text}"));
        }
        Value::Ids(ids) => cx.native_or_drop(|k| format!("{k}={ids}")),
        Value::Memory(spec) => cx.memory(spec),
        Value::Weight(w) => cx.io_weight(*w),
        Value::DeviceWeights(list) => cx.device_weights(list),
        Value::DeviceLimits(list) => cx.device_limits(list),
        Value::DeviceLatency(list) => cx.device_latency(list),
        Value::Tasks(t) => cx.tasks(*t),
        Value::SchedSlice(_) => {
            cx.keep();
            cx.l.comment = Some(
                "CPUSchedulingSliceSec is kept for bulkhead only: systemd has no such directive (bulkhead sets the slice on the tasks it places)"
                    .into(),
            );
        }
        Value::Hugetlb(_) => {
            cx.keep();
            cx.l.comment = Some(
                "HugetlbMax is kept for bulkhead only: systemd has no directive for the hugetlb controller"
                    .into(),
            );
        }
        Value::Text(_) => {}
    }
    cx.l
}

impl Cx<'_> {
    /// Keep the plan's own value in [X-Bulkhead].
    fn keep(&mut self) {
        self.l.keep = Some(value_toml(self.v));
    }

    /// The directive cannot be written for this version: keep it and say so.
    fn dropped(&mut self) {
        self.keep();
        let (key, version) = (self.key, self.version);
        self.l.comment = Some(match self.spelling {
            Spelling::Missing { since: Some(s) } => format!(
                "{key} is left out: systemd {version} does not know it (it came in systemd {s})"
            ),
            _ => format!("{key} is left out: systemd has no such directive"),
        });
    }

    /// The name to write the directive under, or None (dropped) when this version has none.
    fn name(&mut self) -> Option<String> {
        match self.spelling {
            Spelling::Native => Some(self.key.to_string()),
            Spelling::Legacy(old) => Some(old.to_string()),
            Spelling::Missing { .. } => {
                self.dropped();
                None
            }
        }
    }

    /// A directive with no legacy spelling: written natively or dropped.
    fn native_or_drop(&mut self, line: impl FnOnce(&str) -> String) {
        if self.spelling == Spelling::Native {
            self.l.slice.push(line(self.key));
        } else {
            self.dropped();
        }
    }

    fn flag(&mut self, b: bool) {
        let word = if b { "yes" } else { "no" };
        match self.spelling {
            Spelling::Native => self.l.slice.push(format!("{}={word}", self.key)),
            Spelling::Legacy(old) => {
                self.l.slice.push(format!("{old}={word}"));
                self.keep();
            }
            Spelling::Missing { .. } => self.dropped(),
        }
    }

    fn cpu_weight(&mut self, w: CpuWeight) {
        let (n, idle) = match w {
            CpuWeight::Weight(n) => (n, false),
            CpuWeight::Idle => (1, true),
        };
        let version = self.version;
        if self.spelling != Spelling::Native {
            let shares = weight_to_shares(n);
            self.l.slice.push(format!("CPUShares={shares}"));
            if idle || shares_to_weight(shares) != n {
                self.keep();
            }
        } else if idle && version >= CPU_IDLE_SINCE {
            self.l.slice.push("CPUWeight=idle".into());
        } else {
            self.l.slice.push(format!("CPUWeight={n}"));
            if idle {
                self.keep();
                self.l.comment = Some(format!(
                    "CPUWeight=idle is written as CPUWeight=1: systemd {version} has no idle scheduling (it came in systemd {CPU_IDLE_SINCE})"
                ));
            }
        }
    }

    fn memory(&mut self, spec: &MemSpec) {
        let Some(name) = self.name() else { return };
        let resolved = resolved_mem(self.r, self.key);
        let version = self.version;
        if matches!(spec.value, MemValue::Percent(_)) && version < PERCENT_SINCE {
            // No percentages before 231: the bytes for the target host.
            if let Some(res) = resolved {
                self.l.slice.push(format!("{name}={}", mem_limit(res)));
            }
            self.keep();
            self.l.comment = Some(format!(
                "{}={} is written in bytes for a host with {} of RAM: systemd {version} takes no percentages",
                self.key,
                mem_text(spec.value),
                human_bytes(self.host.memory)
            ));
            return;
        }
        self.l
            .slice
            .push(format!("{name}={}", mem_text(spec.value)));
        if spec.min.is_none() && spec.max.is_none() {
            return;
        }
        self.keep();
        // Does a bound decide the value on this host?
        let base = match spec.value {
            MemValue::Bytes(b) => Some(b),
            MemValue::Percent(p) => Some((self.host.memory as f64 * p) as u64),
            MemValue::Infinity => None,
        };
        let binds = base
            .is_some_and(|b| spec.min.is_some_and(|m| b < m) || spec.max.is_some_and(|m| b > m));
        if let (true, Some(res)) = (binds, resolved) {
            self.l.floor.push(format!("{name}={}", mem_limit(res)));
        }
    }

    fn io_weight(&mut self, w: u64) {
        if self.spelling == Spelling::Native {
            self.l.slice.push(format!("{}={w}", self.key));
            return;
        }
        let b = io_weight_to_blkio(w);
        self.l.slice.push(format!("BlockIOWeight={b}"));
        if blkio_to_io_weight(b) != w {
            self.keep();
        }
    }

    fn device_weights(&mut self, list: &[(String, u64)]) {
        for (d, w) in list {
            if self.spelling == Spelling::Native {
                self.l.slice.push(format!("{}={} {w}", self.key, esc(d)));
                continue;
            }
            let b = io_weight_to_blkio(*w);
            self.l
                .slice
                .push(format!("BlockIODeviceWeight={} {b}", esc(d)));
            if blkio_to_io_weight(b) != *w {
                self.keep();
            }
        }
    }

    fn device_limits(&mut self, list: &[(String, Limit)]) {
        let Some(name) = self.name() else { return };
        for (d, lim) in list {
            self.l
                .slice
                .push(format!("{name}={} {}", esc(d), limit_text(lim)));
        }
    }

    fn device_latency(&mut self, list: &[(String, Option<std::time::Duration>)]) {
        let Some(name) = self.name() else { return };
        for (d, t) in list {
            self.l
                .slice
                .push(format!("{name}={} {}", esc(d), latency_text(*t)));
        }
    }

    fn tasks(&mut self, t: TasksSpec) {
        if self.spelling != Spelling::Native {
            self.dropped();
            return;
        }
        let version = self.version;
        match t {
            TasksSpec::Percent(p) if version < PERCENT_SINCE => {
                if let Some(Limit::Bytes(n)) = self.r.tasks_max {
                    self.l.slice.push(format!("TasksMax={n}"));
                }
                self.keep();
                self.l.comment = Some(format!(
                    "TasksMax={}% is written as a count for a host with a limit of {} tasks: systemd {version} takes no percentages",
                    trim_float(p * 100.0),
                    self.host.tasks_max
                ));
            }
            TasksSpec::Percent(p) => self
                .l
                .slice
                .push(format!("TasksMax={}%", trim_float(p * 100.0))),
            TasksSpec::Count(n) => self.l.slice.push(format!("TasksMax={n}")),
            TasksSpec::Infinity => self.l.slice.push("TasksMax=infinity".into()),
        }
    }
}

/// The resolved limit of a memory directive on the target host.
fn resolved_mem(r: &ResolvedSlice, key: &str) -> Option<Limit> {
    match key {
        "MemoryMin" => r.memory_min,
        "MemoryLow" => r.memory_low,
        "MemoryHigh" => r.memory_high,
        "MemoryMax" => r.memory_max,
        "MemorySwapMax" => r.memory_swap_max,
        _ => None,
    }
}

fn mem_limit(l: Limit) -> String {
    match l {
        Limit::Bytes(b) => size(b),
        Limit::Infinity => "infinity".into(),
    }
}
