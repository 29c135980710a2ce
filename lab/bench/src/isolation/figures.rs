//! From runs to figures (resctl-bench's method): per second, isolation is the operations the
//! database completed over those offered (open loop), or over the same round's baseline rate
//! (closed loop); p99 is compared with the same round's baseline p99 at the same load. Each
//! round gives the mean, 1st percentile and minimum of per-second isolation, the p99 ratio,
//! the helper's CPU as a share of what the baseline left idle, and the database threads'
//! run-queue wait per run (the diagnosis); the report gives medians over rounds.

use super::db::DbKind;
use super::diag::IoWindow;
use super::sampler::Window;
use super::{Load, Setup};
use crate::exporter::ProbeStats;
use crate::report::Check;
use crate::stats::{median, quantile};
use crate::LoadResult;
use serde::{Deserialize, Serialize};

/// A guard action, seconds after the measured window started.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Mark {
    pub t: f64,
    pub kind: String,
}

/// One run of one scenario, as measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunData {
    pub round: usize,
    pub load: LoadResult,
    /// ops/s offered (open loop).
    pub offered: Option<f64>,
    pub window: Window,
    /// The hogs' own progress (rate, or MiB held for memory).
    pub hog_work: f64,
    /// The same hog's progress alone in the same round (the I/O hogs).
    #[serde(default)]
    pub hog_alone: Option<f64>,
    pub db_died: Option<String>,
    pub hog_fate: Option<String>,
    pub guard_actions: Vec<Mark>,
    pub guard_cost_percent: Option<f64>,
    /// The I/O path and where the database blocked (the I/O hogs).
    #[serde(default)]
    pub io: Option<IoWindow>,
    /// The monitoring probe's scrapes during the window.
    #[serde(default)]
    pub probe: Option<ProbeStats>,
    /// The placed setup: the processes `bulkhead place` moved.
    #[serde(default)]
    pub placed: Option<usize>,
}

/// One round's figures (or their medians).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Figures {
    pub op_rate: f64,
    pub p99_ms: f64,
    pub isolation_mean: f64,
    pub isolation_p01: f64,
    pub isolation_min: f64,
    /// The window's p99 over the baseline's.
    pub p99_ratio: f64,
    /// The median second's p99 over the baseline's p99.
    pub p99_ratio_median_second: f64,
    pub helper_cpus: f64,
    /// The helper's CPU over the CPU the same round's baseline left idle.
    pub helper_share_of_idle: f64,
    pub hog_work: f64,
    /// The hog's work over what it did alone in the same round (NaN: not measured).
    #[serde(default)]
    pub hog_share_of_alone: f64,
    pub wait_per_run_us: f64,
    pub steal: f64,
    pub errors: f64,
    pub guard_actions: f64,
    /// NaN without a guard.
    pub guard_cost_percent: f64,
    /// The monitoring probe: the share of scrapes answered within 1 s (NaN: no probe).
    #[serde(default)]
    pub probe_within_1s: f64,
    /// The monitoring probe's p99, ms (an unanswered scrape counts at the deadline).
    #[serde(default)]
    pub probe_p99_ms: f64,
}

/// Per-second series of one run, for the chart.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Series {
    pub isolation: Vec<f64>,
    pub p99_ratio: Vec<f64>,
    pub marks: Vec<Mark>,
}

/// A scenario over all its rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// cpu, cpu-bursty, io, memory
    pub hog: String,
    pub load: Load,
    pub setup: Setup,
    pub hog_unit: String,
    pub median: Figures,
    pub rounds: Vec<Figures>,
    /// The median round's per-second view.
    pub series: Series,
    /// Where the database waited in the median round, against its baseline (I/O hogs).
    #[serde(default)]
    pub verdict: Option<String>,
    pub db_died: Option<String>,
    pub hog_fate: Option<String>,
    pub runs: Vec<RunData>,
}

/// Per-second isolation and p99 ratio of a run against its baseline.
pub fn series(run: &RunData, base: &RunData) -> Series {
    let per = run.offered.unwrap_or(base.load.op_rate);
    let p99 = base.load.latency.p99_ms;
    Series {
        isolation: run
            .load
            .seconds
            .iter()
            .map(|s| s.ops as f64 / per)
            .collect(),
        p99_ratio: run.load.seconds.iter().map(|s| s.p99_ms / p99).collect(),
        marks: run.guard_actions.clone(),
    }
}

