//! The guard's decisions, as a pure function of what it reads: no files, no clock. Each
//! [`Controller::step`] takes one [`Reading`] and returns the [`Throttle`] every sideload
//! should have now, with the [`Action`]s that changed something.
//!
//! How it decides:
//! - **Harm** is the protected slice's extra stall over its calibrated baseline, per
//!   resource (PSI `some` shares, or its threads' run-queue wait), in units of the plan's
//!   `stall` (1.0: 5 points above baseline with the default), and the probe's extra
//!   latency. Two smoothings: a fast one (0.2 s) to cut, a slow one (1 s) to release.
//! - **Cut fast** when the fast harm crosses 1.0: CPU first makes the sideloads idle
//!   (preempted at once), then halves their CPU quota from what they use down to the
//!   floor, then freezes them; I/O halves their bandwidth down to `io_floor`. At most one
//!   cut per two periods, so each has time to show.
//! - **Release slowly** once both harms stay below 0.5 for a second: thaw, then raise the
//!   quota step by step, quickly up to a learned ceiling (80% of the level at which harm
//!   last returned) and slowly above it, so the guard does not saw-tooth; idle goes last,
//!   after 30 s of calm. I/O limits are also released once the I/O harm alone has stayed
//!   below 0.5 for a second: a CPU stall the I/O limit cannot lower must not hold it.
//! - **Freeze** lasts at most `max_frozen`, then the sideload runs at its floor for at least
//!   twice that before it may be frozen again.
//! - **Protection, not starvation**: a sideload that moves I/O keeps at least `IO_KEEP` of
//!   its unthrottled I/O whichever lever holds it; below that, CPU cuts stop, a freeze
//!   ends and its quota is raised (keep.rs).
//! - **Useless cuts are reverted** (PARTIES): when everything is cut as far as it goes and
//!   the harm has not dropped after five periods, the sideloads are not the cause: the
//!   levels go back to where the episode started and cutting backs off (2 s, doubling to
//!   60 s).

use bulkhead_cgroups::Throttle;
use std::time::Duration;

/// Harm above which the guard cuts, and below which (slowly smoothed) it releases.
pub const ENTER: f64 = 1.0;
pub const EXIT: f64 = 0.5;
const FAST_TAU: f64 = 0.2;
const SLOW_TAU: f64 = 1.0;
/// Calm before releasing, and before idle scheduling is given back.
const HOLD: Duration = Duration::from_secs(1);
const IDLE_HOLD: Duration = Duration::from_secs(30);
/// Periods between cuts, and at full cut before a cut is judged useless.
const CUT_GAP: u32 = 2;
const JUDGE: u32 = 5;
const BACKOFF_MIN: Duration = Duration::from_secs(2);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A sideload moving less than this is not writing or reading enough to throttle.
const IO_ACTIVE: f64 = 1024.0 * 1024.0;

/// What the controller works with (from the plan's `[guard]` and the host).
#[derive(Debug, Clone)]
pub struct Settings {
    pub period: Duration,
    /// CPUs on the host: a sideload's quota without limit.
    pub cpus: f64,
    /// The least CPU a sideload keeps, in CPUs.
    pub cpu_floor: f64,
    pub quota_period_us: u64,
    pub max_frozen: Duration,
    /// Extra stall share that counts as harm.
    pub stall: f64,
    /// The least I/O bandwidth a sideload keeps, bytes/s.
    pub io_floor: u64,
    /// The share of its unthrottled I/O a sideload keeps at least, by every lever (keep.rs):
    /// protection, not starvation (`[guard] io_keep`, 40% by default: the peak the guard
    /// sees is what the sideload moves beside the protected slice, about 80% of what it moves
    /// alone in the v2 guest, and what it should keep at part load is 30% of that alone).
    pub io_keep: f64,
    /// The progress floor on CPU, in CPUs (`[guard] cpu_keep`; `None`: off, or no sideload
    /// CPU pressure to tell a starved sideload by), and how long it must starve first (lift.rs).
    pub cpu_keep: Option<f64>,
    pub keep_after: Duration,
    pub can_idle: bool,
    pub can_freeze: bool,
    pub can_io: bool,
}

