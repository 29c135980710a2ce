//! Order statistics, the one home of the bench's medians and percentiles. Three rules are in
//! use, and each report keeps the one its figures were always computed with:
//!
//! - [`at_rank`] / [`rank`]: the sample at rank round((n-1)·q) of a sorted slice (spawn,
//!   activation, the metrics and fleet benches, the wrapper overhead);
//! - [`quantile`] and [`median`]: nearest rank ceil(q·n), and the middle (the mean of the
//!   middle two) of the finite values (the isolation figures);
//! - [`interpolated`]: linear between the closest ranks, of the finite values (the TLB bench).

/// The sample at rank round((n-1)·q) of `sorted` (ascending); `None` when it is empty.
pub fn at_rank(sorted: &[f64], q: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * q).round() as usize])
}

/// [`at_rank`], NaN when `sorted` is empty.
pub fn rank(sorted: &[f64], q: f64) -> f64 {
    at_rank(sorted, q).unwrap_or(f64::NAN)
}

/// [`at_rank`] of `v` once sorted (NaN sorts last); `None` when it is empty.
pub fn at_rank_of(mut v: Vec<f64>, q: f64) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    at_rank(&v, q)
}

/// The finite values of `v`, ascending.
fn finite_sorted(v: &[f64]) -> Vec<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    s
}

/// The `q` quantile (0..1) of the finite values of `v` by nearest rank; NaN when none.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let s = finite_sorted(v);
    if s.is_empty() {
        return f64::NAN;
    }
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

/// The median of the finite values of `v` (the mean of the middle two for an even count);
/// NaN when none.
pub fn median(v: &[f64]) -> f64 {
    let s = finite_sorted(v);
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The `q` quantile (0..1) of the finite values of `v`, linear between the closest ranks;
/// NaN when none.
pub fn interpolated(v: &[f64], q: f64) -> f64 {
    let s = finite_sorted(v);
    if s.is_empty() {
        return f64::NAN;
    }
    let pos = (s.len() - 1) as f64 * q;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.01), 1.0);
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn rounded_ranks() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(at_rank(&v, 0.5), Some(3.0));
        assert_eq!(at_rank(&v, 1.0), Some(4.0));
        assert_eq!(at_rank(&[], 0.5), None);
        assert!(rank(&[], 0.5).is_nan());
        assert_eq!(at_rank_of(vec![4.0, 1.0, 3.0], 0.5), Some(3.0));
    }

    #[test]
    fn interpolated_quantiles() {
        let v = [1.0, 3.0, 2.0, 4.0];
        assert_eq!(interpolated(&v, 0.5), 2.5);
        assert_eq!(interpolated(&v, 0.0), 1.0);
        assert_eq!(interpolated(&v, 1.0), 4.0);
        assert_eq!(interpolated(&[f64::NAN, 2.0], 0.5), 2.0);
        assert!(interpolated(&[], 0.5).is_nan());
    }
}
