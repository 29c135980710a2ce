//! Horizontal bars with a whisker and a value label each, one labelled row per bar: the
//! charts of `bench spawn` (log scale) and `bench tlb` (ratios) label their rows and draw
//! their bars here.

use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordusize;
use plotters::prelude::*;

/// One bar, in row `i` of the chart (the first row at the bottom).
pub struct Bar {
    /// Where the bar ends (its value); a bar whose value is not finite is left out.
    pub value: f64,
    /// The whisker's ends (drawn when both are finite).
    pub low: f64,
    pub high: f64,
    pub color: RGBColor,
    /// The label beside the bar, and where it starts.
    pub text: String,
    pub text_at: f64,
}

impl Bar {
    /// A bar to `value` with a whisker over `whisker` (low, high), and `text` at `text_at`.
    pub fn new(
        value: f64,
        whisker: (f64, f64),
        color: RGBColor,
        text: String,
        text_at: f64,
    ) -> Bar {
        let (low, high) = whisker;
        Bar {
            value,
            low,
            high,
            color,
            text,
            text_at,
        }
    }
}

/// How the bars look: where they start, their margin above and below, the label's size.
pub struct Style {
    pub base: f64,
    pub margin: u32,
    pub font_size: u32,
}

/// A chart with a value axis across and one segment per bar down.
pub type Rows<'a, 'b, X> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<X, SegmentedCoord<RangedCoordusize>>>;

/// Label the rows (one per bar, the first at the bottom) and the value axis (`x_desc`).
pub fn label_rows<X>(c: &mut Rows<'_, '_, X>, labels: &[String], x_desc: &str) -> Result<(), String>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    c.configure_mesh()
        .disable_y_mesh()
        .y_labels(labels.len().max(1))
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc(x_desc)
        .draw()
        .map_err(|e| e.to_string())
}

/// Draw the bars, then their whiskers, then their labels.
pub fn draw<X>(c: &mut Rows<'_, '_, X>, bars: &[Bar], style: &Style) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
{
    let shown = || bars.iter().enumerate().filter(|(_, b)| b.value.is_finite());
    c.draw_series(shown().map(|(i, b)| {
        let mut bar = Rectangle::new(
            [
                (style.base, SegmentValue::Exact(i)),
                (b.value, SegmentValue::Exact(i + 1)),
            ],
            b.color.mix(0.5).filled(),
        );
        bar.set_margin(style.margin, style.margin, 0, 0);
        bar
    }))
    .map_err(|e| e.to_string())?;
    c.draw_series(
        shown()
            .filter(|(_, b)| b.low.is_finite() && b.high.is_finite())
            .map(|(i, b)| {
                PathElement::new(
                    vec![
                        (b.low, SegmentValue::CenterOf(i)),
                        (b.high, SegmentValue::CenterOf(i)),
                    ],
                    BLACK.stroke_width(2),
                )
            }),
    )
    .map_err(|e| e.to_string())?;
    c.draw_series(shown().map(|(i, b)| {
        Text::new(
            b.text.clone(),
            (b.text_at, SegmentValue::CenterOf(i)),
            ("sans-serif", style.font_size),
        )
    }))
    .map_err(|e| e.to_string())?;
    Ok(())
}