/// The protected slice at rest (sideloads held), from calibration.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Baseline {
    /// Stall shares (0..1) of the protected slice.
    pub cpu: f64,
    pub io: f64,
    pub memory: f64,
    /// The probe's round trip, milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_ms: Option<f64>,
    /// Its threads' mean run-queue wait per time they ran, microseconds (for people).
    pub wait_per_run_us: f64,
    /// Its CPU use, in CPUs (for people).
    pub service_cpus: f64,
}

/// One period's reading.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Time since the previous reading.
    pub dt: Duration,
    /// Stall shares of the protected slice (`None`: not measurable here).
    pub cpu: Option<f64>,
    pub io: Option<f64>,
    pub memory: Option<f64>,
    pub probe_ms: Option<f64>,
    /// What each sideload used in the period (same order as the plan's sideloads).
    pub sideloads: Vec<Use>,
    /// The share of the machine's CPU time that was idle (`None`: unknown).
    pub host_idle: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Use {
    /// CPUs.
    pub cpu: f64,
    /// Bytes/s read and written.
    pub io_bps: f64,
    /// Bytes/s in its busier direction (read or write): what a limit, written per
    /// direction, acts on.
    pub io_dir_bps: f64,
    /// The share of the period some of its tasks waited for a CPU (its cpu.pressure `some`;
    /// `None`: not measurable here).
    pub wait: Option<f64>,
}

/// Harm per signal, in units of `stall` above the baseline.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Harm {
    pub cpu: f64,
    pub io: f64,
    pub memory: f64,
    pub probe: f64,
    /// The share of the probe's harm put down to I/O (the rest to CPU and memory): the
    /// protected slice's extra I/O stall over all its extra stall. A slow service whose
    /// stall is CPU is not answered by throttling I/O, and the other way round.
    #[serde(skip)]
    pub probe_io: f64,
}

impl Harm {
    /// What cutting CPU answers: CPU and memory stalls, and a slow service.
    fn cpu_side(&self) -> (f64, &'static str) {
        [
            (self.cpu, "cpu"),
            (self.memory, "memory"),
            (self.probe * (1.0 - self.probe_io), "probe"),
        ]
        .into_iter()
        .fold((f64::MIN, "cpu"), |a, b| if b.0 > a.0 { b } else { a })
    }
    fn io_side(&self) -> (f64, &'static str) {
        let probe = self.probe * self.probe_io;
        if self.io >= probe {
            (self.io, "io")
        } else {
            (probe, "probe")
        }
    }
    fn ewma(&mut self, x: &Harm, alpha: f64) {
        let m = |a: &mut f64, b: f64| *a += alpha * (b - *a);
        m(&mut self.cpu, x.cpu);
        m(&mut self.io, x.io);
        m(&mut self.memory, x.memory);
        m(&mut self.probe, x.probe);
        m(&mut self.probe_io, x.probe_io);
    }
}

/// One change the guard made, for the log and `status`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Action {
    /// Seconds since the guard started.
    pub t: f64,
    pub sideload: usize,
    /// idle, quota, freeze, thaw, io, keep, release, revert
    pub kind: &'static str,
    pub to: Throttle,
    /// The signal that decided it, its smoothed harm, and why in words.
    pub signal: &'static str,
    pub harm: f64,
    pub why: String,
}

#[derive(Debug, Clone, Default)]
struct Side {
    t: Throttle,
    frozen_at: Option<Duration>,
    /// No freezing before this (after a thaw).
    refreeze_at: Duration,
    /// The most I/O seen from it while not limited: in all, and in its busier direction.
    io_peak: f64,
    io_peak_dir: f64,
    /// Its I/O limit when the current I/O episode began, and the worst I/O harm since.
    io_episode: Option<(Option<u64>, f64)>,
    /// Where its I/O cuts stand with the judge in this episode (revert.rs), until the I/O
    /// calms.
    io_verdict: revert::Verdict,
    /// Since when its I/O limit is at its floor.
    io_floor_since: Option<Duration>,
    /// Its I/O, smoothed over a few seconds (keep.rs), and when its quota may next be raised
    /// because that fell below its floor.
    io_recent: f64,
    keep_at: Duration,
    /// The least CPU quota at which it kept its I/O floor, learned from keep actions: CPU
    /// cuts stop there and it is no longer frozen (keep.rs).
    cpu_keep: Option<f64>,
    last_release_log: Duration,
    /// The progress floor on CPU (lift.rs): its CPU use and CPU wait, smoothed, since when it
    /// starves (or, lifted, no longer needs the lift), and its quota before the lift.
    cpu_recent: f64,
    wait_recent: f64,
    lift_since: Option<Duration>,
    quota_before_lift: Option<f64>,
}

