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

use crate::env::Env;
use crate::loadgen::{self, LoadSpec};
use crate::redis::{self, Redis};
use crate::stats;
use bulkhead::sys::anonmap::{Advice, AnonMap};
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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
    let mem = bulkhead::host::hugepages::meminfo(&bulkhead::hugepages::Paths::default());
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

/// One mapped table: `len` bytes at word `start` of its mapping (THP aligns it inside a
/// larger one).
struct Table {
    map: AnonMap,
    start: usize,
    len: usize,
}

impl Table {
    fn new(backing: Backing, size: u64) -> Result<Table, String> {
        let len = match backing {
            Backing::Huge1G => size.div_ceil(ONE_G) * ONE_G,
            _ => size,
        } as usize;
        let (map, start) = match backing {
            Backing::Base => {
                let map = AnonMap::new(len).map_err(|e| format!("mmap {len} bytes: {e}"))?;
                let _ = map.advise(0, len, Advice::NoHugePage);
                (map, 0)
            }
            Backing::Thp => {
                let map_len = len + TWO_M as usize;
                let map =
                    AnonMap::new(map_len).map_err(|e| format!("mmap {map_len} bytes: {e}"))?;
                let start = map.addr().div_ceil(TWO_M as usize) * TWO_M as usize - map.addr();
                map.advise(start, len, Advice::HugePage)
                    .map_err(|e| format!("madvise(MADV_HUGEPAGE): {e}"))?;
                (map, start)
            }
            Backing::Huge2M | Backing::Huge1G => {
                let map = AnonMap::hugetlb(len, backing.page()).map_err(|e| {
                    format!(
                        "mmap(MAP_HUGETLB) of {}: {e} (the pool has too few free pages)",
                        bulkhead::units::human_bytes(len as u64)
                    )
                })?;
                (map, 0)
            }
        };
        let mut t = Table {
            map,
            start: start / 8,
            len,
        };
        // Touch every cache line so every page is faulted in before anything is timed.
        for (i, w) in t.words_mut().iter_mut().enumerate().step_by(8) {
            *w = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        Ok(t)
    }

    fn words(&self) -> &[u64] {
        &self.map.words()[self.start..self.start + self.len / 8]
    }

    fn words_mut(&mut self) -> &mut [u64] {
        let (start, end) = (self.start, self.start + self.len / 8);
        &mut self.map.words_mut()[start..end]
    }

    /// Share of the table on huge pages (THP or hugetlb), from /proc/self/smaps.
    fn huge_coverage(&self) -> f64 {
        let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let vmas = bulkhead::hugepages::usage::parse_smaps(&text);
        let lo = self.words().as_ptr() as u64;
        let hi = lo + self.len as u64;
        let huge: u64 = vmas
            .iter()
            .filter(|v| v.start < hi && v.end > lo)
            .map(|v| v.anon_huge + v.hugetlb)
            .sum();
        huge as f64 / self.len as f64
    }
}

/// Read random whole rows until told to stop. Returns rows read and the time taken.
fn reader(t: &Table, row: usize, mut x: u64, stop: &AtomicBool) -> (u64, Duration) {
    let words = row / 8;
    let rows = (t.len / row) as u64;
    let batch = (256 * 1024 / row).max(1);
    let table = t.words();
    let start = Instant::now();
    let mut n = 0u64;
    let mut acc = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..batch {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = ((x as u128 * rows as u128) >> 64) as usize;
            // r < rows, so the row lies inside the table.
            for w in &table[r * words..(r + 1) * words] {
                acc = acc.wrapping_add(*w);
            }
        }
        n += batch as u64;
    }
    std::hint::black_box(acc);
    (n, start.elapsed())
}

/// Rows per second over all threads.
fn measure(t: &Table, row: usize, threads: usize, d: Duration, seed: u64) -> f64 {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let stop = &stop;
                s.spawn(move || {
                    reader(
                        t,
                        row,
                        seed ^ ((i as u64 + 1) * 0x2545_F491_4F6C_DD1D),
                        stop,
                    )
                })
            })
            .collect();
        std::thread::sleep(d);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| h.join().unwrap_or((0, Duration::from_secs(1))))
            .map(|(n, el)| n as f64 / el.as_secs_f64())
            .sum()
    })
}

