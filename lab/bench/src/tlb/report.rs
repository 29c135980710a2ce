//! What `bench tlb` reports (its JSON), and the verdicts drawn from it.

use super::Spec;
use serde::Serialize;

/// What one backing was, over the run.
#[derive(Debug, Clone, Serialize)]
pub struct BackingInfo {
    pub name: String,
    pub description: String,
    /// Why it was not measured.
    pub skipped: Option<String>,
    /// Pages added to its pool for the run (given back at the end).
    pub pool_pages_added: Option<u64>,
    /// Share of the table on huge pages, per round (from /proc/self/smaps).
    pub huge_coverage: Vec<f64>,
}

/// One row size x thread count x backing.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub row_bytes: usize,
    pub threads: usize,
    pub backing: String,
    /// Rows read per second, per round.
    pub rates: Vec<f64>,
    pub median_rate: f64,
    /// rate / the same round's 4K rate.
    pub ratios: Vec<f64>,
    pub ratio_median: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    pub ratio_p25: f64,
    pub ratio_p75: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RedisVariant {
    pub name: String,
    pub command: String,
    pub op_rates: Vec<f64>,
    pub median_op_rate: f64,
    pub ratios: Vec<f64>,
    pub ratio_median: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    /// AnonHugePages / Anonymous of the server after loading, per round.
    pub thp_coverage: Vec<f64>,
    pub errors: u64,
    pub skipped: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RedisReport {
    pub server: String,
    pub keys: u64,
    pub value_size: usize,
    pub connections: usize,
    pub duration_s: f64,
    pub variants: Vec<RedisVariant>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: String,
    pub note: String,
    pub table_bytes: u64,
    pub rows: Vec<usize>,
    pub threads: Vec<usize>,
    pub rounds: usize,
    pub rounds_done: usize,
    pub duration_s: f64,
    pub thp_mode: String,
    pub backings: Vec<BackingInfo>,
    pub cells: Vec<Cell>,
    pub redis: Option<RedisReport>,
    pub redis_skipped: Option<String>,
    /// For 128 B rows (or the smallest): does 2M beat 4K, and how steadily.
    pub verdicts: Vec<String>,
    pub interrupted: bool,
}

pub const VM_NOTE: &str = "This is a VM: the host backs guest memory with pages of its own choosing, and that backing changes from run to run (a guest huge page may sit on host base pages), so absolute rates move between runs; compare ratios within one run, and read the [min-max] ranges as the spread over rounds.";

pub(super) fn verdicts(cells: &[Cell], spec: &Spec) -> Vec<String> {
    let row = if spec.rows.contains(&128) {
        128
    } else {
        *spec.rows.iter().min().unwrap_or(&128)
    };
    let mut out = Vec::new();
    for t in &spec.threads {
        for b in ["2M", "THP", "1G"] {
            let Some(c) = cells
                .iter()
                .find(|c| c.row_bytes == row && c.threads == *t && c.backing == b)
            else {
                continue;
            };
            if c.ratios.is_empty() {
                continue;
            }
            let wins = c.ratios.iter().filter(|r| **r > 1.0).count();
            let word = if wins == c.ratios.len() {
                "beats 4K in every round"
            } else if wins == 0 {
                "does not beat 4K in any round"
            } else {
                "beats 4K in some rounds only"
            };
            out.push(format!(
                "{row} B rows, {t} thread(s): {b} {word} ({wins} of {}): median x{:.2} [{:.2}-{:.2}]",
                c.ratios.len(),
                c.ratio_median,
                c.ratio_min,
                c.ratio_max
            ));
        }
    }
    out
}