/// Which calm a release follows: both harms, or the I/O harm alone (I/O limits only).
#[derive(Debug, Clone, Copy)]
enum Calm {
    Both,
    Io,
}

/// A run of cuts, from the first until calm.
#[derive(Debug, Clone)]
struct Episode {
    before: Vec<Throttle>,
    harm_at_start: f64,
    /// When every lever reached its end (floor, frozen), if it did.
    maxed_at: Option<Duration>,
}

pub struct Controller {
    s: Settings,
    baseline: Baseline,
    sides: Vec<Side>,
    fast: Harm,
    slow: Harm,
    now: Duration,
    next_cut: Duration,
    next_io_cut: Duration,
    /// No I/O cuts before this (after cuts that did not help), and the next back-off.
    io_backoff_until: Duration,
    io_backoff: Duration,
    last_cut: Duration,
    /// Since when both harms are below EXIT.
    calm_since: Option<Duration>,
    /// Since when the I/O harm is below EXIT.
    io_calm_since: Option<Duration>,
    episode: Option<Episode>,
    backoff: Duration,
    backoff_until: Duration,
    /// Total sideload quota (CPUs) above which release slows down.
    ceiling: Option<f64>,
}

impl Controller {
    /// A controller with every sideload as planned.
    pub fn new(s: Settings, baseline: Baseline, sideloads: usize) -> Controller {
        Controller {
            s,
            baseline,
            sides: vec![Side::default(); sideloads],
            fast: Harm::default(),
            slow: Harm::default(),
            now: Duration::ZERO,
            next_cut: Duration::ZERO,
            next_io_cut: Duration::ZERO,
            io_backoff_until: Duration::ZERO,
            io_backoff: BACKOFF_MIN,
            last_cut: Duration::ZERO,
            calm_since: None,
            io_calm_since: None,
            episode: None,
            backoff: BACKOFF_MIN,
            backoff_until: Duration::ZERO,
            ceiling: None,
        }
    }

    /// Every sideload held at its floor (calibration); releasing starts from there.
    pub fn hold_all(&mut self) -> Vec<Throttle> {
        let held = self.floor();
        for side in &mut self.sides {
            side.t = held;
        }
        self.last_cut = self.now;
        self.throttles()
    }

    pub fn set_baseline(&mut self, b: Baseline) {
        self.baseline = b;
    }

    pub fn baseline(&self) -> Baseline {
        self.baseline
    }

    pub fn throttles(&self) -> Vec<Throttle> {
        self.sides.iter().map(|s| s.t).collect()
    }

    /// The smoothed harms (fast, slow).
    pub fn harm(&self) -> (Harm, Harm) {
        (self.fast, self.slow)
    }

    fn floor(&self) -> Throttle {
        Throttle {
            cpu: Some(self.s.cpu_floor),
            period_us: self.s.quota_period_us,
            idle: self.s.can_idle,
            frozen: false,
            lifted: false,
            io_bps: self.s.can_io.then_some(self.s.io_floor),
        }
    }

    /// Harm in this reading, before smoothing.
    pub fn harm_of(&self, r: &Reading) -> Harm {
        let b = &self.baseline;
        let over =
            |v: Option<f64>, base: f64| v.map_or(0.0, |v| ((v - base) / self.s.stall).max(0.0));
        let probe = match (r.probe_ms, b.probe_ms) {
            (Some(ms), Some(base)) => ((ms - base) / (base + 1.0)).max(0.0),
            _ => 0.0,
        };
        let (cpu, io, memory) = (
            over(r.cpu, b.cpu),
            over(r.io, b.io),
            over(r.memory, b.memory),
        );
        // With no extra stall anywhere the probe's harm is CPU's, as before I/O was weighed.
        let extra = cpu + io + memory;
        Harm {
            cpu,
            io,
            memory,
            probe,
            probe_io: if extra > 0.05 { io / extra } else { 0.0 },
        }
    }