fn machine() -> String {
    let m = bulkhead::host::hugepages::meminfo(&bulkhead::hugepages::Paths::default());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpus} CPUs, {:.0} GiB, Linux {}",
        m.mem_total as f64 / (1u64 << 30) as f64,
        kernel.trim()
    )
}

fn thp_mode() -> String {
    bulkhead::host::hugepages::thp(&bulkhead::hugepages::Paths::default())
        .enabled
        .map(|c| c.active)
        .unwrap_or_else(|| "unavailable".into())
}

/// Grow a pool so `pages` are free for the bench; `Err` says why not.
fn reserve(env: &mut Env, size: u64, pages: u64) -> Result<u64, String> {
    let paths = bulkhead::hugepages::Paths::default();
    let pool = bulkhead::host::hugepages::pools(&paths)
        .into_iter()
        .find(|p| p.size == size)
        .ok_or_else(|| {
            format!(
                "this kernel has no {} pool",
                bulkhead::units::human_bytes(size)
            )
        })?;
    let avail = pool.available();
    if avail >= pages {
        return Ok(0);
    }
    let want = pool.total + (pages - avail);
    let r = env.set_pool(size, want)?;
    if r.got < want {
        let got = r.got.saturating_sub(pool.total);
        let _ = env.set_pool(size, pool.total);
        return Err(format!(
            "only {got} of {} {} pages could be had{} ({})",
            pages - avail,
            bulkhead::units::human_bytes(size),
            if r.compacted {
                " after compacting memory"
            } else {
                ""
            },
            bulkhead::hugepages::ops::boot_hint(size, None, pool.total + pages - avail)
        ));
    }
    Ok(want - pool.total)
}

struct Progress {
    bar: indicatif::ProgressBar,
}

impl Progress {
    fn new(on: bool, total: u64) -> Progress {
        let bar = if on {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {elapsed} {msg}")
                    .unwrap(),
            );
            b
        } else {
            indicatif::ProgressBar::hidden()
        };
        Progress { bar }
    }
    fn say(&self, m: &str) {
        self.bar.set_message(m.to_string());
    }
}

