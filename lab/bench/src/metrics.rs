//! `bench metrics`: what one Prometheus scrape costs, reading every slice's files and
//! rendering the exposition (the exporter's work per `GET /metrics`, without the socket),
//! with N slices under a cgroup root of the bench's own, removed at the end.

use crate::env::Env;
use crate::stats;
use bulkhead::actions::{metrics, Context};
use bulkhead::plan::Plan;
use bulkhead::Choice;
use std::time::Instant;

pub struct Spec {
    pub slices: usize,
    pub scrapes: usize,
}

#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub slices: usize,
    pub scrapes: usize,
    /// Samples and bytes of one exposition.
    pub series: usize,
    pub bytes: usize,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// A plan of `n` slices with a weight and memory and task limits, as hosts have them.
pub fn slices_plan(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!("[slice.bmetrics{i}]\nCPUWeight = 100\nMemoryMax = \"1G\"\nTasksMax = 512\n")
        })
        .collect()
}

pub fn run(spec: &Spec) -> Result<Report, String> {
    if spec.slices == 0 || spec.scrapes == 0 {
        return Err("--slices and --scrapes must be at least 1".into());
    }
    crate::env::clean_stale();
    // Dropped at every return: the slices go with the bench root.
    let env = Env::create()?;
    let text = slices_plan(spec.slices);
    let plan = Plan::parse(&text, None)
        .and_then(|p| bulkhead_testkit::host::resolve(&p))
        .map_err(|e| e.to_string())?;
    env.layout
        .groups(&env.cgroup_root)
        .and_then(|g| g.apply(&plan))
        .map_err(|e| e.to_string())?;
    let scraper = metrics::scraper(&Context {
        config: None,
        cgroup_root: env.cgroup_root.clone(),
        backend: Choice::Cgroupfs,
    })
    .map_err(|e| e.to_string())?;
    let first = scraper.render();
    let series = first.lines().filter(|l| !l.starts_with('#')).count();
    let seen = first
        .lines()
        .filter(|l| l.starts_with("bulkhead_slice_cpu_usage_seconds_total{"))
        .count();
    if seen != spec.slices {
        return Err(format!(
            "the exposition has {seen} slices, not {}",
            spec.slices
        ));
    }
    let mut ms: Vec<f64> = (0..spec.scrapes)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(scraper.render());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    drop(env);
    Ok(Report {
        slices: spec.slices,
        scrapes: spec.scrapes,
        series,
        bytes: first.len(),
        median_ms: stats::rank(&ms, 0.5),
        p99_ms: stats::rank(&ms, 0.99),
        max_ms: stats::rank(&ms, 1.0),
    })
}
