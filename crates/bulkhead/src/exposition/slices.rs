//! Per-slice families from [`SliceStatus`] readings, in base units (seconds, bytes). A value
//! the slice's hierarchy does not have (None) gives no sample; an unlimited memory.high,
//! memory.max or pids.max gives none either.

use crate::exposition::text::{Kind, Sample, Value, Writer};
use bulkhead_cgroups::stats::{Avg, Pressure, SliceStatus};

fn secs(us: u64) -> Value {
    Value::Float(us as f64 / 1e6)
}

fn slice(s: &SliceStatus) -> Vec<(&'static str, String)> {
    vec![("slice", s.name.clone())]
}

/// One sample per slice that has the value.
fn each(slices: &[SliceStatus], f: impl Fn(&SliceStatus) -> Option<Value>) -> Vec<Sample> {
    slices
        .iter()
        .filter_map(|s| Some((slice(s), f(s)?)))
        .collect()
}

/// Memory events per slice: v2 counts high, max, oom and oom_kill in memory.events; v1 has
/// only failcnt (usage hit the limit: `max`) and oom_kill (its `under_oom` is a state, not a
/// count, so there is no `oom` there).
fn memory_events(slices: &[SliceStatus]) -> Vec<Sample> {
    let mut out = Vec::new();
    for s in slices {
        let Some(e) = &s.memory_events else { continue };
        let events: &[(&str, u64)] = match s.memory_controller.as_deref() {
            Some("v2") => &[
                ("high", e.high),
                ("max", e.max),
                ("oom", e.oom),
                ("oom_kill", e.oom_kill),
            ],
            _ => &[("max", e.max), ("oom_kill", e.oom_kill)],
        };
        for (event, n) in events {
            let mut l = slice(s);
            l.push(("event", (*event).to_string()));
            out.push((l, Value::Int(*n)));
        }
    }
    out
}

/// PSI stall totals: `some` for every resource that has a pressure file, `full` where the
/// kernel gives it (not for cpu on kernels before 5.13, nor at the root).
fn pressure(slices: &[SliceStatus]) -> Vec<Sample> {
    let mut out = Vec::new();
    for s in slices {
        let Some(psi) = &s.psi else { continue };
        let resources: [(&str, &Option<Pressure>); 3] =
            [("cpu", &psi.cpu), ("memory", &psi.memory), ("io", &psi.io)];
        for (resource, p) in resources {
            let Some(p) = p else { continue };
            let kinds: [(&str, Option<&Avg>); 2] =
                [("some", Some(&p.some)), ("full", p.full.as_ref())];
            for (kind, avg) in kinds {
                let Some(avg) = avg else { continue };
                let mut l = slice(s);
                l.push(("resource", resource.to_string()));
                l.push(("kind", kind.to_string()));
                out.push((l, secs(avg.total_us)));
            }
        }
    }
    out
}

/// The exposition of these slices alone (the tests read it).
#[cfg(test)]
pub fn render(slices: &[SliceStatus]) -> String {
    let mut w = Writer::new();
    write(&mut w, slices);
    w.finish()
}