    /// One period: smooth the harm, then cut, release or hold.
    pub fn step(&mut self, r: &Reading) -> (Vec<Throttle>, Vec<Action>) {
        self.now += r.dt;
        let dt = r.dt.as_secs_f64().max(1e-3);
        let h = self.harm_of(r);
        self.fast.ewma(&h, 1.0 - (-dt / FAST_TAU).exp());
        self.slow.ewma(&h, 1.0 - (-dt / SLOW_TAU).exp());
        let mut acts = Vec::new();
        self.track_io_peaks(r);
        self.track_recent_io(r);
        self.thaw_expired(&mut acts);
        self.keep_io(&mut acts);
        self.keep_cpu(r, &mut acts);
        self.update_calm();
        if self.now >= self.backoff_until {
            self.cut_cpu(r, &mut acts);
            self.cut_io(r, &mut acts);
        }
        self.judge(&mut acts);
        self.judge_io(&mut acts);
        self.release(r, &mut acts);
        (self.throttles(), acts)
    }

    fn act(
        &self,
        acts: &mut Vec<Action>,
        i: usize,
        kind: &'static str,
        signal: (f64, &'static str),
        why: String,
    ) {
        acts.push(Action {
            t: self.now.as_secs_f64(),
            sideload: i,
            kind,
            to: self.sides[i].t,
            signal: signal.1,
            harm: signal.0,
            why,
        });
    }

    fn track_io_peaks(&mut self, r: &Reading) {
        for (side, u) in self.sides.iter_mut().zip(&r.sideloads) {
            if side.t.io_bps.is_none() {
                side.io_peak = side.io_peak.max(u.io_bps);
                side.io_peak_dir = side.io_peak_dir.max(u.io_dir_bps);
            }
        }
    }

    fn update_calm(&mut self) {
        let io_calm = self.fast.io_side().0 < EXIT && self.slow.io_side().0 < EXIT;
        let calm = io_calm && self.fast.cpu_side().0 < EXIT && self.slow.cpu_side().0 < EXIT;
        let since = |on: bool, at: Option<Duration>| if on { at.or(Some(self.now)) } else { None };
        self.calm_since = since(calm, self.calm_since);
        self.io_calm_since = since(io_calm, self.io_calm_since);
        if calm && self.episode.take().is_some() {
            // The cuts helped: the next episode starts without back-off.
            self.backoff = BACKOFF_MIN;
        }
        if calm {
            for side in &mut self.sides {
                if side.io_episode.take().is_some() {
                    self.io_backoff = BACKOFF_MIN;
                }
                side.io_verdict = revert::Verdict::Open;
            }
        }
    }

    fn start_episode(&mut self, harm: f64) {
        if self.episode.is_none() {
            self.episode = Some(Episode {
                before: self.throttles(),
                harm_at_start: harm,
                maxed_at: None,
            });
        }
    }

    /// Learn where harm begins: 80% of the sideloads' quota (or use) when it appeared.
    fn learn_ceiling(&mut self, r: &Reading) {
        let level: f64 = self
            .sides
            .iter()
            .zip(&r.sideloads)
            .map(|(s, u)| {
                s.t.cpu
                    .unwrap_or(self.s.cpus)
                    .min(u.cpu.max(self.s.cpu_floor))
            })
            .sum();
        let c = (0.8 * level).max(self.s.cpu_floor * self.sides.len() as f64);
        self.ceiling = Some(self.ceiling.map_or(c, |old| old.min(c)));
    }

    fn cut_cpu(&mut self, r: &Reading, acts: &mut Vec<Action>) {
        let drive = self.fast.cpu_side();
        if drive.0 < ENTER || self.now < self.next_cut {
            return;
        }
        let busy: f64 = r.sideloads.iter().map(|u| u.cpu).sum();
        let floor_total = self.s.cpu_floor * self.sides.len() as f64;
        if self.episode.is_none() && busy <= 2.0 * floor_total && !self.frozen_any() {
            return; // the sideloads hardly run: they are not the cause
        }
        if self.episode.is_none() {
            self.learn_ceiling(r);
        }
        self.start_episode(drive.0);
        let why = format!(
            "{} stall {:.1}x the allowance above baseline",
            drive.1, drive.0
        );
        let cut = if self.s.can_idle && self.sides.iter().any(|s| !s.t.idle && !s.t.lifted) {
            self.make_idle(acts, drive, &why)
        } else if (0..self.sides.len())
            .any(|i| self.sides[i].t.cpu.unwrap_or(self.s.cpus) > self.cpu_floor_of(i))
        {
            self.halve_quota(r, acts, drive, &why)
        } else {
            self.freeze(acts, drive, &why)
        };
        if cut {
            self.last_cut = self.now;
            self.next_cut = self.now + self.s.period * CUT_GAP;
        }
    }

    fn make_idle(&mut self, acts: &mut Vec<Action>, drive: (f64, &'static str), why: &str) -> bool {
        for i in 0..self.sides.len() {
            if !self.sides[i].t.idle && !self.sides[i].t.lifted {
                self.sides[i].t.idle = true;
                self.act(acts, i, "idle", drive, why.to_string());
            }
        }
        true
    }

    fn halve_quota(
        &mut self,
        r: &Reading,
        acts: &mut Vec<Action>,
        drive: (f64, &'static str),
        why: &str,
    ) -> bool {
        for i in 0..self.sides.len() {
            if self.starved(i) {
                continue;
            }
            let used = r.sideloads.get(i).map_or(self.s.cpus, |u| u.cpu);
            let now = self.sides[i].t.cpu.unwrap_or(self.s.cpus);
            let floor = self.cpu_floor_of(i);
            if floor >= self.s.cpus {
                continue; // it needs every CPU to keep its I/O floor
            }
            let q = (now.min(used.max(floor)) * 0.5).max(floor);
            if Some(q) != self.sides[i].t.cpu {
                self.sides[i].t.cpu = Some(q);
                self.sides[i].t.period_us = self.s.quota_period_us;
                self.act(acts, i, "quota", drive, why.to_string());
            }
        }
        true
    }

    fn freeze(&mut self, acts: &mut Vec<Action>, drive: (f64, &'static str), why: &str) -> bool {
        if !self.s.can_freeze || self.s.max_frozen.is_zero() {
            return false;
        }
        let mut any = false;
        for i in 0..self.sides.len() {
            let side = &self.sides[i];
            if side.t.frozen
                || self.now < side.refreeze_at
                || side.cpu_keep.is_some()
                || side.t.lifted
                || self.starved(i)
            {
                continue;
            }
            self.sides[i].t.frozen = true;
            self.sides[i].frozen_at = Some(self.now);
            self.act(acts, i, "freeze", drive, format!("{why}, at the CPU floor"));
            any = true;
        }
        any
    }

    fn frozen_any(&self) -> bool {
        self.sides.iter().any(|s| s.t.frozen)
    }

    fn thaw_expired(&mut self, acts: &mut Vec<Action>) {
        for i in 0..self.sides.len() {
            let Some(at) = self.sides[i].frozen_at else {
                continue;
            };
            if self.now >= at + self.s.max_frozen {
                let side = &mut self.sides[i];
                side.t.frozen = false;
                side.frozen_at = None;
                side.refreeze_at = self.now + (self.s.max_frozen * 2).max(Duration::from_secs(1));
                let why = format!(
                    "frozen for max_frozen ({:?}); it runs at its floor before it may be frozen again",
                    self.s.max_frozen
                );
                self.act(acts, i, "thaw", (self.fast.cpu_side().0, "max_frozen"), why);
            }
        }
    }

    /// A sideload's I/O floor, per direction as the limit is written: the settings' floor,
    /// or `io_keep` of its busier direction's peak if more. A mix of reads and writes at
    /// that floor in both directions keeps about `io_keep` of its peak in all; the peak in
    /// all, per direction, would let it keep up to twice that.
    fn io_floor_of(&self, i: usize) -> u64 {
        (self.sides[i].io_peak_dir * self.s.io_keep).max(self.s.io_floor as f64) as u64
    }

    fn cut_io(&mut self, r: &Reading, acts: &mut Vec<Action>) {
        let drive = self.fast.io_side();
        if !self.s.can_io || drive.0 < ENTER || self.now < self.next_io_cut {
            return;
        }
        let proof = self.io_proven_by_revert(drive.0);
        if self.now < self.io_backoff_until {
            return;
        }
        let why = proof.unwrap_or_else(|| {
            format!(
                "{} stall {:.1}x the allowance above baseline",
                drive.1, drive.0
            )
        });
        let mut cut = false;
        for i in 0..self.sides.len() {
            let (all, rate) = r
                .sideloads
                .get(i)
                .map_or((0.0, 0.0), |u| (u.io_bps, u.io_dir_bps));
            let limit = self.sides[i].t.io_bps;
            if all < IO_ACTIVE && limit.is_none() {
                continue;
            }
            let floor = self.io_floor_of(i);
            let now = limit.map_or(f64::MAX, |b| b as f64);
            let b = ((now.min(rate.max(floor as f64)) * 0.5) as u64).max(floor);
            if Some(b) != limit {
                self.start_episode(drive.0);
                let side = &mut self.sides[i];
                side.io_episode.get_or_insert((limit, drive.0));
                side.t.io_bps = Some(b);
                self.act(acts, i, "io", drive, why.clone());
                cut = true;
            }
        }
        if cut {
            self.last_cut = self.now;
            self.next_io_cut = self.now + self.s.period * CUT_GAP;
        }
    }

    /// Whether every lever is at its end: idle (where it can), CPU and I/O at their
    /// floors, frozen (where allowed and not cooling down); a sideload kept at its I/O floor
    /// (keep.rs) is at its end too.
    fn maxed(&self) -> bool {
        self.sides.iter().enumerate().all(|(i, s)| {
            let idle = s.t.idle || s.t.lifted || !self.s.can_idle;
            if self.starved(i) {
                return idle;
            }
            let cpu = s.t.cpu.is_some_and(|q| q <= self.cpu_floor_of(i)) && idle;
            let frozen = s.t.frozen
                || !self.s.can_freeze
                || self.now < s.refreeze_at
                || s.cpu_keep.is_some()
                || s.t.lifted;
            cpu && frozen
        })
    }

    /// PARTIES: cuts that went as far as they go without lowering the harm are reverted.
    fn judge(&mut self, acts: &mut Vec<Action>) {
        let maxed = self.maxed();
        let now = self.now;
        let Some(ep) = &mut self.episode else {
            return;
        };
        if !maxed {
            ep.maxed_at = None;
            return;
        }
        let since = *ep.maxed_at.get_or_insert(now);
        let harm = self.fast.cpu_side().0.max(self.fast.io_side().0);
        if now < since + self.s.period * JUDGE
            || harm < ENTER * 0.9
            || harm < 0.8 * ep.harm_at_start
        {
            return;
        }
        let before = ep.before.clone();
        self.episode = None;
        self.backoff_until = now + self.backoff;
        let why = format!(
            "cutting every sideload as far as it goes did not lower the stall ({harm:.1}x); the sideloads are not the cause; no cuts for {:?}",
            self.backoff
        );
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        for (i, t) in before.into_iter().enumerate() {
            if self.sides[i].t == t || self.sides[i].t.lifted {
                continue; // nothing to give back (a sideload kept at its floors since)
            }
            self.sides[i].t = t;
            self.sides[i].frozen_at = None;
            self.act(acts, i, "revert", (harm, "judge"), why.clone());
        }
    }

    fn release(&mut self, r: &Reading, acts: &mut Vec<Action>) {
        if self.now < self.last_cut + HOLD {
            return;
        }
        let periods = r.dt.as_secs_f64() / self.s.period.as_secs_f64().max(1e-3);
        let Some(calm) = self.calm_since.filter(|c| self.now >= *c + HOLD) else {
            self.release_io_only(periods, acts);
            return;
        };
        let total: f64 = self
            .sides
            .iter()
            .map(|s| s.t.cpu.unwrap_or(self.s.cpus))
            .sum();
        let step = match self.ceiling {
            Some(c) if total >= c => 0.02 * c.max(self.s.cpu_floor),
            _ => 0.05 * self.s.cpus,
        } * periods;
        for i in 0..self.sides.len() {
            let before = self.sides[i].t;
            let used = r.sideloads.get(i).map_or(0.0, |u| u.cpu);
            self.release_one(i, step, used, periods);
            self.log_release(acts, i, before, calm, Calm::Both);
        }
        if self.sides.iter().all(|s| s.t.cpu.is_none()) {
            // Calm at full speed: the ceiling relaxes, so changed conditions are found again.
            self.ceiling = self
                .ceiling
                .map(|c| c * (1.0 + 0.01 * periods))
                .filter(|c| *c < self.s.cpus * self.sides.len() as f64);
        }
    }

    fn release_one(&mut self, i: usize, step: f64, used: f64, periods: f64) {
        let cpus = self.s.cpus;
        let calm_for = self.calm_since.map_or(Duration::ZERO, |c| self.now - c);
        let side = &mut self.sides[i];
        if side.t.frozen {
            side.t.frozen = false;
            side.frozen_at = None;
            return;
        }
        if let Some(q) = side.t.cpu.filter(|_| !side.t.lifted) {
            // A quota far above what it uses no longer holds anything back.
            let next = if used < 0.5 * q && q > 2.0 * self.s.cpu_floor {
                cpus
            } else {
                q + step
            };
            side.t.cpu = (next < cpus).then_some(next);
        }
        self.release_io(i, periods);
        let side = &mut self.sides[i];
        if side.t.cpu.is_none() && side.t.io_bps.is_none() && side.t.idle && calm_for >= IDLE_HOLD {
            side.t.idle = false;
        }
    }

    /// Raise sideload `i`'s I/O limit by a quarter per period, until it no longer holds.
    fn release_io(&mut self, i: usize, periods: f64) {
        let io_floor = self.s.io_floor as f64;
        let side = &mut self.sides[i];
        if let Some(b) = side.t.io_bps {
            let next = b as f64 * (1.0 + 0.25 * periods);
            let enough = next >= 4.0 * side.io_peak.max(io_floor) || next > 1e10;
            side.t.io_bps = (!enough).then_some(next as u64);
        }
    }

    /// The I/O harm is calm while the CPU's is not: only the I/O limits are given back.
    fn release_io_only(&mut self, periods: f64, acts: &mut Vec<Action>) {
        let Some(calm) = self.io_calm_since.filter(|c| self.now >= *c + HOLD) else {
            return;
        };
        for i in 0..self.sides.len() {
            let before = self.sides[i].t;
            self.release_io(i, periods);
            self.log_release(acts, i, before, calm, Calm::Io);
        }
    }

    /// Releases are logged when a lever is given back entirely, and otherwise once a second.
    fn log_release(
        &mut self,
        acts: &mut Vec<Action>,
        i: usize,
        before: Throttle,
        calm: Duration,
        which: Calm,
    ) {
        let t = self.sides[i].t;
        if t == before {
            return;
        }
        let whole = (before.cpu.is_some() && t.cpu.is_none())
            || (before.idle && !t.idle)
            || (before.frozen && !t.frozen)
            || (before.io_bps.is_some() && t.io_bps.is_none());
        if !whole && self.now < self.sides[i].last_release_log + Duration::from_secs(1) {
            return;
        }
        self.sides[i].last_release_log = self.now;
        let (harm, what, of) = match which {
            Calm::Both => (self.slow.cpu_side().0, "calm", "harm"),
            Calm::Io => (self.slow.io_side().0, "I/O calm", "I/O harm"),
        };
        let why = format!(
            "{what} for {:.1} s ({of} below {EXIT})",
            (self.now - calm).as_secs_f64()
        );
        self.act(acts, i, "release", (harm, what), why);
    }
}

mod keep;
mod lift;
mod revert;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_io;
