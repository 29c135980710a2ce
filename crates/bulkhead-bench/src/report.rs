//! Reports people read: cassandra-stress-style blocks, a summary with ratios to baseline, and
//! a PNG chart.

use crate::isolation::{Report, Scenario};
use std::fmt::Write as _;
use std::path::Path;

fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in s.chars().rev().enumerate() {
        if i > 0 && i % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out.chars().rev().collect()
}

fn hms(secs: f64) -> String {
    let s = secs.round() as u64;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// One scenario as cassandra-stress prints its results.
pub fn block(s: &Scenario) -> String {
    let l = &s.load;
    let mut o = String::new();
    let per_s = |n: u64| thousands(n as f64 / l.duration_s);
    let _ = writeln!(o, "== {} hog: {} ==", s.hog, s.name);
    let _ = writeln!(
        o,
        "Op rate                   : {:>9} op/s  [GET: {} op/s, SET: {} op/s]",
        thousands(l.op_rate),
        per_s(l.gets),
        per_s(l.sets)
    );
    for (label, v) in [
        ("Latency mean              ", l.latency.mean_ms),
        ("Latency median            ", l.latency.p50_ms),
        ("Latency 95th percentile   ", l.latency.p95_ms),
        ("Latency 99th percentile   ", l.latency.p99_ms),
        ("Latency 99.9th percentile ", l.latency.p999_ms),
        ("Latency max               ", l.latency.max_ms),
    ] {
        let _ = writeln!(o, "{label}: {v:>7.2} ms");
    }
    let _ = writeln!(
        o,
        "Total errors              : {:>9}",
        thousands(l.errors as f64)
    );
    let _ = writeln!(
        o,
        "Total operations          : {:>9}",
        thousands(l.ops as f64)
    );
    let _ = writeln!(o, "Total operation time      : {}", hms(l.duration_s));
    if !s.hogs.is_empty() {
        let _ = writeln!(
            o,
            "Hog progress              : {} ({} process(es))",
            hog_text(s),
            s.hogs.len()
        );
    }
    if s.rounds.len() > 1 {
        let rates: Vec<String> = s.rounds.iter().map(|r| thousands(r.op_rate)).collect();
        let _ = writeln!(
            o,
            "Rounds (op/s)             : {} (the block shows the median round)",
            rates.join(", ")
        );
    }
    if let Some(f) = &s.hog_fate {
        let _ = writeln!(o, "Hog fate                  : {f}");
    }
    if let (Some(sv), Some(lg)) = (s.server_cpu_percent, s.loadgen_cpu_percent) {
        let _ = writeln!(
            o,
            "CPU (% of one CPU)        : database {sv:.0}%, load generator {lg:.0}%"
        );
    }
    if let Some(d) = &s.db_died {
        let _ = writeln!(o, "DATABASE DIED             : {d}");
    }
    o
}

fn hog_text(s: &Scenario) -> String {
    let w = crate::isolation::hog_work(&s.hogs);
    match s.hogs.first() {
        None => "-".into(),
        Some(h) if h.kind == "memory" => format!("{w:.0} MiB held"),
        Some(h) => format!("{w:.1} {}/s", h.unit),
    }
}

fn spread(v: impl Iterator<Item = f64>) -> String {
    let v: Vec<f64> = v.collect();
    if v.len() < 2 {
        return String::new();
    }
    let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    format!(" [{lo:.2}-{hi:.2}]")
}

fn baseline<'a>(r: &'a Report, hog: &str) -> Option<&'a Scenario> {
    r.scenarios
        .iter()
        .find(|s| s.hog == hog && s.name == "baseline")
}

/// Median ratios to baseline (paired by round); a single run falls back to the plain ratio.
pub fn ratios(r: &Report, s: &Scenario) -> (f64, f64) {
    if s.median_op_rate_ratio.is_finite() && !s.rounds.is_empty() {
        return (s.median_op_rate_ratio, s.median_p99_ratio);
    }
    let b = baseline(r, &s.hog);
    (
        b.map_or(f64::NAN, |b| s.load.op_rate / b.load.op_rate),
        b.map_or(f64::NAN, |b| s.load.latency.p99_ms / b.load.latency.p99_ms),
    )
}

