//! IOWeight, IODeviceWeight, IODeviceLatencyTargetSec and the IO*Max limits: io.weight /
//! io.bfq.weight, io.latency and io.max on v2; blkio.bfq.* and blkio.throttle.* on v1 (which
//! has no latency target).

use super::{v, Cmp, Mapper, Reset, Want};
use bulkhead_plan::convert::io_weight_to_bfq;
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::host::DevNum;
use bulkhead_sys::units::Limit;

impl Mapper<'_> {
    pub(super) fn weight_hint(&self, disk: &str) -> String {
        self.caps.weight_hint(disk)
    }

    pub(super) fn weight_effective(&mut self, directive: &str) {
        let finding = self.caps.weight_finding(directive, self.slice.name());
        self.warnings.extend(finding);
    }

    /// Whether the disk uses BFQ: `bfq_devices` names it (its kernel name, or `MAJ:MIN`).
    pub(super) fn device_is_bfq(&self, d: DevNum) -> bool {
        let bfq = &self.caps.bfq_devices;
        bfq.contains(&d.to_string()) || d.kernel_name().is_some_and(|n| bfq.contains(&n))
    }

    pub(super) fn device_weights(&mut self, file: &str, cost: bool) -> Vec<(String, String)> {
        let mut lines = Vec::new();
        let entries: Vec<(DevNum, u64)> = self
            .slice
            .io_device_weight
            .iter()
            .map(|(d, w)| (*d, *w))
            .collect();
        for (d, w) in entries {
            if cost {
                lines.push((d.to_string(), w.to_string()));
            } else if self.device_is_bfq(d) {
                lines.push((d.to_string(), io_weight_to_bfq(w).to_string()));
            } else {
                self.warn(
                    &format!("IODeviceWeight={d} {w}"),
                    &format!(
                        "device {d} ({}) does not use the BFQ scheduler, so {file} refuses per-device weights",
                        d.kernel_name().unwrap_or_else(|| "unknown".into())
                    ),
                    &self.weight_hint(&d.kernel_name().unwrap_or_else(|| "DISK".into())),
                );
            }
        }
        lines
    }

    pub(super) fn io_v2(&mut self) {
        let s = self.slice;
        let w = s.io_weight;
        if w.is_some() {
            self.weight_effective("IOWeight");
        }
        if !s.io_device_weight.is_empty() {
            self.weight_effective("IODeviceWeight");
        }
        let why = w.map_or("IOWeight (default)".into(), |w| format!("IOWeight={w}"));
        if self.caps.io_cost {
            let mut lines = vec![("default".to_string(), w.unwrap_or(100).to_string())];
            lines.extend(self.device_weights("io.weight", true));
            self.wants.push(Want::Lines {
                file: "io.weight".into(),
                lines,
                why: why.clone(),
                reset: Reset::Default,
            });
        }
        if self.caps.bfq {
            let mut lines = vec![(
                "default".to_string(),
                io_weight_to_bfq(w.unwrap_or(100)).to_string(),
            )];
            lines.extend(self.device_weights("io.bfq.weight", false));
            self.wants.push(Want::Lines {
                file: "io.bfq.weight".into(),
                lines,
                why,
                reset: Reset::Default,
            });
        } else if w.is_some() && !self.caps.io_cost {
            let hint = self.weight_hint("DISK");
            self.warn(
                "IOWeight",
                "the kernel has neither BFQ nor io.cost enabled on a disk",
                &hint,
            );
        }
        let lim = |l: Option<Limit>| l.unwrap_or(Limit::Infinity).v2();
        let lines = s
            .io_max
            .iter()
            .map(|(d, m)| {
                (
                    d.to_string(),
                    format!(
                        "rbps={} wbps={} riops={} wiops={}",
                        lim(m.rbps),
                        lim(m.wbps),
                        lim(m.riops),
                        lim(m.wiops)
                    ),
                )
            })
            .collect();
        self.wants.push(Want::Lines {
            file: "io.max".into(),
            lines,
            why: "IO*BandwidthMax / IO*IOPSMax".into(),
            reset: Reset::IoMax,
        });
        if !self.caps.io_latency {
            if !s.io_latency.is_empty() {
                self.warn(
                    "IODeviceLatencyTargetSec",
                    "this kernel has no io.latency (built without CONFIG_BLK_CGROUP_IOLATENCY, as Debian 12's is), so it has no effect here",
                    "use io.cost ([iocost]) with IOWeight, or IO*BandwidthMax on the other slices",
                );
            }
            return;
        }
        let lines = s
            .io_latency
            .iter()
            .map(|(d, t)| {
                let target = t.map_or("max".to_string(), |us| us.to_string());
                (d.to_string(), format!("target={target}"))
            })
            .collect();
        self.wants.push(Want::Lines {
            file: "io.latency".into(),
            lines,
            why: "IODeviceLatencyTargetSec".into(),
            reset: Reset::Latency,
        });
    }

    pub(super) fn io_v1(&mut self) {
        let s = self.slice;
        if !s.io_latency.is_empty() {
            self.warn(
                "IODeviceLatencyTargetSec",
                "io.latency is a cgroup v2 controller and this host's I/O controller (blkio) is on cgroup v1, so it has no effect here",
                "on v1 and hybrid hosts, cap the other slices with IOReadBandwidthMax/IOWriteBandwidthMax instead; io.latency needs the io controller on cgroup v2 (systemd.unified_cgroup_hierarchy=1)",
            );
        }
        if self.caps.bfq {
            if s.io_weight.is_some() {
                self.weight_effective("IOWeight");
                self.warnings.push(
                    Diagnostic::note(
                        "IOWeight on cgroup v1 covers reads and direct I/O only: buffered writes and their fsync writeback are charged to the root cgroup (cgroup writeback needs cgroup v2)",
                    )
                    .context(format!("[slice.{}]", s.name())),
                );
            }
            let w = s.io_weight.unwrap_or(100);
            let why = s
                .io_weight
                .map_or("IOWeight (default)".into(), |w| format!("IOWeight={w}"));
            self.wants.push(v(
                "blkio.bfq.weight",
                io_weight_to_bfq(w).to_string(),
                why,
                Cmp::Number,
                s.io_weight.is_none(),
            ));
            let lines = self.device_weights("blkio.bfq.weight_device", false);
            self.wants.push(Want::Lines {
                file: "blkio.bfq.weight_device".into(),
                lines,
                why: "IODeviceWeight".into(),
                // bfq_io_set_device_weight refuses 0; "default" clears a device line.
                reset: Reset::Default,
            });
        } else if s.io_weight.is_some() || !s.io_device_weight.is_empty() {
            let hint = self.weight_hint("DISK");
            let why = if self.caps.bfq_module {
                "the BFQ scheduler is not loaded (no blkio.bfq.weight)"
            } else {
                "the kernel has no BFQ scheduler (no blkio.bfq.weight)"
            };
            self.warn("IOWeight", why, &hint);
        }
        for (file, key, pick) in [
            ("blkio.throttle.read_bps_device", "IOReadBandwidthMax", 0),
            ("blkio.throttle.write_bps_device", "IOWriteBandwidthMax", 1),
            ("blkio.throttle.read_iops_device", "IOReadIOPSMax", 2),
            ("blkio.throttle.write_iops_device", "IOWriteIOPSMax", 3),
        ] {
            let lines = s
                .io_max
                .iter()
                .filter_map(|(d, m)| {
                    let l = [m.rbps, m.wbps, m.riops, m.wiops][pick]?;
                    // 0 clears a v1 throttle entry.
                    Some((d.to_string(), l.bytes().unwrap_or(0).to_string()))
                })
                .collect();
            self.wants.push(Want::Lines {
                file: file.into(),
                lines,
                why: key.into(),
                reset: Reset::Zero,
            });
        }
    }
}
