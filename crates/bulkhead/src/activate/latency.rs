//! Cold-start latencies of a socket's target as a cumulative histogram with fixed buckets,
//! kept by `serve` in the socket's status file and exposed as a Prometheus histogram.

/// Upper bounds of the buckets, seconds: a plain command starts in a millisecond or two, a
/// sandbox in tens, a database server in seconds.
pub const BOUNDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Starts per bucket (not cumulative: `counts[i]` took at most `BOUNDS[i]` and more than the
/// bound before), those above the last bound, their count and their sum.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StartLatency {
    pub counts: Vec<u64>,
    pub above: u64,
    pub count: u64,
    pub sum_seconds: f64,
}

impl StartLatency {
    /// Count one start that took `seconds`.
    pub fn record(&mut self, seconds: f64) {
        self.counts.resize(BOUNDS.len(), 0);
        match BOUNDS.iter().position(|b| seconds <= *b) {
            Some(i) => self.counts[i] += 1,
            None => self.above += 1,
        }
        self.count += 1;
        self.sum_seconds += seconds;
    }

    /// (upper bound, starts that took at most that long), ending with (+Inf, count).
    /// A file with another number of buckets than [`BOUNDS`] gives only the +Inf bucket.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut out = Vec::with_capacity(BOUNDS.len() + 1);
        if self.counts.len() == BOUNDS.len() {
            let mut acc = 0u64;
            for (b, n) in BOUNDS.iter().zip(&self.counts) {
                acc = acc.saturating_add(*n);
                out.push((*b, acc));
            }
        }
        out.push((f64::INFINITY, self.count));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_with_the_count() {
        let mut h = StartLatency::default();
        for s in [0.0005, 0.003, 0.003, 0.2, 99.0] {
            h.record(s);
        }
        let c = h.cumulative();
        assert_eq!(c.len(), BOUNDS.len() + 1);
        assert_eq!(c[0], (0.001, 1));
        assert_eq!(c[2], (0.005, 3));
        assert_eq!(c[7], (0.25, 4));
        assert_eq!(c[13], (30.0, 4));
        assert_eq!(c[14], (f64::INFINITY, 5));
        assert!((h.sum_seconds - 99.2065).abs() < 1e-9);
        // A file written with other buckets still gives a valid (+Inf only) histogram.
        let odd = StartLatency {
            counts: vec![1],
            count: 1,
            ..Default::default()
        };
        assert_eq!(odd.cumulative(), vec![(f64::INFINITY, 1)]);
    }
}
