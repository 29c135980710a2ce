//! CPUWeight, CPUQuota and CPUQuotaPeriodSec: cpu.weight, cpu.idle and cpu.max on v2;
//! cpu.shares and cpu.cfs_* on v1.

use super::{v, Cmp, Mapper};
use crate::layout::Version;
use bulkhead_plan::convert::weight_to_shares;
use bulkhead_plan::CpuWeight;

impl Mapper<'_> {
    pub(super) fn cpu(&mut self, version: Version) {
        let s = self.slice;
        if let (Some(scx), Some(w)) = (self.caps.sched_ext.clone(), s.cpu_weight) {
            let directive = match w {
                CpuWeight::Idle => "CPUWeight=idle".to_string(),
                CpuWeight::Weight(n) => format!("CPUWeight={n}"),
            };
            self.warnings.push(
                bulkhead_sys::error::Diagnostic::warning(format!(
                    "{directive} is not in force: the sched_ext scheduler '{scx}' is loaded, which replaces the kernel's fair scheduler and honours cgroup CPU weights and cpu.idle only if it implements them (most do not): CPU protection is not in force"
                ))
                .context(format!("[slice.{}]", s.name()))
                .hint("stop the sched_ext scheduler (its service, e.g. systemctl stop scx), or confirm that it implements cgroup CPU weights; the files are written and take effect when it unloads"),
            );
        }
        let weight_file = if version == Version::V2 {
            "cpu.weight"
        } else {
            "cpu.shares"
        };
        let to_file = |w: u64| {
            if version == Version::V2 {
                w
            } else {
                weight_to_shares(w)
            }
        };
        match s.cpu_weight {
            Some(CpuWeight::Idle) if self.caps.cpu_idle => {
                self.wants
                    .push(v("cpu.idle", "1", "CPUWeight=idle", Cmp::Exact, false));
            }
            Some(CpuWeight::Idle) => {
                self.warn(
                    "CPUWeight=idle",
                    "this kernel has no cpu.idle (it needs Linux 5.15); the lowest weight is used instead",
                    "upgrade the kernel, or write CPUWeight = 1",
                );
                self.wants.push(v(
                    weight_file,
                    to_file(1).to_string(),
                    "CPUWeight=idle (as 1)",
                    Cmp::Number,
                    false,
                ));
            }
            w => {
                if self.caps.cpu_idle {
                    // Weights cannot be written while a group is idle: leave idle first.
                    self.wants
                        .push(v("cpu.idle", "0", "CPUWeight (not idle)", Cmp::Exact, true));
                }
                let (n, why) = match w {
                    Some(CpuWeight::Weight(n)) => (n, format!("CPUWeight={n}")),
                    _ => (100, "CPUWeight (default)".into()),
                };
                self.wants.push(v(
                    weight_file,
                    to_file(n).to_string(),
                    why,
                    Cmp::Number,
                    w.is_none(),
                ));
            }
        }
        let why = s.cpu_max.map_or("CPUQuota (default)".to_string(), |m| {
            format!(
                "CPUQuota={}% per {}us",
                m.quota_us * 100 / m.period_us,
                m.period_us
            )
        });
        match version {
            Version::V2 => {
                let value = s.cpu_max.map_or("max 100000".into(), |m| {
                    format!("{} {}", m.quota_us, m.period_us)
                });
                self.wants
                    .push(v("cpu.max", value, why, Cmp::Tokens, s.cpu_max.is_none()));
            }
            Version::V1 => {
                let (q, p) = s.cpu_max.map_or(("-1".to_string(), 100_000), |m| {
                    (m.quota_us.to_string(), m.period_us)
                });
                self.wants.push(v(
                    "cpu.cfs_period_us",
                    p.to_string(),
                    why.clone(),
                    Cmp::Number,
                    s.cpu_max.is_none(),
                ));
                self.wants.push(v(
                    "cpu.cfs_quota_us",
                    q,
                    why,
                    Cmp::Number,
                    s.cpu_max.is_none(),
                ));
            }
        }
    }
}