pub fn run(spec: &Spec) -> Result<Report, String> {
    validate(spec)?;
    crate::env::clean_stale();
    let mut env = Env::create_bare()?;
    let mut backings: Vec<BackingInfo> = Backing::ALL
        .iter()
        .filter(|b| spec.backings.contains(b))
        .map(|b| BackingInfo {
            name: b.name().into(),
            description: b.describe().into(),
            skipped: None,
            pool_pages_added: None,
            huge_coverage: vec![],
        })
        .collect();
    let info = |bs: &[BackingInfo], b: Backing| -> usize {
        bs.iter().position(|x| x.name == b.name()).unwrap_or(0)
    };
    let mode = thp_mode();
    if spec.backings.contains(&Backing::Thp) && (mode == "never" || mode == "unavailable") {
        let i = info(&backings, Backing::Thp);
        backings[i].skipped = Some(format!("THP is '{mode}' on this machine"));
    }
    let say = |m: &str| {
        if spec.progress {
            eprintln!("bench tlb: {m}");
        }
    };
    // Reserve the pools first, the 1G one before anything fragments memory further.
    for b in [Backing::Huge1G, Backing::Huge2M] {
        if !spec.backings.contains(&b) {
            continue;
        }
        let pages = spec.size.div_ceil(b.page());
        say(&format!(
            "reserving {pages} {} page(s) for the run",
            b.name()
        ));
        let i = info(&backings, b);
        match reserve(&mut env, b.page(), pages) {
            Ok(added) => backings[i].pool_pages_added = Some(added),
            Err(e) => backings[i].skipped = Some(e),
        }
    }
    let active: Vec<Backing> = Backing::ALL
        .iter()
        .copied()
        .filter(|b| {
            spec.backings.contains(b)
                && backings
                    .iter()
                    .any(|x| x.name == b.name() && x.skipped.is_none())
        })
        .collect();
    let combos: Vec<(usize, usize)> = spec
        .rows
        .iter()
        .flat_map(|r| spec.threads.iter().map(move |t| (*r, *t)))
        .collect();
    // rates[backing][combo][round]
    let mut rates: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); combos.len()]; active.len()];
    let redis_variants = spec.redis.as_ref().map_or(0, |_| 2);
    let total = spec.rounds as u64 * (active.len() * combos.len() + redis_variants) as u64;
    let p = Progress::new(spec.progress, total);
    let mut redis_state = spec.redis.as_ref().map(|r| RedisRun::new(spec, r));
    let mut rounds_done = 0;
    let mut interrupted = false;
    'rounds: for round in 0..spec.rounds {
        for k in 0..active.len() {
            let bi = (round + k) % active.len();
            let b = active[bi];
            if crate::stop::requested() {
                interrupted = true;
                break 'rounds;
            }
            p.say(&format!(
                "round {}: mapping {} of {}",
                round + 1,
                bulkhead::units::human_bytes(spec.size),
                b.describe()
            ));
            let t = Table::new(b, spec.size).map_err(|e| format!("{}: {e}", b.describe()))?;
            let i = info(&backings, b);
            backings[i].huge_coverage.push(t.huge_coverage());
            for (ci, (row, threads)) in combos.iter().enumerate() {
                if crate::stop::requested() {
                    interrupted = true;
                    break 'rounds;
                }
                p.say(&format!(
                    "round {}: {} rows of {row} B, {threads} thread(s)",
                    round + 1,
                    b.name()
                ));
                let seed = 0x9E37_79B9_7F4A_7C15 ^ ((round as u64) << 32) ^ ci as u64;
                rates[bi][ci].push(measure(&t, *row, *threads, spec.duration, seed));
                p.bar.inc(1);
            }
        }
        if let Some(r) = redis_state.as_mut() {
            if crate::stop::requested() {
                interrupted = true;
                break;
            }
            r.round(round, &p)?;
        }
        rounds_done += 1;
    }
    p.bar.finish_and_clear();
    let base = active.iter().position(|b| *b == Backing::Base).unwrap_or(0);
    let mut cells = Vec::new();
    for (ci, (row, threads)) in combos.iter().enumerate() {
        for (bi, b) in active.iter().enumerate() {
            let r = &rates[bi][ci];
            let n = r.len().min(rates[base][ci].len());
            let ratios: Vec<f64> = (0..n).map(|i| r[i] / rates[base][ci][i]).collect();
            cells.push(Cell {
                row_bytes: *row,
                threads: *threads,
                backing: b.name().into(),
                rates: r.clone(),
                median_rate: stats::interpolated(r, 0.5),
                ratio_median: stats::interpolated(&ratios, 0.5),
                ratio_min: stats::interpolated(&ratios, 0.0),
                ratio_max: stats::interpolated(&ratios, 1.0),
                ratio_p25: stats::interpolated(&ratios, 0.25),
                ratio_p75: stats::interpolated(&ratios, 0.75),
                ratios,
            });
        }
    }
    let verdicts = verdicts(&cells, spec);
    let (redis, redis_skipped) = match redis_state {
        Some(r) => r.finish(),
        None => (None, Some("left out (--no-redis)".into())),
    };
    drop(env);
    Ok(Report {
        machine: machine(),
        note: VM_NOTE.into(),
        table_bytes: spec.size,
        rows: spec.rows.clone(),
        threads: spec.threads.clone(),
        rounds: spec.rounds,
        rounds_done,
        duration_s: spec.duration.as_secs_f64(),
        thp_mode: mode,
        backings,
        cells,
        redis,
        redis_skipped,
        verdicts,
        interrupted,
    })
}

