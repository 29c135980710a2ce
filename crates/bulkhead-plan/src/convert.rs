//! systemd's conversions between its cgroup-v2 weights and the cgroup-v1 values, in one place:
//! the cgroupfs backend writes them, the systemd backend and `export` give them to old
//! systemd versions, and `import` reads the legacy directives back.

/// CPUWeight -> cpu.shares / CPUShares=: weight * 1024 / 100, clamped to 2..262144, as
/// systemd's `cgroup_cpu_weight_to_shares()`.
pub fn weight_to_shares(w: u64) -> u64 {
    (w.saturating_mul(1024) / 100).clamp(2, 262_144)
}

/// CPUShares= -> CPUWeight: shares * 100 / 1024, clamped to 1..10000.
pub fn shares_to_weight(s: u64) -> u64 {
    (s.saturating_mul(100) / 1024).clamp(1, 10_000)
}

/// IOWeight -> BlockIOWeight= (10..1000), as systemd maps it for old versions.
pub fn io_weight_to_blkio(w: u64) -> u64 {
    (w.saturating_mul(500) / 100).clamp(10, 1000)
}

/// BlockIOWeight= -> IOWeight: blkio weight * 100 / 500, clamped to 1..10000.
pub fn blkio_to_io_weight(w: u64) -> u64 {
    (w.saturating_mul(100) / 500).clamp(1, 10_000)
}

/// IOWeight (1..10000, default 100) -> BFQ's weight (1..1000, default 100): linear below and
/// above the default, as systemd's `cgroup_weight_bfq_to_...` mapping.
pub fn io_weight_to_bfq(w: u64) -> u64 {
    if w <= 100 {
        w.max(1)
    } else {
        100 + (w.min(10_000) - 100) * 900 / 9900
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_conversions() {
        assert_eq!(weight_to_shares(100), 1024);
        assert_eq!(weight_to_shares(10), 102);
        assert_eq!(weight_to_shares(1000), 10240);
        assert_eq!(weight_to_shares(1), 10);
        assert_eq!(shares_to_weight(1024), 100);
        assert_eq!(io_weight_to_bfq(100), 100);
        assert_eq!(io_weight_to_bfq(10), 10);
        assert_eq!(io_weight_to_bfq(1000), 181);
        assert_eq!(io_weight_to_bfq(10000), 1000);
        assert_eq!(io_weight_to_bfq(1), 1);
        for w in 2..=200u64 {
            assert_eq!(
                blkio_to_io_weight(io_weight_to_blkio(w)),
                w,
                "io weight {w}"
            );
        }
    }
}