/// Write the slice families.
pub fn write(w: &mut Writer, slices: &[SliceStatus]) {
    let int = |n: u64| Value::Int(n);
    w.family(
        "bulkhead_slice_cpu_usage_seconds_total",
        Kind::Counter,
        "CPU time the slice used since it was created.",
        &each(slices, |s| s.cpu_usage_us.map(secs)),
    );
    w.family(
        "bulkhead_slice_cpu_throttled_periods_total",
        Kind::Counter,
        "Periods in which the slice's CPU quota throttled it.",
        &each(slices, |s| s.cpu_nr_throttled.map(int)),
    );
    w.family(
        "bulkhead_slice_cpu_throttled_seconds_total",
        Kind::Counter,
        "Time the slice's tasks were held back by its CPU quota.",
        &each(slices, |s| s.cpu_throttled_us.map(secs)),
    );
    w.family(
        "bulkhead_slice_memory_current_bytes",
        Kind::Gauge,
        "Memory the slice uses now.",
        &each(slices, |s| s.memory_current.map(int)),
    );
    w.family(
        "bulkhead_slice_memory_high_bytes",
        Kind::Gauge,
        "The slice's memory.high (throttling threshold); absent when there is none.",
        &each(slices, |s| s.memory_high.map(int)),
    );
    w.family(
        "bulkhead_slice_memory_max_bytes",
        Kind::Gauge,
        "The slice's hard memory limit; absent when there is none.",
        &each(slices, |s| s.memory_max.map(int)),
    );
    w.family(
        "bulkhead_slice_memory_events_total",
        Kind::Counter,
        "Memory events of the slice: high (throttled above memory.high), max (hit the limit), oom, oom_kill.",
        &memory_events(slices),
    );
    w.family(
        "bulkhead_slice_io_read_bytes_total",
        Kind::Counter,
        "Bytes the slice read from block devices.",
        &each(slices, |s| s.io_read_bytes.map(int)),
    );
    w.family(
        "bulkhead_slice_io_written_bytes_total",
        Kind::Counter,
        "Bytes the slice wrote to block devices.",
        &each(slices, |s| s.io_write_bytes.map(int)),
    );
    w.family(
        "bulkhead_slice_io_read_operations_total",
        Kind::Counter,
        "Read operations the slice issued to block devices.",
        &each(slices, |s| s.io_read_ops.map(int)),
    );
    w.family(
        "bulkhead_slice_io_write_operations_total",
        Kind::Counter,
        "Write operations the slice issued to block devices.",
        &each(slices, |s| s.io_write_ops.map(int)),
    );
    w.family(
        "bulkhead_slice_processes",
        Kind::Gauge,
        "Processes in the slice and its children.",
        &each(slices, |s| Some(int(s.processes as u64))),
    );
    w.family(
        "bulkhead_slice_tasks",
        Kind::Gauge,
        "Tasks (threads) in the slice, from the pids controller.",
        &each(slices, |s| s.tasks_current.map(int)),
    );
    w.family(
        "bulkhead_slice_tasks_max",
        Kind::Gauge,
        "The slice's task limit; absent when there is none.",
        &each(slices, |s| s.tasks_max.map(int)),
    );
    w.family(
        "bulkhead_slice_pressure_seconds_total",
        Kind::Counter,
        "Pressure stall time (PSI): some = at least one task stalled, full = all stalled.",
        &pressure(slices),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_cgroups::stats::{MemoryEvents, Psi};

    fn v2() -> SliceStatus {
        SliceStatus {
            name: "db-helper".into(),
            processes: 2,
            cpu_usage_us: Some(1_500_000),
            cpu_nr_throttled: Some(3),
            cpu_throttled_us: Some(250),
            memory_controller: Some("v2".into()),
            memory_current: Some(4096),
            memory_max: Some(1 << 30),
            memory_events: Some(MemoryEvents {
                oom_kill: 1,
                ..Default::default()
            }),
            tasks_current: Some(5),
            psi: Some(Psi {
                cpu: Some(Pressure {
                    some: Avg {
                        total_us: 2_000_000,
                        ..Default::default()
                    },
                    full: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn values_in_base_units_and_unknowns_left_out() {
        let t = render(&[v2()]);
        assert!(
            t.contains("bulkhead_slice_cpu_usage_seconds_total{slice=\"db-helper\"} 1.5\n"),
            "{t}"
        );
        assert!(
            t.contains("bulkhead_slice_cpu_throttled_seconds_total{slice=\"db-helper\"} 0.00025\n")
        );
        assert!(t.contains("bulkhead_slice_memory_max_bytes{slice=\"db-helper\"} 1073741824\n"));
        assert!(t.contains(
            "bulkhead_slice_memory_events_total{slice=\"db-helper\",event=\"oom_kill\"} 1\n"
        ));
        assert!(t.contains(
            "bulkhead_slice_pressure_seconds_total{slice=\"db-helper\",resource=\"cpu\",kind=\"some\"} 2\n"
        ));
        // No memory.high (unlimited), no I/O, no full line, no task limit: no samples.
        for absent in [
            "memory_high",
            "io_read",
            "kind=\"full\"",
            "tasks_max",
            "resource=\"io\"",
        ] {
            assert!(!t.contains(absent), "{absent} in {t}");
        }
    }

    #[test]
    fn v1_memory_has_no_high_nor_oom_event() {
        let mut s = v2();
        s.memory_controller = Some("v1".into());
        let t = render(&[s]);
        assert!(t.contains("event=\"max\""));
        assert!(
            !t.contains("event=\"high\"") && !t.contains("event=\"oom\""),
            "{t}"
        );
    }

    #[test]
    fn every_family_once_with_all_slices_together() {
        let mut b = v2();
        b.name = "db".into();
        let t = render(&[v2(), b]);
        for family in t.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let name = family.split(' ').next().unwrap();
            assert_eq!(t.matches(&format!("# TYPE {name} ")).count(), 1, "{name}");
            assert_eq!(t.matches(&format!("# HELP {name} ")).count(), 1, "{name}");
            // The family's samples follow its TYPE line without another family between.
            let start = t.find(&format!("# TYPE {name} ")).unwrap();
            let rest = &t[start..];
            let end = rest[1..].find("# HELP").map_or(rest.len(), |e| e + 1);
            assert_eq!(
                t.matches(&format!("{name}{{")).count(),
                rest[..end].matches(&format!("{name}{{")).count()
            );
        }
        assert!(render(&[]).is_empty());
    }
}
