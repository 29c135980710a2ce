//! The isolation report for people: one table per hog, the checks against the targets.

use super::{Report, ScenarioResult, Setup};
use crate::report::{checks_text, thousands};
use std::fmt::Write as _;

fn range(v: impl Iterator<Item = f64>) -> String {
    let v: Vec<f64> = v.filter(|x| x.is_finite()).collect();
    if v.len() < 2 {
        return String::new();
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(" [{lo:.2}-{hi:.2}]")
}

fn notes(s: &ScenarioResult) -> String {
    let mut n = Vec::new();
    if let Some(d) = &s.db_died {
        n.push(format!("DATABASE DIED: {d}"));
    }
    if let Some(f) = &s.hog_fate {
        n.push(format!("hog {f}"));
    }
    if s.median.errors > 0.0 {
        n.push(format!("{:.0} errors", s.median.errors));
    }
    let placed: Vec<f64> = s
        .runs
        .iter()
        .filter_map(|r| r.placed)
        .map(|n| n as f64)
        .collect();
    if !placed.is_empty() {
        n.push(format!(
            "{:.0} process(es) placed per run",
            crate::stats::median(&placed)
        ));
    }
    if s.setup == Setup::Guarded {
        n.push(format!(
            "{:.0} guard actions, guard {:.2}% CPU",
            s.median.guard_actions, s.median.guard_cost_percent
        ));
    }
    n.join("; ")
}

fn row(o: &mut String, s: &ScenarioResult) {
    let f = &s.median;
    let helper = if s.setup == Setup::Baseline {
        "-".to_string()
    } else {
        format!(
            "{:.2} ({:.0}%)",
            f.helper_cpus,
            f.helper_share_of_idle * 100.0
        )
    };
    let work = if s.setup == Setup::Baseline {
        "-".to_string()
    } else if f.hog_share_of_alone.is_finite() {
        format!("{:.1} ({:.0}%)", f.hog_work, f.hog_share_of_alone * 100.0)
    } else {
        format!("{:.1}", f.hog_work)
    };
    let monitor = if f.probe_within_1s.is_finite() {
        format!("{:.0}% {:.0}", f.probe_within_1s * 100.0, f.probe_p99_ms)
    } else {
        "-".to_string()
    };
    let _ = writeln!(
        o,
        "{:<7} {:<11} {:>9} {:>6.3}{:<14} {:>6.3} {:>6.3} {:>8.2} {:>6.2}{:<14} {:>13} {:>8.0} {:>15} {:>10}  {}",
        s.load.label(),
        s.setup.name(),
        thousands(f.op_rate),
        f.isolation_mean,
        range(s.rounds.iter().map(|r| r.isolation_mean)),
        f.isolation_p01,
        f.isolation_min,
        f.p99_ms,
        f.p99_ratio,
        range(s.rounds.iter().map(|r| r.p99_ratio)),
        helper,
        f.wait_per_run_us,
        work,
        monitor,
        notes(s)
    );
}

/// Where the database waited, per scenario of one hog (the I/O hogs' diagnosis).
fn waits(o: &mut String, list: &[&ScenarioResult]) {
    if list.iter().all(|s| s.verdict.is_none()) {
        return;
    }
    let _ = writeln!(o, "where the database waited (median round):");
    for s in list {
        if let Some(v) = &s.verdict {
            let _ = writeln!(o, "  {:<7} {:<11} {v}", s.load.label(), s.setup.name());
        }
    }
}

/// Every hog's table, then the checks.
pub fn text(r: &Report) -> String {
    let mut o = String::new();
    let rounds = r.scenarios.first().map_or(0, |s| s.rounds.len());
    let _ = writeln!(
        o,
        "Medians over {rounds} round(s), each paired with the same round's baseline at the same load ([min-max] over rounds).\n\
         iso: mean per second of operations done / offered (open loop) or / baseline rate (closed); p01 and min over the seconds. p99 x: against the baseline's p99 at the same load.\n\
         helper: its CPUs, and in brackets its share of the CPU the baseline left idle. wait: the database threads' run-queue wait per run.\n\
         hog work: the hog's own progress; for the CPU and I/O hogs in brackets its share of what it did alone (no database) in the same round.\n\
         monitor: the scrapes of an exporter in the monitoring slice (one a second) answered within 1 s, and their p99 in ms.\n"
    );
    let mut hog = String::new();
    let mut list: Vec<&ScenarioResult> = Vec::new();
    for s in &r.scenarios {
        if s.hog != hog {
            waits(&mut o, &list);
            list.clear();
            hog = s.hog.clone();
            let peak = r
                .peaks
                .iter()
                .find(|(h, _)| *h == hog.trim_end_matches("-bursty"))
                .map_or(String::new(), |(_, p)| {
                    format!(", baseline peak {} op/s", thousands(*p))
                });
            let what = super::HogKind::parse(hog.trim_end_matches("-bursty"))
                .map(|k| format!(": {}", k.describe()))
                .unwrap_or_default();
            let _ = writeln!(o, "\n{hog} hog{what}{peak} (hog work in {})", s.hog_unit);
            let _ = writeln!(
                o,
                "{:<7} {:<11} {:>9} {:>6}{:<14} {:>6} {:>6} {:>8} {:>6}{:<14} {:>13} {:>8} {:>15} {:>10}  notes",
                "load",
                "setup",
                "op/s",
                "iso",
                if rounds > 1 { " [rounds]" } else { "" },
                "p01",
                "min",
                "p99 ms",
                "p99 x",
                if rounds > 1 { " [rounds]" } else { "" },
                "helper CPUs",
                "wait us",
                "hog work",
                "monitor"
            );
        }
        row(&mut o, s);
        list.push(s);
    }
    waits(&mut o, &list);
    let _ = writeln!(o);
    o.push_str(&checks_text(&r.checks, &[]));
    o
}
