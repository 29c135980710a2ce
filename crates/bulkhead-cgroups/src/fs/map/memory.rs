//! MemoryMin/Low/High/Max and MemorySwapMax: the memory.* files of v2; on v1 the
//! limit, memory+swap and swappiness files that approximate them.

use super::{v, Cmp, Mapper, Want};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::units::Limit;

impl Mapper<'_> {
    pub(super) fn memory_v2(&mut self) {
        let s = self.slice;
        if s.memory_swap_max.is_some() && !self.caps.swap_v2 {
            self.warn(
                "MemorySwapMax",
                "this kernel has no memory.swap.max (no swap accounting)",
                "boot without cgroup.memory=noswap, or drop MemorySwapMax",
            );
        }
        for (file, val, key, default) in [
            ("memory.min", s.memory_min, "MemoryMin", Limit::Bytes(0)),
            ("memory.low", s.memory_low, "MemoryLow", Limit::Bytes(0)),
            ("memory.high", s.memory_high, "MemoryHigh", Limit::Infinity),
            ("memory.max", s.memory_max, "MemoryMax", Limit::Infinity),
            (
                "memory.swap.max",
                s.memory_swap_max,
                "MemorySwapMax",
                Limit::Infinity,
            ),
        ] {
            if file == "memory.swap.max" && !self.caps.swap_v2 {
                continue;
            }
            let why = val.map_or(format!("{key} (default)"), |l| format!("{key}={}", l.v2()));
            self.wants.push(v(
                file,
                val.unwrap_or(default).v2(),
                why,
                Cmp::Number,
                val.is_none(),
            ));
        }
    }

    pub(super) fn memory_v1(&mut self) {
        self.memory_v1_missing();
        let max = self.slice.memory_max.unwrap_or(Limit::Infinity);
        self.memory_v1_limits(max);
        self.memory_v1_swappiness(max);
    }

    /// MemoryMin, MemoryLow and MemoryHigh have no v1 files.
    fn memory_v1_missing(&mut self) {
        let s = self.slice;
        for (val, key) in [
            (s.memory_min, "MemoryMin"),
            (s.memory_low, "MemoryLow"),
            (s.memory_high, "MemoryHigh"),
        ] {
            if val.is_some() {
                let file = key.replace("Memory", "memory.").to_lowercase();
                self.warn(
                    key,
                    &format!("the cgroup v1 memory controller has no {file}"),
                    "MemoryMax is enforced on v1 (a hard limit: reclaim, then the OOM killer at it, with no throttling before); the rest needs the memory controller on cgroup v2 (a reboot: systemd.unified_cgroup_hierarchy=1 where systemd is PID 1, cgroup_no_v1=memory on other hosts whose init mounts cgroup2); or accept it for this host: [check] accept = [\"no_effect\"]",
                );
            }
        }
    }

    /// memory.limit_in_bytes, and memory.memsw.limit_in_bytes when swap is accounted.
    fn memory_v1_limits(&mut self, max: Limit) {
        let s = self.slice;
        let max_why = s.memory_max.map_or("MemoryMax (default)".into(), |l| {
            format!("MemoryMax={}", l.v2())
        });
        let swap = s.memory_swap_max;
        if self.caps.memsw {
            let memsw = match (max, swap) {
                (Limit::Bytes(m), Some(Limit::Bytes(sw))) => Limit::Bytes(m.saturating_add(sw)),
                _ => Limit::Infinity,
            };
            // memsw must stay >= the memory limit at every moment: open it up first.
            self.wants.push(Want::Value {
                file: "memory.limit_in_bytes".into(),
                value: max.v1(),
                why: max_why,
                cmp: Cmp::Number,
                optional: s.memory_max.is_none(),
                before: Some(("memory.memsw.limit_in_bytes".into(), "-1".into())),
            });
            let why = match swap {
                Some(sw) if max != Limit::Infinity => {
                    format!("MemorySwapMax={} (memory + swap)", sw.v2())
                }
                _ => "MemorySwapMax (default)".into(),
            };
            self.wants.push(v(
                "memory.memsw.limit_in_bytes",
                memsw.v1(),
                why,
                Cmp::Number,
                memsw == Limit::Infinity,
            ));
        } else {
            self.wants.push(v(
                "memory.limit_in_bytes",
                max.v1(),
                max_why,
                Cmp::Number,
                s.memory_max.is_none(),
            ));
        }
    }

    /// memory.swappiness: MemorySwapMax=0 without a memory+swap limit, else the default.
    fn memory_v1_swappiness(&mut self, max: Limit) {
        let s = self.slice;
        let default = v(
            "memory.swappiness",
            self.swappiness.to_string(),
            "MemorySwapMax (default)",
            Cmp::Number,
            true,
        );
        match (s.memory_swap_max, max, self.caps.memsw) {
            (None, _, _) | (Some(_), Limit::Bytes(_), true) => self.wants.push(default),
            (Some(Limit::Bytes(0)), Limit::Infinity, _) | (Some(Limit::Bytes(0)), _, false) => {
                self.wants.push(v(
                    "memory.swappiness",
                    "0",
                    "MemorySwapMax=0 (as swappiness 0)",
                    Cmp::Number,
                    false,
                ));
                self.warnings.push(
                    Diagnostic::note(
                        "MemorySwapMax=0 is approximated on cgroup v1 by memory.swappiness=0 (no memory+swap limit without MemoryMax)",
                    )
                    .context(format!("[slice.{}]", s.name())),
                );
            }
            (Some(_), _, memsw) => {
                self.wants.push(default);
                self.warn(
                    "MemorySwapMax",
                    if memsw {
                        "cgroup v1 limits memory+swap together, which needs MemoryMax too"
                    } else {
                        "swap accounting is off (no memory.memsw.* files)"
                    },
                    "set MemoryMax as well, or boot with swapaccount=1",
                );
            }
        }
    }
}
