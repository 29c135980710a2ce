//! Runtime limits on a slice above its plan: what `bulkhead guard` puts on a sideload and
//! takes back. A [`Throttle`] is an overlay on the slice's resolved plan (a tighter CPUQuota,
//! idle scheduling, tighter I/O bandwidth) plus freezing; each backend turns it into its own
//! operations (control file writes, or runtime unit properties and FreezeUnit), planned
//! against what the system holds now, so only the differences are written.
//! [`Throttle::none`] gives back exactly the plan's values.

use bulkhead_plan::{CpuMax, CpuWeight, IoMax, ResolvedSlice};
use bulkhead_sys::host::DevNum;
use bulkhead_sys::units::Limit;

/// The least CPU time per period the kernel takes (cpu.max and cfs_quota_us: 1 ms).
pub const MIN_QUOTA_US: u64 = 1000;

/// The weight a lifted slice runs at: the default weight, a fair share beside the others.
pub const LIFTED_WEIGHT: u64 = 100;

/// Limits on top of the plan. The default is none.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Throttle {
    /// CPU time in CPUs (0.05: 5% of one CPU) per `period_us`; `None`: the plan's CPUQuota.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// The quota period in microseconds, used with `cpu`.
    pub period_us: u64,
    /// The slice scheduled as idle (cpu.idle, CPUWeight=idle); false: the plan's weight.
    pub idle: bool,
    /// Frozen (cgroup.freeze, freezer.state, FreezeUnit).
    pub frozen: bool,
    /// Lifted out of idle scheduling (the guard's `cpu_keep`): CPUWeight=100 at least, over
    /// the plan's CPUWeight=idle or a lower weight, bounded by `cpu`. Wins over `idle`.
    #[serde(default)]
    pub lifted: bool,
    /// Read and write bandwidth in bytes/s on every disk; `None`: the plan's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_bps: Option<u64>,
}

impl Throttle {
    pub fn none() -> Throttle {
        Throttle::default()
    }

    pub fn is_none(&self) -> bool {
        self.cpu.is_none() && !self.idle && !self.frozen && !self.lifted && self.io_bps.is_none()
    }

    /// The slice as it should be with the throttle on: the plan's values, tightened.
    pub fn overlay(&self, plan: &ResolvedSlice, disks: &[DevNum]) -> ResolvedSlice {
        let mut s = plan.clone();
        if let Some(ours) = self.cpu_max() {
            s.cpu_max = Some(match plan.cpu_max {
                // The plan's own quota stays when it is tighter.
                Some(p) if share(p) <= share(ours) => p,
                _ => ours,
            });
        }
        if self.lifted {
            s.cpu_weight = Some(match plan.cpu_weight {
                Some(CpuWeight::Weight(n)) if n >= LIFTED_WEIGHT => CpuWeight::Weight(n),
                _ => CpuWeight::Weight(LIFTED_WEIGHT),
            });
        } else if self.idle {
            s.cpu_weight = Some(CpuWeight::Idle);
        }
        if let Some(bps) = self.io_bps {
            for d in disks {
                let m: &mut IoMax = s.io_max.entry(*d).or_default();
                m.rbps = Some(tighter(m.rbps, bps));
                m.wbps = Some(tighter(m.wbps, bps));
            }
        }
        s
    }

    /// The CPU quota and period the throttle writes (the one source of both, for the
    /// writes and for [`Throttle::describe`]). A quota below the kernel's 1 ms gets a longer
    /// period instead, so small shares stay what they say (5% of one CPU: 1 ms per 20 ms).
    pub fn cpu_max(&self) -> Option<CpuMax> {
        let cpus = self.cpu?;
        let mut period_us = self.period_us.clamp(MIN_QUOTA_US, 1_000_000);
        if cpus > 0.0 && cpus * (period_us as f64) < MIN_QUOTA_US as f64 {
            period_us = ((MIN_QUOTA_US as f64 / cpus).ceil() as u64).min(1_000_000);
        }
        let quota_us = ((cpus * period_us as f64) as u64).max(MIN_QUOTA_US);
        Some(CpuMax {
            quota_us,
            period_us,
        })
    }

