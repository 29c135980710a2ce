//! `bulkhead check`'s verdict as families: the state (one series per state, 1 for the one in
//! force, as kube-state-metrics writes enums), each check area's worst level in the plugin
//! codes, and when it was judged.

use crate::check::verdict::State;
use crate::check::Report;
use crate::exposition::text::{Kind, Sample, Value, Writer};

/// Write the protection families from one check (`at`: its Unix time, seconds).
pub fn write(w: &mut Writer, r: &Report, at: f64) {
    let states: Vec<Sample> = State::ALL
        .iter()
        .map(|s| {
            (
                vec![("state", s.name().to_string())],
                Value::Int(u64::from(*s == r.state)),
            )
        })
        .collect();
    w.family(
        "bulkhead_protection",
        Kind::Gauge,
        "1 for the verdict of bulkhead check in force: protected, degraded, not_protected or unknown.",
        &states,
    );
    let areas: Vec<Sample> = r
        .by_area()
        .into_iter()
        .map(|(a, code)| {
            (
                vec![("check", a.name().to_string())],
                Value::Int(code as u64),
            )
        })
        .collect();
    w.family(
        "bulkhead_protection_check",
        Kind::Gauge,
        "The worst finding of each check of bulkhead check: 0 ok, 1 warning, 2 critical, 3 unknown.",
        &areas,
    );
    w.family(
        "bulkhead_protection_checked_timestamp_seconds",
        Kind::Gauge,
        "When bulkhead check last judged (Unix time); the exporter checks at most every 15 seconds.",
        &[(vec![], Value::Float(at))],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::verdict::{Area, Finding, Level};

    #[test]
    fn one_state_is_1_and_every_area_has_a_series() {
        let r = Report::new(
            "p".into(),
            "cgroupfs".into(),
            vec![Finding::new(Area::Placement, Level::Critical, "x")],
            vec![],
            vec![],
        );
        let mut w = Writer::new();
        write(&mut w, &r, 1.5);
        let t = w.finish();
        assert!(
            t.contains("bulkhead_protection{state=\"not_protected\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("bulkhead_protection{state=\"protected\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("bulkhead_protection_check{check=\"placement\"} 2\n"),
            "{t}"
        );
        assert!(
            t.contains("bulkhead_protection_check{check=\"drift\"} 0\n"),
            "{t}"
        );
        assert_eq!(
            t.matches("bulkhead_protection_check{").count(),
            Area::ALL.len()
        );
        assert!(t.contains("# TYPE bulkhead_protection gauge\n"), "{t}");
    }
}