/// One round's figures against the same round's baseline.
pub fn figures(run: &RunData, base: &RunData) -> Figures {
    let s = series(run, base);
    Figures {
        op_rate: run.load.op_rate,
        p99_ms: run.load.latency.p99_ms,
        isolation_mean: s.isolation.iter().sum::<f64>() / s.isolation.len().max(1) as f64,
        isolation_p01: quantile(&s.isolation, 0.01),
        isolation_min: s.isolation.iter().copied().fold(f64::INFINITY, f64::min),
        p99_ratio: run.load.latency.p99_ms / base.load.latency.p99_ms,
        p99_ratio_median_second: median(&s.p99_ratio),
        helper_cpus: run.window.helper_cpus,
        helper_share_of_idle: run.window.helper_cpus / base.window.idle_cpus.max(1e-3),
        hog_work: run.hog_work,
        hog_share_of_alone: match run.hog_alone {
            Some(a) if a > 0.0 => run.hog_work / a,
            _ => f64::NAN,
        },
        wait_per_run_us: run.window.wait_per_run_us,
        steal: run.window.steal,
        errors: run.load.errors as f64,
        guard_actions: run.guard_actions.len() as f64,
        guard_cost_percent: run.guard_cost_percent.unwrap_or(f64::NAN),
        probe_within_1s: run
            .probe
            .as_ref()
            .map_or(f64::NAN, ProbeStats::share_within_1s),
        probe_p99_ms: run.probe.as_ref().map_or(f64::NAN, |p| p.p99_ms),
    }
}

/// The median of every field.
fn medians(rounds: &[Figures]) -> Figures {
    let m = |f: fn(&Figures) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    Figures {
        op_rate: m(|f| f.op_rate),
        p99_ms: m(|f| f.p99_ms),
        isolation_mean: m(|f| f.isolation_mean),
        isolation_p01: m(|f| f.isolation_p01),
        isolation_min: m(|f| f.isolation_min),
        p99_ratio: m(|f| f.p99_ratio),
        p99_ratio_median_second: m(|f| f.p99_ratio_median_second),
        helper_cpus: m(|f| f.helper_cpus),
        helper_share_of_idle: m(|f| f.helper_share_of_idle),
        hog_work: m(|f| f.hog_work),
        hog_share_of_alone: m(|f| f.hog_share_of_alone),
        wait_per_run_us: m(|f| f.wait_per_run_us),
        steal: m(|f| f.steal),
        errors: m(|f| f.errors),
        guard_actions: m(|f| f.guard_actions),
        guard_cost_percent: m(|f| f.guard_cost_percent),
        probe_within_1s: m(|f| f.probe_within_1s),
        probe_p99_ms: m(|f| f.probe_p99_ms),
    }
}

/// Fold a scenario's runs (one per round) against the baselines of the same rounds.
pub fn combine(
    hog: &str,
    load: Load,
    setup: Setup,
    hog_unit: &str,
    runs: Vec<RunData>,
    bases: &[RunData],
) -> ScenarioResult {
    let base_of = |r: &RunData| bases.iter().find(|b| b.round == r.round).or(bases.first());
    let rounds: Vec<Figures> = runs
        .iter()
        .filter_map(|r| base_of(r).map(|b| figures(r, b)))
        .collect();
    let median_fig = medians(&rounds);
    // The chart shows the round closest to the median isolation.
    let pick = runs
        .iter()
        .zip(&rounds)
        .min_by(|a, b| {
            let d = |f: &Figures| (f.isolation_mean - median_fig.isolation_mean).abs();
            d(a.1).total_cmp(&d(b.1))
        })
        .map(|(r, _)| r);
    let series = pick
        .and_then(|r| base_of(r).map(|b| series(r, b)))
        .unwrap_or_default();
    let verdict = pick.and_then(|r| {
        let io = r.io.as_ref()?;
        if setup == Setup::Baseline {
            return Some(super::diag::alone(io));
        }
        let b = base_of(r)?;
        let base = b.io.clone().unwrap_or_default();
        let mut v = super::diag::verdict(io, &base);
        // CPU per operation: the same work costing more CPU (caches, a busier machine, an
        // emulator's I/O threads taking the host's CPU) shows here, not in any wait.
        let per_op = |d: &RunData| d.window.server_cpus / d.load.op_rate.max(1e-9) * 1e6;
        let (now, then) = (per_op(r), per_op(b));
        if now > then * 1.15 && then > 0.0 {
            v.push_str(&format!("; CPU per operation {now:.0} us vs {then:.0} us"));
        }
        Some(v)
    });
    ScenarioResult {
        hog: hog.into(),
        load,
        setup,
        hog_unit: hog_unit.into(),
        median: median_fig,
        rounds,
        series,
        verdict,
        db_died: runs.iter().find_map(|r| r.db_died.clone()),
        hog_fate: runs.iter().find_map(|r| r.hog_fate.clone()),
        runs,
    }
}