    /// One line for people: `CPUQuota=25% per 10ms, CPUWeight=idle, frozen, IO bandwidth
    /// 8M/s`, with the period that is written.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let (Some(c), Some(m)) = (self.cpu, self.cpu_max()) {
            parts.push(format!(
                "CPUQuota={:.0}% per {}",
                c * 100.0,
                period_text(m.period_us)
            ));
        }
        if self.lifted {
            parts.push(format!("CPUWeight={LIFTED_WEIGHT} (lifted from idle)"));
        } else if self.idle {
            parts.push("CPUWeight=idle".into());
        }
        if self.frozen {
            parts.push("frozen".into());
        }
        if let Some(b) = self.io_bps {
            parts.push(format!(
                "IO bandwidth {}/s",
                bulkhead_sys::units::human_bytes(b)
            ));
        }
        if parts.is_empty() {
            "as planned".into()
        } else {
            parts.join(", ")
        }
    }
}

/// A period as systemd writes CPUQuotaPeriodSec: `20ms`, `1.5ms`.
fn period_text(us: u64) -> String {
    if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{}ms", us as f64 / 1000.0)
    }
}

fn share(m: CpuMax) -> f64 {
    m.quota_us as f64 / m.period_us as f64
}

fn tighter(plan: Option<Limit>, bps: u64) -> Limit {
    match plan {
        Some(Limit::Bytes(p)) if p <= bps => Limit::Bytes(p),
        _ => Limit::Bytes(bps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice() -> ResolvedSlice {
        ResolvedSlice {
            name: Some(bulkhead_plan::SliceName::parse("db-helper").unwrap()),
            ..Default::default()
        }
    }

    #[test]
    fn overlay_tightens_and_none_is_the_plan() {
        let d = DevNum { major: 8, minor: 0 };
        let mut plan = slice();
        plan.cpu_max = Some(CpuMax {
            quota_us: 20_000,
            period_us: 100_000,
        });
        let none = Throttle::none().overlay(&plan, &[d]);
        assert_eq!(none.cpu_max, plan.cpu_max);
        assert!(none.io_max.is_empty());
        let t = Throttle {
            cpu: Some(0.05),
            period_us: 10_000,
            idle: true,
            frozen: false,
            lifted: false,
            io_bps: Some(1 << 20),
        };
        let s = t.overlay(&plan, &[d]);
        // 5% of one CPU is 0.5 ms per 10 ms, below the kernel's least quota: 1 ms per 20 ms.
        assert_eq!(
            s.cpu_max,
            Some(CpuMax {
                quota_us: 1000,
                period_us: 20_000
            })
        );
        // ... and says the period it writes (issue 28: "per 10ms" beside cfs_period_us 20000).
        assert!(
            t.describe()
                .starts_with("CPUQuota=5% per 20ms, CPUWeight=idle"),
            "{}",
            t.describe()
        );
        assert_eq!(s.cpu_weight, Some(CpuWeight::Idle));
        assert_eq!(s.io_max[&d].wbps, Some(Limit::Bytes(1 << 20)));
        // A looser throttle keeps the plan's tighter quota.
        let loose = Throttle {
            cpu: Some(1.5),
            period_us: 10_000,
            ..Default::default()
        };
        assert_eq!(loose.overlay(&plan, &[]).cpu_max, plan.cpu_max);
        assert!(Throttle::none().is_none() && !t.is_none());
        // Lifted: out of idle (the plan's or the throttle's) at the default weight, bounded.
        let mut idle_plan = slice();
        idle_plan.cpu_weight = Some(CpuWeight::Idle);
        let lifted = Throttle {
            cpu: Some(0.10),
            lifted: true,
            ..t
        };
        let s = lifted.overlay(&idle_plan, &[]);
        assert_eq!(s.cpu_weight, Some(CpuWeight::Weight(LIFTED_WEIGHT)));
        assert_eq!(s.cpu_max.map(share), Some(0.10));
        assert!(
            lifted
                .describe()
                .contains("CPUWeight=100 (lifted from idle)"),
            "{}",
            lifted.describe()
        );
        // A plan's higher weight stays.
        idle_plan.cpu_weight = Some(CpuWeight::Weight(500));
        let s = lifted.overlay(&idle_plan, &[]);
        assert_eq!(s.cpu_weight, Some(CpuWeight::Weight(500)));
    }
}
