//! The text format's writer: one family at a time, its HELP and TYPE lines once, then its
//! samples; a family without samples is not written at all.

use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One histogram series: its labels, (upper bound, cumulative count) per bucket ending with
/// +Inf, and the sum of the observations.
pub type HistogramSample = (Vec<(&'static str, String)>, Vec<(f64, u64)>, f64);

/// A sample's value: integers as they are, seconds as decimals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

/// One sample: its labels (name, value) and its value.
pub type Sample = (Vec<(&'static str, String)>, Value);

/// The exposition being written.
#[derive(Debug, Default)]
pub struct Writer {
    out: String,
}

/// A label value with `\`, `"` and newlines escaped, as the format asks.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// HELP text with `\` and newlines escaped (quotes stay as they are there).
pub fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn value(v: Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Float(f) if f.is_nan() => "NaN".into(),
        Value::Float(f) if f.is_infinite() => if f > 0.0 { "+Inf" } else { "-Inf" }.into(),
        Value::Float(f) => format!("{f}"),
    }
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    /// Write a family: nothing when `samples` is empty.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str, samples: &[Sample]) {
        if samples.is_empty() {
            return;
        }
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        self.head(name, kind, help);
        for (labels, v) in samples {
            self.sample(name, labels, None, *v);
        }
    }

    /// Write a histogram family (`_bucket` per bound with `le`, `_sum`, `_count`): nothing
    /// when `series` is empty.
    pub fn histogram(&mut self, name: &str, help: &str, series: &[HistogramSample]) {
        if series.is_empty() {
            return;
        }
        self.head(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        for (labels, buckets, sum) in series {
            for (le, n) in buckets {
                self.sample(
                    &bucket,
                    labels,
                    Some(value(Value::Float(*le))),
                    Value::Int(*n),
                );
            }
            let count = buckets.last().map_or(0, |b| b.1);
            self.sample(&format!("{name}_sum"), labels, None, Value::Float(*sum));
            self.sample(&format!("{name}_count"), labels, None, Value::Int(count));
        }
    }

    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, String)], le: Option<String>, v: Value) {
        self.out.push_str(name);
        let le = le.map(|l| ("le", l));
        let all = labels.iter().map(|(k, v)| (*k, v.as_str()));
        let all: Vec<(&str, &str)> = all
            .chain(le.as_ref().map(|(k, v)| (*k, v.as_str())))
            .collect();
        if !all.is_empty() {
            self.out.push('{');
            for (i, (k, lv)) in all.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(lv));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", value(v));
    }

    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_label("db-helper"), "db-helper");
        assert_eq!(escape_help("a\\b\n\"q\""), "a\\\\b\\n\"q\"");
    }

    #[test]
    fn help_and_type_once_per_family_and_empty_families_left_out() {
        let mut w = Writer::new();
        let s = |slice: &str, v| (vec![("slice", slice.to_string())], Value::Int(v));
        w.family("x_total", Kind::Counter, "X.", &[s("a", 1), s("b\"", 2)]);
        w.family("y", Kind::Gauge, "Y.", &[]);
        w.family("z", Kind::Gauge, "Z.", &[(vec![], Value::Float(0.5))]);
        let t = w.finish();
        assert_eq!(
            t,
            "# HELP x_total X.\n# TYPE x_total counter\nx_total{slice=\"a\"} 1\n\
             x_total{slice=\"b\\\"\"} 2\n# HELP z Z.\n# TYPE z gauge\nz 0.5\n"
        );
    }

    #[test]
    fn histograms_have_buckets_sum_and_count() {
        let mut w = Writer::new();
        let l = vec![("socket", "web".to_string())];
        w.histogram(
            "h_seconds",
            "H.",
            &[(l, vec![(0.5, 1), (f64::INFINITY, 3)], 2.25)],
        );
        w.histogram("empty_seconds", "E.", &[]);
        assert_eq!(
            w.finish(),
            "# HELP h_seconds H.\n# TYPE h_seconds histogram\n\
             h_seconds_bucket{socket=\"web\",le=\"0.5\"} 1\n\
             h_seconds_bucket{socket=\"web\",le=\"+Inf\"} 3\n\
             h_seconds_sum{socket=\"web\"} 2.25\nh_seconds_count{socket=\"web\"} 3\n"
        );
    }

    #[test]
    fn floats_never_use_exponents_and_specials_are_spelled() {
        assert_eq!(value(Value::Float(0.000001)), "0.000001");
        assert_eq!(value(Value::Float(1234567.25)), "1234567.25");
        assert_eq!(value(Value::Float(f64::INFINITY)), "+Inf");
        assert_eq!(value(Value::Float(f64::NAN)), "NaN");
    }
}
