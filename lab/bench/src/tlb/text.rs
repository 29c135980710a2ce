//! The report as text.

use super::report::Report;
use crate::stats;

/// A rate with thousands separators, "-" when there is none.
fn thousands(n: f64) -> String {
    if !n.is_finite() {
        return "-".into();
    }
    crate::report::thousands(n)
}

fn pct(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let lo = stats::interpolated(v, 0.0) * 100.0;
    let hi = stats::interpolated(v, 1.0) * 100.0;
    if (hi - lo).abs() < 0.5 {
        format!("{:.0}%", stats::interpolated(v, 0.5) * 100.0)
    } else {
        format!(
            "{:.0}% [{lo:.0}-{hi:.0}%]",
            stats::interpolated(v, 0.5) * 100.0
        )
    }
}

/// The report as text.
pub fn text(r: &Report) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "bench tlb: random reads of whole rows from a {} in-memory table, per page backing; {} round(s){} (backings rotated each round, each mapped afresh), {:.2} s per measurement\nmachine: {}; THP mode '{}'\n{}\n\n",
        bulkhead::units::human_bytes(r.table_bytes),
        r.rounds_done,
        if r.rounds_done < r.rounds {
            format!(" of {} (interrupted)", r.rounds)
        } else {
            String::new()
        },
        r.duration_s,
        r.machine,
        r.thp_mode,
        r.note
    ));
    s.push_str("backings (share of the table on huge pages, median [min-max] over rounds):\n");
    for b in &r.backings {
        match &b.skipped {
            Some(why) => s.push_str(&format!(
                "  {:<4} {:<40} skipped: {why}\n",
                b.name, b.description
            )),
            None => s.push_str(&format!(
                "  {:<4} {:<40} {}{}\n",
                b.name,
                b.description,
                pct(&b.huge_coverage),
                match b.pool_pages_added {
                    Some(n) if n > 0 =>
                        format!("; pool grown by {n} page(s) for the run, given back"),
                    _ => String::new(),
                }
            )),
        }
    }
    s.push_str(&format!(
        "\n{:>7} {:>7}  {:<7} {:>16} {:>10}  {:<15} {}\n",
        "row B", "threads", "backing", "M rows/s (med.)", "x 4K", "[min-max]", "IQR of ratios"
    ));
    for c in &r.cells {
        let spread = if c.backing == "4K" || c.ratios.len() < 2 {
            (String::new(), String::new())
        } else {
            (
                format!("[{:.2}-{:.2}]", c.ratio_min, c.ratio_max),
                format!("{:.2}-{:.2}", c.ratio_p25, c.ratio_p75),
            )
        };
        s.push_str(&format!(
            "{:>7} {:>7}  {:<7} {:>16.2} {:>10.2}  {:<15} {}\n",
            c.row_bytes,
            c.threads,
            c.backing,
            c.median_rate / 1e6,
            c.ratio_median,
            spread.0,
            spread.1
        ));
    }
    if let Some(red) = &r.redis {
        s.push_str(&format!(
            "\nRedis GET, end to end ({}; {} keys of {} B, {} connections, closed loop, {:.0} s per round):\n",
            red.server, red.keys, red.value_size, red.connections, red.duration_s
        ));
        for v in &red.variants {
            match &v.skipped {
                Some(why) => s.push_str(&format!("  {:<22} skipped: {why}\n", v.name)),
                None => s.push_str(&format!(
                    "  {:<22} {:>10} op/s  x{:.3} [{:.3}-{:.3}]  THP coverage of the server {}{}\n",
                    v.name,
                    thousands(v.median_op_rate),
                    v.ratio_median,
                    v.ratio_min,
                    v.ratio_max,
                    pct(&v.thp_coverage),
                    if v.errors > 0 {
                        format!("; {} errors", v.errors)
                    } else {
                        String::new()
                    }
                )),
            }
        }
    } else if let Some(why) = &r.redis_skipped {
        s.push_str(&format!("\nRedis: {why}\n"));
    }
    if !r.verdicts.is_empty() {
        s.push('\n');
        for v in &r.verdicts {
            s.push_str(&format!("{v}\n"));
        }
    }
    s
}
