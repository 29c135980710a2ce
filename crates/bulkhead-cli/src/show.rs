//! Text output for people: the resolved plan as TOML, and the status table.

use bulkhead::actions::status::{Pressure, SocketStatus, Status};
use bulkhead::plan::ResolvedPlan;
use bulkhead::units::human_bytes;
use std::fmt::Write as _;

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// The resolved plan as a plan file: values in bytes and weights, with how each was derived.
pub fn plan_toml(p: &ResolvedPlan) -> String {
    let h = &p.host;
    let mut out = String::new();
    let _ = writeln!(out, "# Resolved plan from {}", p.source);
    let _ = writeln!(
        out,
        "# Host: {} RAM, {} CPUs ({}), NUMA nodes {}, huge pages {}, task limit {}",
        human_bytes(h.memory),
        h.cpu_count(),
        h.cpus,
        h.mem_nodes,
        h.hugepage_sizes
            .iter()
            .map(|s| human_bytes(*s))
            .collect::<Vec<_>>()
            .join(" "),
        h.tasks_max
    );
    for s in &p.slices {
        let _ = writeln!(out);
        let header = format!("[slice.{}] ", s.name().toml_key());
        let mut note = format!("# {}", s.cgroup_path);
        if s.implicit {
            note.push_str(" (not in the plan: created as a parent)");
        }
        let _ = writeln!(out, "{header:<32}{note}");
        if let Some(d) = &s.description {
            let _ = writeln!(out, "Description = {}", quote(d));
        }
        if let Some(spec) = p
            .plan
            .slices
            .get(s.name())
            .filter(|x| !x.services.is_empty())
        {
            let names: Vec<String> = spec
                .services
                .iter()
                .map(|a| match &a.value.pidfile {
                    None => quote(&a.value.name),
                    Some(p) => format!(
                        "{{ name = {}, pidfile = {} }}",
                        quote(&a.value.name),
                        quote(p)
                    ),
                })
                .collect();
            let _ = writeln!(out, "services = [{}]", names.join(", "));
        }
        // Group repeated directives (devices, page sizes) into one line.
        let mut i = 0;
        while i < s.settings.len() {
            let key = &s.settings[i].directive;
            let group: Vec<_> = s.settings[i..]
                .iter()
                .take_while(|x| &x.directive == key)
                .collect();
            i += group.len();
            let value = match key.as_str() {
                "HugetlbMax" => format!(
                    "{{ {} }}",
                    group
                        .iter()
                        .map(|g| g.toml.clone())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ if group.len() > 1 || key.starts_with("IO") && key != "IOWeight" => {
                    format!(
                        "[{}]",
                        group
                            .iter()
                            .map(|g| g.toml.clone())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
                _ => group[0].toml.clone(),
            };
            let line = format!("{key} = {value}");
            let from: Vec<String> = group.iter().filter_map(|g| g.from.clone()).collect();
            if from.is_empty() {
                let _ = writeln!(out, "{line}");
            } else {
                let _ = writeln!(out, "{line:<31} # {}", from.join("; "));
            }
        }
    }
    out.push_str(&place_toml(&p.plan));
    out
}

/// The plan's `[place.NAME]` rules, as written.
fn place_toml(plan: &bulkhead::plan::Plan) -> String {
    let mut out = String::new();
    for r in plan.place.values() {
        let _ = writeln!(out, "\n[place.{}]", quote(&r.name));
        let _ = writeln!(out, "slice = {}", quote(r.slice.as_str()));
        for (k, v) in r.keys().iter().filter(|(_, v)| !v.is_empty()) {
            let list: Vec<String> = v.iter().map(|x| quote(x)).collect();
            let _ = writeln!(out, "{k} = [{}]", list.join(", "));
        }
    }
    out
}

fn opt_bytes(v: Option<u64>) -> String {
    v.map_or("-".into(), human_bytes)
}

fn limit(v: Option<u64>, known: bool) -> String {
    match (v, known) {
        (Some(b), _) => human_bytes(b),
        (None, true) => "max".into(),
        (None, false) => "-".into(),
    }
}

fn psi(p: Option<Pressure>) -> String {
    p.map_or("-".into(), |p| format!("{:.2}", p.some.avg10))
}

fn duration_us(us: u64) -> String {
    let s = us as f64 / 1e6;
    if s < 60.0 {
        format!("{s:.2}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

/// The `status` table.
pub fn status_table(st: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "backend: {} ({}); CPU% over {:.1}s",
        st.backend, st.layout, st.interval_seconds
    );
    if let Some(why) = &st.unverified {
        let _ = writeln!(out, "note: {why}");
    }
    if st.slices.is_empty() {
        let _ = writeln!(out, "no slices: create them with `bulkhead apply`");
        return out;
    }
    let header = [
        "SLICE",
        "TASKS",
        "CPU%",
        "CPU TIME",
        "THROTTLED",
        "MEMORY",
        "HIGH",
        "MAX",
        "EVENTS h/m/oom/kill",
        "IO READ",
        "IO WRITE",
        "PSI cpu/mem/io",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for s in &st.slices {
        let depth = s.name.matches('-').count();
        let has_mem = s.memory_current.is_some();
        rows.push(vec![
            format!("{}{}", "  ".repeat(depth), s.unit),
            s.processes.to_string(),
            s.cpu_percent.map_or("-".into(), |p| format!("{p:.1}")),
            s.cpu_usage_us.map_or("-".into(), duration_us),
            match (s.cpu_nr_throttled, s.cpu_throttled_us) {
                (Some(n), Some(us)) => format!("{n} ({})", duration_us(us)),
                (Some(n), None) => n.to_string(),
                _ => "-".into(),
            },
            opt_bytes(s.memory_current),
            limit(s.memory_high, s.memory_controller.as_deref() == Some("v2")),
            limit(s.memory_max, has_mem),
            s.memory_events.as_ref().map_or("-".into(), |e| {
                format!("{}/{}/{}/{}", e.high, e.max, e.oom, e.oom_kill)
            }),
            opt_bytes(s.io_read_bytes),
            opt_bytes(s.io_write_bytes),
            s.psi.as_ref().map_or("-".into(), |p| {
                format!("{}/{}/{}", psi(p.cpu), psi(p.memory), psi(p.io))
            }),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| -> String {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let _ = writeln!(
        out,
        "{}",
        line(header.iter().map(|h| h.to_string()).collect())
    );
    for r in rows {
        let _ = writeln!(out, "{}", line(r));
    }
    let _ = writeln!(out, "PSI: share of time some tasks stalled, avg10 in %.");
    if st
        .slices
        .iter()
        .any(|s| s.memory_controller.as_deref() == Some("v1"))
    {
        let _ = writeln!(
            out,
            "cgroup v1: EVENTS are limit hits / under_oom / oom kills; IO counts only disks with BFQ or an I/O limit, and no buffered writeback."
        );
    }
    out
}

/// The sockets `bulkhead serve` runs, for `status`.
pub fn sockets_table(socks: &[SocketStatus]) -> String {
    let mut out = String::from("\n");
    let _ = writeln!(
        out,
        "{:<16} {:<9} {:<14} {:>6} {:>8} {:>10} {:>10} {:>6} {:>10}",
        "SOCKET", "STATE", "MODE", "CONNS", "TOTAL", "IN", "OUT", "STARTS", "LAST START"
    );
    for s in socks {
        let _ = writeln!(
            out,
            "{:<16} {:<9} {:<14} {:>6} {:>8} {:>10} {:>10} {:>6} {:>10}",
            s.name,
            s.state,
            s.mode,
            s.connections_active,
            s.connections_total,
            bulkhead::units::human_bytes(s.bytes_in),
            bulkhead::units::human_bytes(s.bytes_out),
            s.cold_starts,
            s.last_start_ms.map_or("-".into(), |m| format!("{m:.1} ms"))
        );
        if let Some(e) = &s.last_error {
            let _ = writeln!(out, "  {}: last failed start: {e}", s.name);
        }
        if s.on_idle == "freeze" {
            let _ = writeln!(
                out,
                "  {}: frozen when idle: {} freeze(s), {} thaw(s){}{}",
                s.name,
                s.freezes,
                s.thaws,
                s.last_thaw_ms
                    .map_or(String::new(), |m| format!(", last thaw {m:.2} ms")),
                s.frozen_memory_bytes.map_or(String::new(), |b| format!(
                    "; frozen now, holding {}",
                    bulkhead::units::human_bytes(b)
                ))
            );
        }
        let hit = s.limits.hit();
        if !hit.is_empty() {
            let list: Vec<String> = hit.iter().map(|(k, n)| format!("{k} {n}x")).collect();
            let _ = writeln!(out, "  {}: limits hit: {}", s.name, list.join(", "));
        }
    }
    out
}

/// The guard's state, for `status`.
pub fn guard_status(g: &bulkhead::actions::status::GuardReport) -> String {
    let s = &g.status;
    let mut out = String::from("\n");
    let now = bulkhead::sys::process::unix_now();
    let state = match (g.running, s.phase.as_str()) {
        (true, "calibrating") => format!(
            "calibrating, {:.0} s left",
            s.calibration_left_s.unwrap_or(0.0)
        ),
        (true, p) => p.to_string(),
        (false, "stopped") => "stopped".into(),
        (false, _) => "dead (its watchdog or `bulkhead guard --release` puts the plan back)".into(),
    };
    let _ = writeln!(
        out,
        "GUARD  PID {}  {}  protecting {}  every {:.0} ms  (updated {:.0} s ago, cost {:.2}% CPU)",
        s.pid,
        state,
        s.protect,
        s.period_ms,
        (now - s.updated).max(0.0),
        s.cost_cpu_percent
    );
    let b = &s.baseline;
    let _ = writeln!(
        out,
        "  baseline: stall cpu {:.1}% io {:.1}% memory {:.1}%, run-queue wait {:.0} us per run, {:.2} CPUs{}",
        b.cpu * 100.0,
        b.io * 100.0,
        b.memory * 100.0,
        b.wait_per_run_us,
        b.service_cpus,
        b.probe_ms.map_or(String::new(), |p| format!(", probe {p:.2} ms"))
    );
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    let sig = &s.signals;
    let _ = writeln!(
        out,
        "  now: stall cpu {} io {} memory {}, harm cpu {:.2} io {:.2} (cut at 1.0, release below 0.5), steal {:.1}%",
        pct(sig.cpu_stall),
        pct(sig.io_stall),
        pct(sig.memory_stall),
        s.harm.fast.cpu.max(s.harm.fast.memory).max(s.harm.fast.probe),
        s.harm.fast.io,
        sig.steal * 100.0
    );
    let _ = writeln!(
        out,
        "  {:<20} {:>8} {:>12}  THROTTLE",
        "SIDELOAD", "CPUS", "IO/S"
    );
    for side in &s.sideloads {
        let _ = writeln!(
            out,
            "  {:<20} {:>8.2} {:>12}  {}",
            side.slice,
            side.cpus,
            bulkhead::units::human_bytes(side.io_bps as u64),
            side.now
        );
    }
    let _ = writeln!(
        out,
        "  actions in the last minute: {}",
        s.actions_last_minute.len()
    );
    for a in s.actions_last_minute.iter().rev().take(5) {
        let _ = writeln!(
            out,
            "    {:>5.0} s ago  {:<8} {:<10} -> {}  ({})",
            (now - a.at).max(0.0),
            a.kind,
            a.slice,
            a.now,
            a.why
        );
    }
    for n in &s.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}
