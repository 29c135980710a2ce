//! The guard's families from its status file: whether it runs, the harm it measures on the
//! protected slice, and which levers hold each sideload now.

use crate::exposition::text::{Kind, Sample, Value, Writer};
use crate::guard::state::Status;

fn harm(s: &Status) -> Vec<Sample> {
    let mut out = Vec::new();
    for (window, h) in [("fast", &s.harm.fast), ("slow", &s.harm.slow)] {
        for (signal, v) in [
            ("cpu", h.cpu),
            ("io", h.io),
            ("memory", h.memory),
            ("probe", h.probe),
        ] {
            let l = vec![
                ("window", window.to_string()),
                ("signal", signal.to_string()),
            ];
            out.push((l, Value::Float(v)));
        }
    }
    out
}

fn levers(s: &Status) -> Vec<Sample> {
    let mut out = Vec::new();
    for side in &s.sideloads {
        let t = &side.throttle;
        for (lever, on) in [
            ("cpu_quota", t.cpu.is_some()),
            ("idle", t.idle),
            ("frozen", t.frozen),
            ("io_bandwidth", t.io_bps.is_some()),
        ] {
            let l = vec![("slice", side.slice.clone()), ("lever", lever.to_string())];
            out.push((l, Value::Int(u64::from(on))));
        }
    }
    out
}

/// Write the guard families (`running`: its process is alive).
pub fn write(w: &mut Writer, status: &Status, running: bool) {
    w.family(
        "bulkhead_guard_running",
        Kind::Gauge,
        "1 while a guard process runs (its status file is from a live guard).",
        &[(vec![], Value::Int(u64::from(running)))],
    );
    if !running {
        return;
    }
    w.family(
        "bulkhead_guard_harm_ratio",
        Kind::Gauge,
        "The harm the guard measures on the protected slice (0: none, 1: its threshold), fast and slow smoothed.",
        &harm(status),
    );
    w.family(
        "bulkhead_guard_sideload_lever",
        Kind::Gauge,
        "1 while the guard holds a sideload with this lever (cpu_quota, idle, frozen, io_bandwidth).",
        &levers(status),
    );
}
