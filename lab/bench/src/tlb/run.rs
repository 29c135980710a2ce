//! A run: the pools reserved, every backing mapped afresh each round in rotated order and
//! measured at every row size and thread count, the Redis rows, and the figures.

use super::host::{reserve, thp_mode};
use super::progress::Progress;
use super::redis_row::RedisRun;
use super::report::{verdicts, BackingInfo, Cell, Report, VM_NOTE};
use super::table::{measure, Table};
use super::{validate, Backing, Spec};
use crate::env::Env;
use crate::report::machine;
use crate::stats;

/// The backings asked for, what became of each, and the ones measured.
struct Backings {
    infos: Vec<BackingInfo>,
    active: Vec<Backing>,
}

impl Backings {
    /// Every backing asked for; THP skipped where the machine has it off; the 1G and 2M
    /// pools grown (the 1G one first, before anything fragments memory further).
    fn prepare(spec: &Spec, mode: &str, env: &mut Env) -> Backings {
        let infos = Backing::ALL
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
        let mut bs = Backings {
            infos,
            active: vec![],
        };
        if spec.backings.contains(&Backing::Thp) && (mode == "never" || mode == "unavailable") {
            bs.info(Backing::Thp).skipped = Some(format!("THP is '{mode}' on this machine"));
        }
        for b in [Backing::Huge1G, Backing::Huge2M] {
            if !spec.backings.contains(&b) {
                continue;
            }
            let pages = spec.size.div_ceil(b.page());
            if spec.progress {
                eprintln!(
                    "bench tlb: reserving {pages} {} page(s) for the run",
                    b.name()
                );
            }
            match reserve(env, b.page(), pages) {
                Ok(added) => bs.info(b).pool_pages_added = Some(added),
                Err(e) => bs.info(b).skipped = Some(e),
            }
        }
        bs.active = Backing::ALL
            .iter()
            .copied()
            .filter(|b| {
                spec.backings.contains(b)
                    && bs
                        .infos
                        .iter()
                        .any(|x| x.name == b.name() && x.skipped.is_none())
            })
            .collect();
        bs
    }

    fn info(&mut self, b: Backing) -> &mut BackingInfo {
        let i = self
            .infos
            .iter()
            .position(|x| x.name == b.name())
            .unwrap_or(0);
        &mut self.infos[i]
    }
}

/// The rates measured so far: `rates[backing][combo][round]`, a combo being one row size and
/// one thread count.
struct Rates {
    combos: Vec<(usize, usize)>,
    rates: Vec<Vec<Vec<f64>>>,
}

impl Rates {
    fn new(spec: &Spec, active: usize) -> Rates {
        let combos: Vec<(usize, usize)> = spec
            .rows
            .iter()
            .flat_map(|r| spec.threads.iter().map(move |t| (*r, *t)))
            .collect();
        let rates = vec![vec![Vec::new(); combos.len()]; active];
        Rates { combos, rates }
    }

    /// One round: each backing (rotated) mapped afresh and measured at every combo. False
    /// when a stop was asked for.
    fn round(
        &mut self,
        spec: &Spec,
        round: usize,
        bs: &mut Backings,
        p: &Progress,
    ) -> Result<bool, String> {
        let active = bs.active.clone();
        for k in 0..active.len() {
            let bi = (round + k) % active.len();
            let b = active[bi];
            if crate::stop::requested() {
                return Ok(false);
            }
            p.say(&format!(
                "round {}: mapping {} of {}",
                round + 1,
                bulkhead::units::human_bytes(spec.size),
                b.describe()
            ));
            let t = Table::new(b, spec.size).map_err(|e| format!("{}: {e}", b.describe()))?;
            bs.info(b).huge_coverage.push(t.huge_coverage());
            for (ci, (row, threads)) in self.combos.iter().enumerate() {
                if crate::stop::requested() {
                    return Ok(false);
                }
                p.say(&format!(
                    "round {}: {} rows of {row} B, {threads} thread(s)",
                    round + 1,
                    b.name()
                ));
                let seed = 0x9E37_79B9_7F4A_7C15 ^ ((round as u64) << 32) ^ ci as u64;
                self.rates[bi][ci].push(measure(&t, *row, *threads, spec.duration, seed));
                p.bar.inc(1);
            }
        }
        Ok(true)
    }

    /// Per combo and backing: the rates, and their ratios to the same round's 4K rate.
    fn cells(&self, active: &[Backing]) -> Vec<Cell> {
        let base = active.iter().position(|b| *b == Backing::Base).unwrap_or(0);
        let rates = &self.rates;
        let mut cells = Vec::new();
        for (ci, (row, threads)) in self.combos.iter().enumerate() {
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
        cells
    }
}

pub fn run(spec: &Spec) -> Result<Report, String> {
    validate(spec)?;
    crate::env::clean_stale();
    let mut env = Env::create_bare()?;
    let mode = thp_mode();
    let mut bs = Backings::prepare(spec, &mode, &mut env);
    let mut rates = Rates::new(spec, bs.active.len());
    let redis_variants = spec.redis.as_ref().map_or(0, |_| 2);
    let total = spec.rounds as u64 * (bs.active.len() * rates.combos.len() + redis_variants) as u64;
    let p = Progress::new(spec.progress, total);
    let mut redis_state = spec.redis.as_ref().map(|r| RedisRun::new(spec, r));
    let mut rounds_done = 0;
    let mut interrupted = false;
    for round in 0..spec.rounds {
        if !rates.round(spec, round, &mut bs, &p)? {
            interrupted = true;
            break;
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
    let cells = rates.cells(&bs.active);
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
        backings: bs.infos,
        cells,
        redis,
        redis_skipped,
        verdicts,
        interrupted,
    })
}