fn find<'a>(
    s: &'a [ScenarioResult],
    hog: &str,
    load: Load,
    setup: Setup,
) -> Option<&'a ScenarioResult> {
    s.iter()
        .find(|x| x.hog == hog && x.load == load && x.setup == setup)
}

/// Why a figure is what it is: the signals the report has for it.
fn diagnosis(s: &[ScenarioResult], x: &ScenarioResult) -> String {
    let base = find(
        s,
        x.hog.trim_end_matches("-bursty"),
        x.load,
        Setup::Baseline,
    );
    let f = &x.median;
    format!(
        "run-queue wait {:.0} us/run (baseline {:.0}), helper {:.2} CPUs, steal {:.1}%, {} guard actions",
        f.wait_per_run_us,
        base.map_or(f64::NAN, |b| b.median.wait_per_run_us),
        f.helper_cpus,
        f.steal * 100.0,
        f.guard_actions
    )
}

fn check(what: String, target: &str, value: f64, met: bool, why: String) -> Check {
    Check {
        what,
        target: target.into(),
        measured: format!("{value:.3} ({why})"),
        met,
    }
}

/// The I/O figures (issue 26), for the plan and the guard under each I/O hog: at 80% of the
/// peak iso p01 >= 0.95, p99 <= 1.5x baseline and never worse than free; closed loop >= 0.95
/// of baseline; the helper keeps >= 30% of the I/O it gets alone.
fn io_checks(s: &[ScenarioResult], db: DbKind) -> Vec<Check> {
    let mut out = Vec::new();
    let why = |x: &ScenarioResult| x.verdict.clone().unwrap_or_default();
    for hog in ["io", "reader", "backup", "backup-other"] {
        for setup in [Setup::Static, Setup::Guarded] {
            let name = |w: &str| format!("{} {hog} hog, {}: {w}", db.name(), setup.name());
            if let Some(x) = find(s, hog, Load::Open(80), setup) {
                let f = &x.median;
                out.push(check(
                    name("80% open, iso p01"),
                    ">= 0.95",
                    f.isolation_p01,
                    f.isolation_p01 >= 0.95,
                    why(x),
                ));
                out.push(check(
                    name("80% open, p99 x baseline"),
                    "<= 1.5",
                    f.p99_ratio,
                    f.p99_ratio <= 1.5,
                    why(x),
                ));
                if let Some(free) = find(s, hog, Load::Open(80), Setup::Free) {
                    out.push(check(
                        name("80% open, p99 not worse than free"),
                        "<= free",
                        f.p99_ratio,
                        f.p99_ratio <= free.median.p99_ratio,
                        format!("free: {:.2}", free.median.p99_ratio),
                    ));
                }
                if f.hog_share_of_alone.is_finite() {
                    out.push(check(
                        name("80% open, helper's I/O / alone"),
                        ">= 0.30",
                        f.hog_share_of_alone,
                        f.hog_share_of_alone >= 0.30,
                        format!("{:.1} {} against alone", f.hog_work, x.hog_unit),
                    ));
                }
            }
            if let Some(x) = find(s, hog, Load::Closed, setup) {
                let f = &x.median;
                out.push(check(
                    name("closed loop, op rate x baseline"),
                    ">= 0.95",
                    f.isolation_mean,
                    f.isolation_mean >= 0.95,
                    why(x),
                ));
            }
        }
    }
    out
}

/// The figures, checked against the medians.
pub fn checks(s: &[ScenarioResult], db: DbKind) -> Vec<Check> {
    let mut out = Vec::new();
    out.extend(cpu_open_checks(s));
    out.extend(cpu_closed_checks(s));
    out.extend(memory_checks(s));
    out.extend(io_checks(s, db));
    out.extend(guard_cost_check(s));
    out.extend(monitor_checks(s));
    out.extend(pgdump_checks(s));
    out
}

