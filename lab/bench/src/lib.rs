//! bulkhead's benchmarks. Kept out of the core library so that tokio, plotters and friends
//! never weigh on the slice and sandbox start paths.
//!
//! - [`loadgen`]: a RESP (Redis protocol) load generator, closed or open loop, HDR latencies.
//! - [`tlb`]: `bench tlb`, random row reads on 4K, THP, hugetlb 2M and 1G pages, and Redis
//!   with and without `run --hugepages`.

#![forbid(unsafe_code)]

pub mod loadgen;

use serde::{Deserialize, Serialize};

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencySummary {
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// What one load run measured (after warm-up).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LoadResult {
    /// "closed" (as fast as it can) or "open" (fixed rate; latency from the intended send time).
    pub mode: String,
    pub connections: usize,
    /// Open loop: the rate asked for, ops/s over all connections.
    pub target_rate: Option<u64>,
    /// Completed operations in the measured window.
    pub ops: u64,
    pub gets: u64,
    pub sets: u64,
    /// Error replies, timeouts and broken connections.
    pub errors: u64,
    /// Length of the measured window, seconds.
    pub duration_s: f64,
    /// ops / duration_s
    pub op_rate: f64,
    pub latency: LatencySummary,
    /// Each whole second of the measured window.
    #[serde(default)]
    pub seconds: Vec<SecondFigures>,
}

/// One second of a load run.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct SecondFigures {
    /// Requests completed in this second.
    pub ops: u64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

pub mod activation;
pub mod child;
pub mod env;
pub mod exporter;
pub mod fleet;
pub mod hbars;
pub mod hog;
pub mod isolation;
pub mod metrics;
pub mod metrics_attack;
pub mod pgdump;
pub mod postgres;
pub mod redis;
pub mod report;
pub mod sockets;
pub mod spawn;
pub mod stats;
pub mod stop;
pub mod tlb;
