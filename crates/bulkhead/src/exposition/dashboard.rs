//! The Grafana dashboard in dist/grafana/bulkhead.json, checked against the exposition: it
//! parses, its panels are well formed, and every metric a query names is one the exporter
//! writes (a renamed family fails here, not on a DBA's screen).

#[cfg(test)]
mod tests {
    use crate::activate::latency::StartLatency;
    use crate::activate::state::SocketStatus;
    use crate::exposition::{render, Reading};
    use bulkhead_cgroups::stats::{Avg, MemoryEvents, Pressure, Psi, SliceStatus};
    use bulkhead_sys::host::hugepages::{NodePool, Pool};
    use std::collections::BTreeSet;

    const DASHBOARD: &str = include_str!("../../../../dist/grafana/bulkhead.json");

    /// A reading where every optional value is there: every family the exporter can write.
    fn everything() -> Reading {
        let p = Some(Pressure {
            some: Avg::default(),
            full: Some(Avg::default()),
        });
        let slice = SliceStatus {
            name: "db-server".into(),
            cpu_usage_us: Some(1),
            cpu_nr_throttled: Some(1),
            cpu_throttled_us: Some(1),
            memory_controller: Some("v2".into()),
            memory_current: Some(1),
            memory_high: Some(1),
            memory_max: Some(1),
            memory_events: Some(MemoryEvents::default()),
            io_read_bytes: Some(1),
            io_write_bytes: Some(1),
            io_read_ops: Some(1),
            io_write_ops: Some(1),
            tasks_current: Some(1),
            tasks_max: Some(1),
            psi: Some(Psi {
                cpu: p,
                memory: p,
                io: p,
            }),
            ..Default::default()
        };
        let mut h = StartLatency::default();
        h.record(0.01);
        let socket = SocketStatus {
            name: "cache".into(),
            state: "ready".into(),
            start_latency: h,
            ..Default::default()
        };
        let pool = Pool {
            size: 2 << 20,
            nodes: vec![NodePool {
                node: 0,
                total: 1,
                free: 1,
                surplus: 0,
            }],
            ..Default::default()
        };
        let guard = serde_json::from_value(serde_json::json!({
            "pid": 1, "started": 0.0, "updated": 0.0, "plan": "p", "backend": "cgroupfs",
            "protect": "db-server", "period_ms": 100.0, "phase": "guarding",
            "baseline": {"cpu": 0.0, "io": 0.0, "memory": 0.0, "wait_per_run_us": 0.0,
                         "service_cpus": 0.0},
            "harm": {"fast": {"cpu": 0.0, "io": 0.0, "memory": 0.0, "probe": 0.0},
                     "slow": {"cpu": 0.0, "io": 0.0, "memory": 0.0, "probe": 0.0}},
            "signals": {"steal": 0.0},
            "sideloads": [{"slice": "db-helper", "throttle": {"period_us": 100000,
                           "idle": true, "frozen": false}, "now": "idle", "cpus": 0.0,
                           "io_bps": 0.0}],
            "actions_last_minute": [], "cost_cpu_percent": 0.0, "notes": []
        }))
        .expect("a guard status");
        Reading {
            slices: vec![slice],
            sockets: vec![socket],
            hugepages: vec![pool],
            guard: Some((guard, true)),
            protection: Some((
                std::sync::Arc::new(crate::check::Report::new(
                    "p".into(),
                    "cgroupfs".into(),
                    vec![],
                    vec![],
                    vec![],
                )),
                1.0,
            )),
        }
    }

    /// Series names in the exposition (histograms by their `_bucket`, `_sum`, `_count`).
    fn exported() -> BTreeSet<String> {
        render(&everything())
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
            .collect()
    }

    /// Every `bulkhead_...` identifier in a PromQL expression.
    fn metrics_in(expr: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = expr;
        while let Some(i) = rest.find("bulkhead_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
        out
    }

    fn queries(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("expr" | "definition", serde_json::Value::String(s)) => {
                            out.push(s.clone())
                        }
                        _ => queries(x, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| queries(x, out)),
            _ => {}
        }
    }

    #[test]
    fn every_query_names_an_exported_metric() {
        let d: serde_json::Value = serde_json::from_str(DASHBOARD).expect("the dashboard parses");
        let mut qs = Vec::new();
        queries(&d, &mut qs);
        assert!(qs.len() > 20, "{} queries", qs.len());
        let have = exported();
        let mut used = BTreeSet::new();
        for q in &qs {
            let names = metrics_in(q);
            assert!(!names.is_empty(), "a query without a bulkhead metric: {q}");
            for n in names {
                assert!(
                    have.contains(&n),
                    "{n} (in {q}) is not exported; exported: {have:?}"
                );
                used.insert(n);
            }
        }
        // The seeds' story is on it: CPU, PSI, memory events, I/O, cold starts.
        for must in [
            "bulkhead_slice_cpu_usage_seconds_total",
            "bulkhead_slice_pressure_seconds_total",
            "bulkhead_slice_memory_events_total",
            "bulkhead_slice_io_read_bytes_total",
            "bulkhead_socket_cold_starts_total",
            "bulkhead_socket_start_duration_seconds_bucket",
        ] {
            assert!(used.contains(must), "the dashboard does not show {must}");
        }
    }

    #[test]
    fn panels_are_well_formed() {
        let d: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
        assert_eq!(d["uid"], "bulkhead-slices");
        let panels = d["panels"].as_array().expect("panels");
        let mut ids = BTreeSet::new();
        for p in panels {
            let id = p["id"].as_u64().expect("a numeric id");
            assert!(ids.insert(id), "panel id {id} twice");
            let g = &p["gridPos"];
            let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
            assert!(x + w <= 24, "panel {} is wider than the grid", p["title"]);
            if p["type"] != "row" {
                let targets = p["targets"].as_array().expect("targets");
                assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
                for t in targets {
                    assert_eq!(t["datasource"]["uid"], "${datasource}");
                }
            }
        }
        let vars: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        for v in ["datasource", "instance", "slice", "socket"] {
            assert!(vars.contains(&v), "no ${v} variable");
        }
    }
}