/// A real backup beside the database (issue 43): at 50% of the peak, with the dump and its
/// backend placed, the database keeps >= 0.97 of its rate and p99 <= 1.5x, and the dump
/// keeps >= 30% of what it does alone.
fn pgdump_checks(s: &[ScenarioResult]) -> Vec<Check> {
    let Some(x) = find(s, "pgdump", Load::Open(50), Setup::Placed) else {
        return Vec::new();
    };
    let f = &x.median;
    let why = diagnosis(s, x);
    let name = |w: &str| format!("pgdump hog, 50% open, placed: {w}");
    vec![
        check(
            name("op rate x offered"),
            ">= 0.97",
            f.isolation_mean,
            f.isolation_mean >= 0.97,
            why.clone(),
        ),
        check(
            name("p99 x baseline"),
            "<= 1.5",
            f.p99_ratio,
            f.p99_ratio <= 1.5,
            why,
        ),
        check(
            name("dumps / alone"),
            ">= 0.30",
            f.hog_share_of_alone,
            f.hog_share_of_alone >= 0.30,
            format!("{:.2} {} against alone", f.hog_work, x.hog_unit),
        ),
    ]
}

/// The monitoring probe at closed loop (the server keeping the CPUs busy), per hog and
/// setup: >= 99% of scrapes answered within 1 s (issue 43).
fn monitor_checks(s: &[ScenarioResult]) -> Vec<Check> {
    s.iter()
        .filter(|x| x.load == Load::Closed && x.median.probe_within_1s.is_finite())
        .map(|x| {
            let f = &x.median;
            check(
                format!(
                    "{} hog, closed loop, {}: monitoring scrapes within 1 s",
                    x.hog,
                    x.setup.name()
                ),
                ">= 0.99",
                f.probe_within_1s,
                f.probe_within_1s >= 0.99,
                format!("p99 {:.0} ms", f.probe_p99_ms),
            )
        })
        .collect()
}

/// The CPU hog at 80% open load, guarded.
fn cpu_open_checks(s: &[ScenarioResult]) -> Vec<Check> {
    let Some(g) = find(s, "cpu", Load::Open(80), Setup::Guarded) else {
        return Vec::new();
    };
    let f = &g.median;
    let d = diagnosis(s, g);
    let name = |w: &str| format!("cpu hog, 80% open, guarded: {w}");
    vec![
        check(
            name("isolation mean"),
            ">= 0.99",
            f.isolation_mean,
            f.isolation_mean >= 0.99,
            d.clone(),
        ),
        check(
            name("isolation p01"),
            ">= 0.95",
            f.isolation_p01,
            f.isolation_p01 >= 0.95,
            d.clone(),
        ),
        check(
            name("p99 x baseline"),
            "<= 1.10",
            f.p99_ratio,
            f.p99_ratio <= 1.10,
            d.clone(),
        ),
        check(
            name("helper CPU / baseline idle"),
            ">= 0.50",
            f.helper_share_of_idle,
            f.helper_share_of_idle >= 0.5,
            d,
        ),
    ]
}

/// The CPU hog at closed loop, guarded (and against the idle weight alone).
fn cpu_closed_checks(s: &[ScenarioResult]) -> Vec<Check> {
    let Some(g) = find(s, "cpu", Load::Closed, Setup::Guarded) else {
        return Vec::new();
    };
    let f = &g.median;
    let d = diagnosis(s, g);
    let name = |w: &str| format!("cpu hog, closed loop, guarded: {w}");
    let mut out = vec![
        check(
            name("op rate x baseline"),
            ">= 0.97",
            f.isolation_mean,
            f.isolation_mean >= 0.97,
            d.clone(),
        ),
        check(
            name("p99 x baseline"),
            "<= 1.15",
            f.p99_ratio,
            f.p99_ratio <= 1.15,
            d.clone(),
        ),
    ];
    if let Some(i) = find(s, "cpu", Load::Closed, Setup::Idle) {
        let better = f.isolation_mean > i.median.isolation_mean;
        out.push(check(
            name("op rate above idle weight alone"),
            "> idle",
            f.isolation_mean,
            better,
            format!("idle alone: {:.3}", i.median.isolation_mean),
        ));
    }
    out
}