/// Op rate and p99 of every scenario as ratios to its group's baseline.
pub fn summary(r: &Report) -> String {
    let mut o = String::new();
    let rounds = r.scenarios.first().map_or(0, |s| s.rounds.len());
    let _ = writeln!(
        o,
        "Medians over {rounds} round(s); ratios are paired with the same round's baseline, [min-max] over rounds.\n"
    );
    let _ = writeln!(
        o,
        "{:<6} {:<34} {:>10} {:>19} {:>9} {:>19} {:>22}  notes",
        "hog", "scenario", "op/s", "x base", "p99 ms", "x base", "hog progress"
    );
    for s in &r.scenarios {
        let (rate_x, p99_x) = ratios(r, s);
        let mut notes = Vec::new();
        if let Some(d) = &s.db_died {
            notes.push(format!("DATABASE DIED: {d}"));
        }
        if let Some(f) = &s.hog_fate {
            notes.push(format!("hog {f}"));
        }
        if s.load.errors > 0 {
            notes.push(format!("{} errors", s.load.errors));
        }
        let _ = writeln!(
            o,
            "{:<6} {:<34} {:>10} {:>19} {:>9.2} {:>19} {:>22}  {}",
            s.hog,
            s.name,
            thousands(s.load.op_rate),
            format!(
                "{rate_x:.3}{}",
                spread(s.rounds.iter().map(|x| x.op_rate_ratio))
            ),
            s.load.latency.p99_ms,
            format!("{p99_x:.2}{}", spread(s.rounds.iter().map(|x| x.p99_ratio))),
            hog_text(s),
            notes.join("; ")
        );
    }
    o
}

fn font() -> Option<&'static [u8]> {
    for p in [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
    ] {
        if let Ok(b) = std::fs::read(p) {
            return Some(Box::leak(b.into_boxed_slice()));
        }
    }
    None
}

/// Register the font the charts' text uses.
pub fn register_font() -> Result<(), String> {
    let bytes = font().ok_or(
        "no DejaVuSans.ttf found for the chart's text (apt-get install fonts-dejavu-core)",
    )?;
    plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
        .map_err(|_| "cannot load the chart font".to_string())
}

/// A PNG with two panels: op rate and p99 per scenario, as ratios to baseline.
pub fn chart(r: &Report, path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    register_font()?;
    let n = r.scenarios.len();
    let root = BitMapBackend::new(path, (1200, 220 + 34 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(
            "bulkhead bench isolation: Redis op rate and p99 vs baseline (medians)",
            ("sans-serif", 22),
        )
        .map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(600);
    let labels: Vec<String> = r
        .scenarios
        .iter()
        .map(|s| format!("{}: {}", s.hog, s.name))
        .collect();
    let rate: Vec<f64> = r.scenarios.iter().map(|s| ratios(r, s).0).collect();
    let p99: Vec<f64> = r.scenarios.iter().map(|s| ratios(r, s).1).collect();
    for (area, values, title, color) in [
        (&left, &rate, "op rate / baseline (higher is better)", BLUE),
        (
            &right,
            &p99,
            "p99 latency / baseline (lower is better)",
            RED,
        ),
    ] {
        let max = values.iter().cloned().fold(1.2f64, f64::max) * 1.1;
        let mut c = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(if std::ptr::eq(area, &left) { 250 } else { 10 })
            .build_cartesian_2d(0f64..max, (0..n).into_segmented())
            .map_err(|e| e.to_string())?;
        let lbl = labels.clone();
        c.configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if std::ptr::eq(area, &left) => {
                    lbl.get(*i).cloned().unwrap_or_default()
                }
                _ => String::new(),
            })
            .draw()
            .map_err(|e| e.to_string())?;
        c.draw_series(values.iter().enumerate().map(|(i, v)| {
            let mut bar = Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (*v, SegmentValue::Exact(i + 1)),
                ],
                color.mix(0.6).filled(),
            );
            bar.set_margin(4, 4, 0, 0);
            bar
        }))
        .map_err(|e| e.to_string())?;
        c.draw_series(values.iter().enumerate().map(|(i, v)| {
            Text::new(
                format!("{v:.2}x"),
                (*v + max * 0.01, SegmentValue::CenterOf(i)),
                ("sans-serif", 13),
            )
        }))
        .map_err(|e| e.to_string())?;
        c.draw_series(std::iter::once(PathElement::new(
            vec![(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Exact(n))],
            BLACK.stroke_width(1),
        )))
        .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// One figure a benchmark is held to: what, the target, what was measured, whether it was met.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub what: String,
    pub target: String,
    pub measured: String,
    pub met: bool,
}

/// The checks and skipped peers, one line each, as the end of a text report.
pub fn checks_text(checks: &[Check], skipped: &[String]) -> String {
    let width = checks.iter().map(|c| c.what.len()).max().unwrap_or(0);
    let mut s = String::new();
    for c in checks {
        let _ = writeln!(
            s,
            "{} {:<width$} target {:<8} measured {}",
            if c.met { "met   " } else { "MISSED" },
            c.what,
            c.target,
            c.measured
        );
    }
    for k in skipped {
        let _ = writeln!(s, "skipped: {k}");
    }
    s
}
