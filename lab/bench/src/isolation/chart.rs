//! The isolation chart: for each hog at the reference load (80% of the peak), per second,
//! the database's isolation (left) and its p99 over the baseline's (right, log scale), one
//! line per setup, with the guard's actions marked along the top (red: cuts and freezes,
//! green: releases).

use super::{Load, Report, ScenarioResult, Setup, REFERENCE_LOAD};
use plotters::prelude::*;
use std::path::Path;

fn color(s: Setup) -> RGBColor {
    match s {
        Setup::Baseline => RGBColor(0, 0, 0),
        Setup::Free => RGBColor(200, 120, 0),
        Setup::Static => RGBColor(120, 120, 220),
        Setup::Idle => RGBColor(0, 150, 150),
        Setup::IdleQuota => RGBColor(150, 0, 150),
        Setup::Guarded => RGBColor(220, 0, 0),
        Setup::Placed => RGBColor(0, 140, 0),
    }
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

pub fn chart(r: &Report, path: &Path) -> Result<(), String> {
    crate::report::register_font()?;
    let mut hogs: Vec<&str> = Vec::new();
    for s in &r.scenarios {
        if s.load == REFERENCE_LOAD && !hogs.contains(&s.hog.as_str()) {
            hogs.push(&s.hog);
        }
    }
    if hogs.is_empty() {
        return Err(format!(
            "the chart shows the {} load, which this run did not measure",
            REFERENCE_LOAD.label()
        ));
    }
    let root = BitMapBackend::new(path, (1400, 60 + 300 * hogs.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(
            &format!(
                "bulkhead bench isolation: {} per second at {} of its peak (median round)",
                r.database.split(' ').next().unwrap_or("the database"),
                REFERENCE_LOAD.label()
            ),
            ("sans-serif", 22),
        )
        .map_err(|e| e.to_string())?;
    let rows = root.split_evenly((hogs.len(), 2));
    for (i, hog) in hogs.iter().enumerate() {
        let list: Vec<&ScenarioResult> = r
            .scenarios
            .iter()
            .filter(|s| {
                s.load == REFERENCE_LOAD
                    && (s.hog == *hog
                        || (s.setup == Setup::Baseline && hog.trim_end_matches("-bursty") == s.hog))
            })
            .collect();
        panel(&rows[2 * i], hog, &list, true)?;
        panel(&rows[2 * i + 1], hog, &list, false)?;
    }
    root.present().map_err(|e| e.to_string())
}

fn panel(area: &Area, hog: &str, list: &[&ScenarioResult], isolation: bool) -> Result<(), String> {
    let secs = list
        .iter()
        .map(|s| s.series.isolation.len())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let values = |s: &ScenarioResult| -> Vec<f64> {
        if isolation {
            s.series.isolation.clone()
        } else {
            s.series.p99_ratio.iter().map(|v| v.max(0.1)).collect()
        }
    };
    let top = list.iter().flat_map(|s| values(s)).fold(1.2f64, f64::max);
    let title = if isolation {
        format!("{hog}: isolation per second (done / offered)")
    } else {
        format!("{hog}: p99 per second / baseline p99 (log)")
    };
    let mut c = ChartBuilder::on(area);
    c.caption(title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(48);
    if isolation {
        let lo = list
            .iter()
            .flat_map(|s| values(s))
            .fold(0.9f64, f64::min)
            .max(0.0);
        let mut ch = c
            .build_cartesian_2d(0f64..secs, lo..1.1f64.max(top.min(1.3)))
            .map_err(|e| e.to_string())?;
        ch.configure_mesh()
            .x_desc("second")
            .draw()
            .map_err(|e| e.to_string())?;
        lines(&mut ch, list, values)?;
        marks(&mut ch, list, 1.1f64.max(top.min(1.3)))?;
        legend(&mut ch)?;
    } else {
        let mut ch = c
            .build_cartesian_2d(0f64..secs, (0.1f64..top.max(2.0) * 1.2).log_scale())
            .map_err(|e| e.to_string())?;
        ch.configure_mesh()
            .x_desc("second")
            .draw()
            .map_err(|e| e.to_string())?;
        lines(&mut ch, list, values)?;
        legend(&mut ch)?;
    }
    Ok(())
}

type Chart<'a, Y> =
    ChartContext<'a, BitMapBackend<'a>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>;

fn lines<Y>(
    ch: &mut Chart<'_, Y>,
    list: &[&ScenarioResult],
    values: impl Fn(&ScenarioResult) -> Vec<f64>,
) -> Result<(), String>
where
    Y: Ranged<ValueType = f64>,
{
    for s in list {
        let col = color(s.setup);
        let pts: Vec<(f64, f64)> = values(s)
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i as f64 + 0.5, v))
            .collect();
        ch.draw_series(LineSeries::new(pts, col.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(format!(
                "{}{}",
                s.setup.name(),
                if s.load == Load::Closed {
                    " (closed)"
                } else {
                    ""
                }
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], col.stroke_width(2)));
    }
    Ok(())
}

fn marks<Y>(ch: &mut Chart<'_, Y>, list: &[&ScenarioResult], top: f64) -> Result<(), String>
where
    Y: Ranged<ValueType = f64>,
{
    let Some(g) = list.iter().find(|s| s.setup == Setup::Guarded) else {
        return Ok(());
    };
    let secs = g.series.isolation.len() as f64;
    let pts = g.series.marks.iter().filter(|m| (0.0..secs).contains(&m.t));
    ch.draw_series(pts.map(|m| {
        let col = if m.kind == "release" {
            RGBColor(0, 160, 0)
        } else {
            RGBColor(220, 0, 0)
        };
        TriangleMarker::new((m.t, top * 0.985), 5, col.filled())
    }))
    .map_err(|e| e.to_string())?;
    Ok(())
}

fn legend<Y>(ch: &mut Chart<'_, Y>) -> Result<(), String>
where
    Y: Ranged<ValueType = f64>,
{
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .label_font(("sans-serif", 11))
        .draw()
        .map_err(|e| e.to_string())
}