/// The memory hog, guarded: the op rate held, and the database never OOM-killed.
fn memory_checks(s: &[ScenarioResult]) -> Vec<Check> {
    let mut out = Vec::new();
    for load in [Load::Open(80), Load::Closed] {
        if let Some(g) = find(s, "memory", load, Setup::Guarded) {
            let f = &g.median;
            out.push(check(
                format!("memory hog, {}, guarded: op rate x baseline", load.label()),
                ">= 0.95",
                f.isolation_mean,
                f.isolation_mean >= 0.95,
                diagnosis(s, g),
            ));
            out.push(Check {
                what: format!(
                    "memory hog, {}, guarded: database never OOM-killed",
                    load.label()
                ),
                target: "never".into(),
                measured: g.db_died.clone().unwrap_or_else(|| "never".into()),
                met: g.db_died.is_none(),
            });
        }
    }
    out
}

/// The guard's own CPU, its worst scenario.
fn guard_cost_check(s: &[ScenarioResult]) -> Option<Check> {
    let costs: Vec<f64> = s
        .iter()
        .filter(|x| x.setup == Setup::Guarded)
        .map(|x| x.median.guard_cost_percent)
        .filter(|c| c.is_finite())
        .collect();
    if costs.is_empty() {
        return None;
    }
    let worst = costs.iter().copied().fold(0.0, f64::max);
    Some(Check {
        what: "the guard's own CPU (worst scenario, % of one CPU)".into(),
        target: "< 1%".into(),
        measured: format!("{worst:.2}%"),
        met: worst < 1.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SecondFigures;

    fn run(
        round: usize,
        per_second: &[(u64, f64)],
        offered: Option<f64>,
        helper: f64,
        idle: f64,
    ) -> RunData {
        let seconds: Vec<SecondFigures> = per_second
            .iter()
            .map(|&(ops, p99)| SecondFigures {
                ops,
                p99_ms: p99,
                ..Default::default()
            })
            .collect();
        let ops: u64 = seconds.iter().map(|s| s.ops).sum();
        RunData {
            round,
            load: LoadResult {
                op_rate: ops as f64 / seconds.len() as f64,
                latency: crate::LatencySummary {
                    p99_ms: per_second.iter().map(|s| s.1).fold(0.0, f64::max),
                    ..Default::default()
                },
                seconds,
                ..Default::default()
            },
            offered,
            window: Window {
                helper_cpus: helper,
                idle_cpus: idle,
                ..Default::default()
            },
            hog_work: 0.0,
            hog_alone: None,
            db_died: None,
            hog_fate: None,
            guard_actions: vec![],
            guard_cost_percent: None,
            io: None,
            probe: None,
            placed: None,
        }
    }

    #[test]
    fn open_loop_isolation_is_per_second_achieved_over_offered() {
        let base = run(0, &[(100, 1.0); 4], Some(100.0), 0.0, 0.4);
        let r = run(
            0,
            &[(100, 1.0), (90, 2.0), (100, 1.0), (110, 1.0)],
            Some(100.0),
            0.3,
            0.0,
        );
        let f = figures(&r, &base);
        assert!((f.isolation_mean - 1.0).abs() < 1e-9);
        assert!((f.isolation_min - 0.9).abs() < 1e-9);
        assert!((f.isolation_p01 - 0.9).abs() < 1e-9);
        assert!((f.p99_ratio - 2.0).abs() < 1e-9);
        assert!((f.helper_share_of_idle - 0.75).abs() < 1e-9);
    }

    #[test]
    fn closed_loop_isolation_is_against_the_baseline_rate_and_rounds_pair() {
        let bases = vec![
            run(0, &[(100, 1.0); 2], None, 0.0, 0.1),
            run(1, &[(200, 1.0); 2], None, 0.0, 0.1),
        ];
        let runs = vec![
            run(0, &[(50, 1.0); 2], None, 0.0, 0.0),
            run(1, &[(200, 1.0); 2], None, 0.0, 0.0),
        ];
        let s = combine(
            "cpu",
            Load::Closed,
            Setup::Guarded,
            "M iterations",
            runs,
            &bases,
        );
        assert_eq!(s.rounds.len(), 2);
        assert!((s.rounds[0].isolation_mean - 0.5).abs() < 1e-9);
        assert!((s.rounds[1].isolation_mean - 1.0).abs() < 1e-9);
        assert!((s.median.isolation_mean - 0.75).abs() < 1e-9);
    }
}