fn verdicts(cells: &[Cell], spec: &Spec) -> Vec<String> {
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

/// The Redis rows: plain and under `bulkhead run --hugepages thp`, alternating.
struct RedisRun {
    spec: RedisSpec,
    bulkhead: PathBuf,
    dir: PathBuf,
    variants: Vec<RedisVariant>,
    skipped: Option<String>,
}

fn rollup_coverage(pid: u32) -> f64 {
    let t = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let r = bulkhead::hugepages::usage::parse_rollup(&t);
    if r.anonymous == 0 {
        0.0
    } else {
        r.anon_huge as f64 / r.anonymous as f64
    }
}

impl RedisRun {
    fn new(spec: &Spec, r: &RedisSpec) -> RedisRun {
        let mk = |name: &str, command: String| RedisVariant {
            name: name.into(),
            command,
            op_rates: vec![],
            median_op_rate: f64::NAN,
            ratios: vec![],
            ratio_median: f64::NAN,
            ratio_min: f64::NAN,
            ratio_max: f64::NAN,
            thp_coverage: vec![],
            errors: 0,
            skipped: None,
        };
        let skipped = redis::find_server()
            .is_none()
            .then(|| "redis-server is not installed (apt-get install redis-server)".to_string());
        RedisRun {
            spec: r.clone(),
            bulkhead: spec.bulkhead.clone(),
            dir: std::env::temp_dir().join(format!("bulkhead-bench-tlb-{}", std::process::id())),
            variants: vec![
                mk("plain", "redis-server".into()),
                mk(
                    "run --hugepages thp",
                    "bulkhead run --hugepages thp --no-verify -- redis-server".into(),
                ),
            ],
            skipped,
        }
    }

    fn round(&mut self, round: usize, p: &Progress) -> Result<(), String> {
        if self.skipped.is_some() {
            p.bar.inc(2);
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        for k in 0..2 {
            let vi = (round + k) % 2;
            if self.variants[vi].skipped.is_some() {
                p.bar.inc(1);
                continue;
            }
            p.say(&format!(
                "round {}: Redis {}",
                round + 1,
                self.variants[vi].name
            ));
            let port = redis::free_port().map_err(|e| format!("no free port: {e}"))?;
            let o = redis::Options {
                port,
                dir: &self.dir,
                aof_always: false,
                procs_files: &[],
            };
            let wrapper: Vec<OsString> = if vi == 1 {
                [
                    self.bulkhead.as_os_str(),
                    "-q".as_ref(),
                    "run".as_ref(),
                    "--hugepages".as_ref(),
                    "thp".as_ref(),
                    "--no-verify".as_ref(),
                    "--".as_ref(),
                ]
                .iter()
                .map(|s| s.to_os_string())
                .collect()
            } else {
                vec![]
            };
            let mut server = match Redis::start_wrapped(&o, &wrapper) {
                Ok(s) => s,
                Err(e) if vi == 1 => {
                    // `run --hugepages thp` refused (THP off, say): say so, keep the rest.
                    self.variants[vi].skipped = Some(e);
                    p.bar.inc(1);
                    continue;
                }
                Err(e) => return Err(e),
            };
            loadgen::preload(server.addr, self.spec.keys, self.spec.value_size)?;
            let cov = rollup_coverage(server.pid);
            let r = loadgen::run(&LoadSpec {
                addr: server.addr,
                connections: self.spec.connections,
                warmup: self.spec.warmup,
                duration: self.spec.duration,
                rate: None,
                get_ratio: 1.0,
                keys: self.spec.keys,
                value_size: self.spec.value_size,
                timeout: Duration::from_secs(2),
            })?;
            if let Some(st) = server.exited() {
                return Err(format!("redis-server exited during the measurement: {st}"));
            }
            server.stop();
            let v = &mut self.variants[vi];
            v.op_rates.push(r.op_rate);
            v.thp_coverage.push(cov);
            v.errors += r.errors;
            p.bar.inc(1);
        }
        Ok(())
    }

    fn finish(mut self) -> (Option<RedisReport>, Option<String>) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(s) = self.skipped {
            return (None, Some(s));
        }
        let base = self.variants[0].op_rates.clone();
        for v in &mut self.variants {
            let n = v.op_rates.len().min(base.len());
            v.ratios = (0..n).map(|i| v.op_rates[i] / base[i]).collect();
            v.median_op_rate = stats::interpolated(&v.op_rates, 0.5);
            v.ratio_median = stats::interpolated(&v.ratios, 0.5);
            v.ratio_min = stats::interpolated(&v.ratios, 0.0);
            v.ratio_max = stats::interpolated(&v.ratios, 1.0);
        }
        let server = redis::find_server()
            .and_then(|s| std::process::Command::new(s).arg("--version").output().ok())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        (
            Some(RedisReport {
                server,
                keys: self.spec.keys,
                value_size: self.spec.value_size,
                connections: self.spec.connections,
                duration_s: self.spec.duration.as_secs_f64(),
                variants: self.variants,
            }),
            None,
        )
    }
}

fn thousands(n: f64) -> String {
    if !n.is_finite() {
        return "-".into();
    }
    let s = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in s.chars().rev().enumerate() {
        if i > 0 && i % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out.chars().rev().collect()
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

/// A PNG: per row size and thread count, each backing's median rate as a ratio to 4K, with
/// the min-max range over rounds; Redis below.
pub fn chart(r: &Report, path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    crate::report::register_font()?;
    let mut bars: Vec<(String, String, f64, f64, f64)> = r
        .cells
        .iter()
        .filter(|c| c.backing != "4K" && c.ratio_median.is_finite())
        .map(|c| {
            (
                format!("{} B, {} thr: {}", c.row_bytes, c.threads, c.backing),
                c.backing.clone(),
                c.ratio_median,
                c.ratio_min,
                c.ratio_max,
            )
        })
        .collect();
    if let Some(red) = &r.redis {
        for v in red.variants.iter().skip(1) {
            if v.ratio_median.is_finite() {
                bars.push((
                    format!("Redis GET: {}", v.name),
                    "Redis".into(),
                    v.ratio_median,
                    v.ratio_min,
                    v.ratio_max,
                ));
            }
        }
    }
    // The first bar at the top.
    bars.reverse();
    let n = bars.len().max(1);
    let root = BitMapBackend::new(path, (1100, 170 + 30 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(
            &format!(
                "bulkhead bench tlb: throughput vs 4K pages, median of {} round(s), whisker min-max (a VM: backing changes run to run)",
                r.rounds_done
            ),
            ("sans-serif", 17),
        )
        .map_err(|e| e.to_string())?;
    let max = bars
        .iter()
        .map(|b| b.4)
        .filter(|v| v.is_finite())
        .fold(1.5f64, f64::max)
        * 1.15;
    let mut c = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(230)
        .build_cartesian_2d(0f64..max, (0..n).into_segmented())
        .map_err(|e| e.to_string())?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    c.configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc("throughput / 4K throughput, same round")
        .draw()
        .map_err(|e| e.to_string())?;
    let color = |g: &str| match g {
        "THP" => BLUE,
        "2M" => GREEN,
        "1G" => MAGENTA,
        _ => RED,
    };
    c.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let mut bar = Rectangle::new(
            [
                (0.0, SegmentValue::Exact(i)),
                (b.2, SegmentValue::Exact(i + 1)),
            ],
            color(&b.1).mix(0.5).filled(),
        );
        bar.set_margin(4, 4, 0, 0);
        bar
    }))
    .map_err(|e| e.to_string())?;
    c.draw_series(
        bars.iter()
            .enumerate()
            .filter(|(_, b)| b.3.is_finite())
            .map(|(i, b)| {
                PathElement::new(
                    vec![
                        (b.3, SegmentValue::CenterOf(i)),
                        (b.4, SegmentValue::CenterOf(i)),
                    ],
                    BLACK.stroke_width(2),
                )
            }),
    )
    .map_err(|e| e.to_string())?;
    c.draw_series(bars.iter().enumerate().map(|(i, b)| {
        Text::new(
            format!("x{:.2}", b.2),
            (b.4.max(b.2) + max * 0.01, SegmentValue::CenterOf(i)),
            ("sans-serif", 13),
        )
    }))
    .map_err(|e| e.to_string())?;
    c.draw_series(std::iter::once(PathElement::new(
        vec![(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Exact(n))],
        BLACK.stroke_width(1),
    )))
    .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
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

    #[test]
    fn a_4k_table_is_read_and_has_no_huge_pages() {
        let t = Table::new(Backing::Base, 8 << 20).unwrap();
        assert_eq!(t.huge_coverage(), 0.0);
        let rate = measure(&t, 128, 1, Duration::from_millis(20), 7);
        assert!(rate > 1000.0, "{rate} rows/s");
    }
}
