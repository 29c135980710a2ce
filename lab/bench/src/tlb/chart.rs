//! The report as a PNG chart.

use super::report::Report;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One bar: its label, its group (the colour), and the ratio's median, min and max.
struct Bar {
    label: String,
    group: String,
    median: f64,
    min: f64,
    max: f64,
}

type Chart<'a, 'b> = crate::hbars::Rows<'a, 'b, RangedCoordf64>;

/// Every backing's ratio to 4K per row size and thread count, then Redis's; the first bar at
/// the top.
fn bars(r: &Report) -> Vec<Bar> {
    let mut bars: Vec<Bar> = r
        .cells
        .iter()
        .filter(|c| c.backing != "4K" && c.ratio_median.is_finite())
        .map(|c| Bar {
            label: format!("{} B, {} thr: {}", c.row_bytes, c.threads, c.backing),
            group: c.backing.clone(),
            median: c.ratio_median,
            min: c.ratio_min,
            max: c.ratio_max,
        })
        .collect();
    if let Some(red) = &r.redis {
        for v in red.variants.iter().skip(1) {
            if v.ratio_median.is_finite() {
                bars.push(Bar {
                    label: format!("Redis GET: {}", v.name),
                    group: "Redis".into(),
                    median: v.ratio_median,
                    min: v.ratio_min,
                    max: v.ratio_max,
                });
            }
        }
    }
    bars.reverse();
    bars
}

/// A PNG: per row size and thread count, each backing's median rate as a ratio to 4K, with
/// the min-max range over rounds; Redis below.
pub fn chart(r: &Report, path: &Path) -> Result<(), String> {
    crate::report::register_font()?;
    let bars = bars(r);
    let n = bars.len().max(1);
    let root = BitMapBackend::new(path, (1100, 170 + 30 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(
            &format!(
                "bulkhead bench tlb: throughput vs 4K pages, median of {} round(s), whisker min-max (a VM: backing changes run to run)",
                r.rounds_done
            ),
            ("sans-serif", 17),
        )
        .map_err(|e| e.to_string())?;
    let max = bars
        .iter()
        .map(|b| b.max)
        .filter(|v| v.is_finite())
        .fold(1.5f64, f64::max)
        * 1.15;
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let mut c = axes(&root, max, &labels)?;
    draw(&mut c, &bars, max)?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// The axes: ratios across, one labelled segment per bar down.
fn axes<'a, 'b>(
    root: &'a DrawingArea<BitMapBackend<'b>, Shift>,
    max: f64,
    labels: &[String],
) -> Result<Chart<'a, 'b>, String> {
    let n = labels.len().max(1);
    let mut c = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(230)
        .build_cartesian_2d(0f64..max, (0..n).into_segmented())
        .map_err(|e| e.to_string())?;
    crate::hbars::label_rows(&mut c, labels, "throughput / 4K throughput, same round")?;
    Ok(c)
}

/// The bars, their min-max whiskers and values, and the 4K line at 1.
fn draw(c: &mut Chart<'_, '_>, bars: &[Bar], max: f64) -> Result<(), String> {
    let n = bars.len().max(1);
    let color = |g: &str| match g {
        "THP" => BLUE,
        "2M" => GREEN,
        "1G" => MAGENTA,
        _ => RED,
    };
    let shown: Vec<crate::hbars::Bar> = bars
        .iter()
        .map(|b| {
            let text = format!("x{:.2}", b.median);
            let at = b.max.max(b.median) + max * 0.01;
            crate::hbars::Bar::new(b.median, (b.min, b.max), color(&b.group), text, at)
        })
        .collect();
    let style = crate::hbars::Style {
        base: 0.0,
        margin: 4,
        font_size: 13,
    };
    crate::hbars::draw(c, &shown, &style)?;
    c.draw_series(std::iter::once(PathElement::new(
        vec![(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Exact(n))],
        BLACK.stroke_width(1),
    )))
    .map_err(|e| e.to_string())?;
    Ok(())
}
