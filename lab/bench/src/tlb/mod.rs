//! `bench tlb`: the seed's experiment in miniature. An in-memory table of fixed-size rows is
//! read at random keys (whole rows) by 1..N threads, backed by
//!
//! - **4K**: anonymous memory with MADV_NOHUGEPAGE (base pages only),
//! - **THP**: anonymous memory, 2M-aligned, with MADV_HUGEPAGE,
//! - **2M**: MAP_HUGETLB from the 2M pool,
//! - **1G**: MAP_HUGETLB from the 1G pool, when the kernel can give one,
//!
//! The pools are grown for the run (read back; compaction when short) and given back at the
//! end, on Ctrl-C, and by the next run if this one was killed (see [`crate::env`]). Every round
//! maps each backing afresh, in rotated order, checks how much of it really is on huge pages
//! (/proc/self/smaps), and measures every row size and thread count; the report gives medians
//! and, per round, the ratio to the same round's 4K rate, so the spread shows.
//!
//! The end-to-end row starts Redis (Debian's, linked with jemalloc) plain and under `bulkhead
//! run --hugepages thp`, loads it, and measures GET throughput with the RESP load generator.

mod chart;
mod host;
mod progress;
mod redis_row;
mod report;
mod run;
mod table;
mod text;

pub use chart::chart;
pub use report::{BackingInfo, Cell, RedisReport, RedisVariant, Report, VM_NOTE};
pub use run::run;
pub use text::text;

use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

const TWO_M: u64 = 2 << 20;
const ONE_G: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Backing {
    #[serde(rename = "4K")]
    Base,
    #[serde(rename = "THP")]
    Thp,
    #[serde(rename = "2M")]
    Huge2M,
    #[serde(rename = "1G")]
    Huge1G,
}

impl Backing {
    pub const ALL: [Backing; 4] = [
        Backing::Base,
        Backing::Thp,
        Backing::Huge2M,
        Backing::Huge1G,
    ];

    pub fn parse(s: &str) -> Result<Backing, String> {
        match s.trim().to_ascii_uppercase().as_str() {
            "4K" => Ok(Backing::Base),
            "THP" => Ok(Backing::Thp),
            "2M" => Ok(Backing::Huge2M),
            "1G" => Ok(Backing::Huge1G),
            _ => Err(format!("'{s}' is not a backing: write 4K, THP, 2M or 1G")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Backing::Base => "4K",
            Backing::Thp => "THP",
            Backing::Huge2M => "2M",
            Backing::Huge1G => "1G",
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            Backing::Base => "4K pages (MADV_NOHUGEPAGE)",
            Backing::Thp => "transparent huge pages (MADV_HUGEPAGE)",
            Backing::Huge2M => "hugetlb 2M pages (MAP_HUGETLB)",
            Backing::Huge1G => "hugetlb 1G pages (MAP_HUGETLB)",
        }
    }
    fn page(self) -> u64 {
        match self {
            Backing::Huge1G => ONE_G,
            Backing::Base => 4096,
            _ => TWO_M,
        }
    }
}

/// The end-to-end row.
#[derive(Debug, Clone)]
pub struct RedisSpec {
    pub keys: u64,
    pub value_size: usize,
    pub connections: usize,
    pub warmup: Duration,
    pub duration: Duration,
}

#[derive(Debug, Clone)]
pub struct Spec {
    /// Row sizes, bytes.
    pub rows: Vec<usize>,
    /// Table size, bytes (a multiple of 2M).
    pub size: u64,
    pub threads: Vec<usize>,
    pub rounds: usize,
    /// Per measurement (one row size, one thread count, one backing).
    pub duration: Duration,
    pub backings: Vec<Backing>,
    pub redis: Option<RedisSpec>,
    /// The bulkhead binary, for `run --hugepages thp`.
    pub bulkhead: PathBuf,
    pub progress: bool,
}

/// Check what a user can get wrong before anything changes.
pub fn validate(spec: &Spec) -> Result<(), String> {
    if spec.rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    if spec.duration < Duration::from_millis(10) {
        return Err("--duration must be at least 10ms".into());
    }
    if spec.threads.is_empty() || spec.threads.contains(&0) {
        return Err("--threads takes counts of at least 1, e.g. 1,2".into());
    }
    if spec.threads.iter().any(|t| *t > 256) {
        return Err("--threads: at most 256".into());
    }
    if spec.rows.is_empty() {
        return Err("--rows takes row sizes in bytes, e.g. 128,8192,16384".into());
    }
    for r in &spec.rows {
        if *r < 8 || r % 8 != 0 {
            return Err(format!("--rows {r}: a row is a multiple of 8 bytes"));
        }
        if (*r as u64) * 16 > spec.size {
            return Err(format!(
                "--rows {r}: the table ({}) holds fewer than 16 such rows; raise --size",
                bulkhead::units::human_bytes(spec.size)
            ));
        }
    }
    if spec.size < 64 << 20 || !spec.size.is_multiple_of(TWO_M) {
        return Err(format!(
            "--size {}: the table is at least 64M and a multiple of 2M",
            bulkhead::units::human_bytes(spec.size)
        ));
    }
    if spec.backings.is_empty() || !spec.backings.contains(&Backing::Base) {
        return Err("--backings must include 4K: every ratio is against it".into());
    }
    let mem = bulkhead::actions::hugepages::meminfo();
    // The table once, plus the pools the bench reserves next to it.
    let mut need = spec.size;
    if spec.backings.contains(&Backing::Huge2M) {
        need += spec.size;
    }
    if spec.backings.contains(&Backing::Huge1G) {
        need += spec.size.div_ceil(ONE_G) * ONE_G;
    }
    let margin = 1 << 30;
    if need + margin > mem.mem_available {
        return Err(format!(
            "--size {} needs up to {} at once (the table, and the 2M/1G pools beside it) but {} is available; lower --size or leave out backings",
            bulkhead::units::human_bytes(spec.size),
            bulkhead::units::human_bytes(need),
            bulkhead::units::human_bytes(mem.mem_available)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backings() {
        assert_eq!(Backing::parse("thp").unwrap(), Backing::Thp);
        assert_eq!(Backing::parse("4k").unwrap(), Backing::Base);
        assert!(Backing::parse("3M").is_err());
    }
}
