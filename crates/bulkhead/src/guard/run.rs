//! The guard's loop: take the lock, put back what a previous guard left, start the watchdog,
//! calibrate with the sideloads held (or reuse this boot's calibration), then every period
//! read, decide and act; wake early when a PSI trigger fires; stop on SIGTERM, SIGINT or
//! SIGHUP and give every sideload its plan back.

use super::control::{Baseline, Controller, Reading};
use super::release::{self, Heartbeat};
use super::signals::{self, Period, Sample, Sources};
use super::state::{self, ActionLog, Calibration, Holds, Logged, SideStatus, Status};
use super::{Guard, GuardRequest};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::notify::{self, Notifier};
use bulkhead_sys::process::{self, unix_now};
use bulkhead_sys::psi::{self, Trigger};
use bulkhead_sys::signals::SignalPipe;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long the PSI triggers look back.
const TRIGGER_WINDOW: Duration = Duration::from_millis(500);
/// When nothing is throttled and triggers watch, the guard looks this often.
const CALM_EVERY: Duration = Duration::from_secs(1);

/// Register a PSI trigger on `path` as the run does and drop it at once: whether this kernel
/// (and this user) takes one there, for the dry run. Nothing stays changed.
pub(super) fn try_trigger(path: &std::path::Path) -> std::io::Result<()> {
    Trigger::new(path, false, TRIGGER_WINDOW / 10, TRIGGER_WINDOW).map(drop)
}

/// What the guard tells the caller as it goes.
pub enum Event<'a> {
    Note(Diagnostic),
    Calibrating(Duration),
    Calibrated(&'a Baseline, bool),
    Action(&'a Logged),
}

/// How a run ended.
#[derive(Debug, Default, serde::Serialize)]
pub struct Summary {
    pub seconds: f64,
    pub actions: usize,
    pub cost_cpu_percent: f64,
}

enum Phase {
    Calibrating { until: Instant, acc: Acc },
    Guarding,
}

/// Sums over the calibration.
#[derive(Default)]
struct Acc {
    n: f64,
    cpu: f64,
    io: f64,
    memory: f64,
    wait: (f64, f64),
    service: (f64, f64),
    probes: Vec<f64>,
}

impl Acc {
    fn add(&mut self, p: &Period) {
        let r = &p.reading;
        self.n += 1.0;
        self.cpu += r.cpu.unwrap_or(0.0);
        self.io += r.io.unwrap_or(0.0);
        self.memory += r.memory.unwrap_or(0.0);
        if let Some(w) = p.wait_per_run_us {
            self.wait = (self.wait.0 + w, self.wait.1 + 1.0);
        }
        if let Some(c) = p.service_cpus {
            self.service = (self.service.0 + c, self.service.1 + 1.0);
        }
        self.probes.extend(r.probe_ms);
    }

    fn baseline(mut self) -> Baseline {
        let mean = |(s, n): (f64, f64)| if n > 0.0 { s / n } else { 0.0 };
        let n = self.n.max(1.0);
        self.probes.sort_by(f64::total_cmp);
        Baseline {
            cpu: self.cpu / n,
            io: self.io / n,
            memory: self.memory / n,
            probe_ms: self.probes.get(self.probes.len() / 2).copied(),
            wait_per_run_us: mean(self.wait),
            service_cpus: mean(self.service),
        }
    }
}

struct Loop<'a> {
    g: Guard,
    req: &'a GuardRequest,
    sources: Sources,
    prober: Option<super::probe::Prober>,
    ctl: Controller,
    phase: Phase,
    log: Option<ActionLog>,
    started: Instant,
    started_unix: f64,
    recent: VecDeque<Logged>,
    actions: usize,
    last: Option<Sample>,
    period: Period,
    triggers: Vec<Trigger>,
    notifier: Option<Notifier>,
    watchdog_every: Option<Duration>,
    last_notify: Instant,
    last_second: Instant,
    calibrated_at: Option<f64>,
    heartbeat: Option<Heartbeat>,
    notes: Vec<String>,
    lever_error_at: Option<Instant>,
}

/// Run the guard until a signal (or `req.duration`), then put the plan back.
pub fn run(g: Guard, req: &GuardRequest, on: &mut dyn FnMut(Event)) -> Result<Summary> {
    let Some(lock) = release::take_lock(Duration::ZERO)? else {
        let pid = state::read_status().map(|s| s.pid);
        return Err(Error::invalid(
            Diagnostic::error(format!(
                "another guard is running{}",
                pid.map(|p| format!(" (PID {p})")).unwrap_or_default()
            ))
            .hint("one guard per host: stop the other one first"),
        ));
    };
    if let Some(r) = release::release_held()? {
        on(Event::Note(Diagnostic::note(format!(
            "put back what the last guard (PID {}) left on {}",
            r.pid,
            r.sideloads.join(", ")
        ))));
    }
    run_where_it_cannot_starve(on);
    let signals = SignalPipe::install(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
        .map_err(|e| Error::failed(format!("cannot catch signals: {e}")))?;
    let holds = Holds {
        pid: std::process::id(),
        config: g.cx.config.clone(),
        cgroup_root: g.cx.cgroup_root.clone(),
        backend: g.cx.backend.name().into(),
        sideloads: g.spec.sideloads.iter().map(|s| s.to_string()).collect(),
        since: unix_now(),
    };
    state::write_json(&state::holds_path(), &holds)
        .map_err(|e| bulkhead_sys::error::io_failed("cannot write", &state::holds_path(), e))?;
    let mut l = Loop::new(g, req, on)?;
    let reader = signals.reader().map_err(|e| Error::failed(e.to_string()))?;
    let result = l.run(&reader, on);
    let released = l.g.levers.release_all();
    if released.is_ok() {
        let _ = std::fs::remove_file(state::holds_path());
    }
    l.write_status("stopped");
    if let Some(h) = l.heartbeat.take() {
        h.finish();
    }
    drop(lock);
    result?;
    released?;
    Ok(l.summary())
}

/// Real-time priority 1 (before any thread or the watchdog starts, so they inherit it):
/// a normal-priority guard was starved for seconds by low-weight pinned hogs on this
/// kernel, long enough to look hung. The loop sleeps most of the time, and the kernel's RT
/// throttling (sched_rt_runtime_us) bounds it anyway. Where that is refused, nice -10.
fn run_where_it_cannot_starve(on: &mut dyn FnMut(Event)) {
    let warn = |on: &mut dyn FnMut(Event), what: &str, e: std::io::Error| {
        on(Event::Note(Diagnostic::warning(format!(
            "the guard could not {what}: {e}"
        ))))
    };
    if let Err(fifo) = bulkhead_sys::sched::set_fifo(1) {
        if let Err(e) = process::set_nice(-10) {
            warn(on, "run at real-time priority or raise its nice value", e);
        } else {
            warn(on, "run at real-time priority (it runs at nice -10)", fifo);
        }
    }
    if let Err(e) = process::lock_memory() {
        warn(on, "lock its memory", e);
    }
}

impl<'a> Loop<'a> {
    fn new(g: Guard, req: &'a GuardRequest, on: &mut dyn FnMut(Event)) -> Result<Loop<'a>> {
        let sources = Sources::new(
            g.levers.chosen.reader().clone(),
            g.spec.protect.clone(),
            g.spec.sideloads.clone(),
        );
        let prober = match g.spec.probe {
            Some(p) => Some(
                super::probe::Prober::start(
                    p,
                    g.spec.period,
                    Some(super::probe::PeerCheck::new(
                        g.levers.chosen.reader().clone(),
                        g.spec.protect.clone(),
                    )),
                )
                .map_err(|e| Error::failed(format!("cannot start the probe: {e}")))?,
            ),
            None => None,
        };
        let hang = (g.spec.period * 20).max(Duration::from_secs(3));
        let heartbeat = match Heartbeat::spawn(hang) {
            Ok(h) => Some(h),
            Err(e) => {
                on(Event::Note(Diagnostic::warning(format!(
                    "the watchdog did not start ({e}); if the guard is killed, run `bulkhead guard --release`"
                ))));
                None
            }
        };
        let ctl = Controller::new(
            g.settings.clone(),
            Baseline::default(),
            g.spec.sideloads.len(),
        );
        let log = match &req.log {
            Some(p) => Some(
                ActionLog::open(p)
                    .map_err(|e| bulkhead_sys::error::io_failed("cannot open", p, e))?,
            ),
            None => None,
        };
        Ok(Loop {
            notes: g.notes.iter().map(|d| d.message.clone()).collect(),
            g,
            req,
            sources,
            prober,
            ctl,
            phase: Phase::Guarding,
            log,
            started: Instant::now(),
            started_unix: unix_now(),
            recent: VecDeque::new(),
            actions: 0,
            last: None,
            period: Period::default(),
            triggers: vec![],
            notifier: Notifier::from_env(),
            watchdog_every: notify::watchdog_interval().map(|d| d / 4),
            last_notify: Instant::now(),
            last_second: Instant::now(),
            calibrated_at: None,
            heartbeat,
            lever_error_at: None,
        })
    }

    fn run(
        &mut self,
        signals: &bulkhead_sys::signals::SignalReader,
        on: &mut dyn FnMut(Event),
    ) -> Result<()> {
        self.begin(on)?;
        self.notify("READY=1");
        let mut next = Instant::now();
        loop {
            if self
                .req
                .duration
                .is_some_and(|d| self.started.elapsed() >= d)
            {
                return Ok(());
            }
            let woke = psi::wait(
                &self.triggers,
                &[signals.fd()],
                next.saturating_duration_since(Instant::now()),
            )
            .map_err(|e| {
                Error::failed(format!("waiting for the protected slice's pressure: {e}"))
            })?;
            if !woke.also.is_empty() {
                let _ = signals.recv();
                return Ok(());
            }
            let now = Instant::now();
            if now < next && woke.triggers.is_empty() {
                continue;
            }
            self.tick(on);
            next = now + self.wait();
        }
    }

    /// Calibrate (sideloads held) unless this boot has a calibration of this `[guard]`.
    fn begin(&mut self, on: &mut dyn FnMut(Event)) -> Result<()> {
        let key = calibration_key(&self.g);
        let saved = state::read_json::<Calibration>(&state::calibration_path())
            .filter(|c| c.key == key && c.boot_id == state::boot_id());
        match saved {
            Some(c) if !self.req.recalibrate || self.g.spec.calibration.is_zero() => {
                self.ctl.set_baseline(c.baseline);
                self.calibrated_at = Some(c.at);
                on(Event::Calibrated(&c.baseline, true));
                self.start_triggers(on);
            }
            _ if self.g.spec.calibration.is_zero() => {
                on(Event::Calibrated(&Baseline::default(), false));
                self.start_triggers(on);
            }
            _ => {
                for (i, t) in self.ctl.hold_all().into_iter().enumerate() {
                    self.g.levers.set(i, t)?;
                }
                on(Event::Calibrating(self.g.spec.calibration));
                self.phase = Phase::Calibrating {
                    until: Instant::now() + self.g.spec.calibration,
                    acc: Acc::default(),
                };
            }
        }
        Ok(())
    }

    /// PSI triggers at the baseline plus the allowance, where the kernel offers them.
    fn start_triggers(&mut self, on: &mut dyn FnMut(Event)) {
        let b = self.ctl.baseline();
        let bases = [b.cpu, b.io, b.memory];
        let mut refused = Vec::new();
        for (path, base) in self.sources.psi.clone().iter().zip(bases) {
            let Some(path) = path else { continue };
            let share = (base + self.g.spec.stall).min(1.0);
            match Trigger::new(path, false, TRIGGER_WINDOW.mul_f64(share), TRIGGER_WINDOW) {
                Ok(t) => self.triggers.push(t),
                Err(e) => refused.push(format!("{} ({e})", path.display())),
            }
        }
        if !refused.is_empty() {
            let msg = format!(
                "this kernel refuses PSI triggers on {}; the guard reads them every period instead",
                refused.join(", ")
            );
            self.notes.push(msg.clone());
            on(Event::Note(Diagnostic::note(msg)));
        }
    }

    /// How long until the next look: the period while anything is throttled or harm is
    /// building, else longer when triggers will wake the guard.
    fn wait(&self) -> Duration {
        let period = self.g.spec.period;
        let calm = matches!(self.phase, Phase::Guarding)
            && self.ctl.throttles().iter().all(|t| t.is_none())
            && self.ctl.harm().1.cpu.max(self.ctl.harm().1.io) < 0.2;
        if calm && !self.triggers.is_empty() {
            CALM_EVERY.max(period)
        } else {
            period
        }
    }

    fn tick(&mut self, on: &mut dyn FnMut(Event)) {
        let cur = self.sources.sample();
        let probe = self.prober.as_ref().and_then(|p| p.take());
        if let Some(prev) = &self.last {
            self.period = signals::period(prev, &cur, probe);
            self.decide(on);
        }
        self.last = Some(cur);
        self.beat();
        if self.last_second.elapsed() >= Duration::from_secs(1) {
            self.last_second = Instant::now();
            self.every_second(on);
        }
    }

    fn decide(&mut self, on: &mut dyn FnMut(Event)) {
        if let Phase::Calibrating { until, acc } = &mut self.phase {
            acc.add(&self.period);
            if Instant::now() < *until {
                return;
            }
            let b = std::mem::take(acc).baseline();
            self.finish_calibration(b, on);
            return;
        }
        let (throttles, actions) = self.ctl.step(&self.period.reading);
        for (i, t) in throttles.into_iter().enumerate() {
            if let Err(e) = self.g.levers.set(i, t) {
                self.lever_failed(e, on);
            }
        }
        for a in &actions {
            let slice = self.g.spec.sideloads[a.sideload].to_string();
            let l = Logged::new(a, &slice, self.started_unix);
            if let Some(log) = &mut self.log {
                log.write(&l);
            }
            on(Event::Action(&l));
            self.recent.push_back(l);
            self.actions += 1;
        }
    }

    fn finish_calibration(&mut self, b: Baseline, on: &mut dyn FnMut(Event)) {
        self.ctl.set_baseline(b);
        let c = Calibration {
            key: calibration_key(&self.g),
            boot_id: state::boot_id(),
            at: unix_now(),
            baseline: b,
        };
        let _ = state::write_json(&state::calibration_path(), &c);
        self.calibrated_at = Some(c.at);
        self.phase = Phase::Guarding;
        on(Event::Calibrated(&b, false));
        self.start_triggers(on);
    }

    fn lever_failed(&mut self, e: Error, on: &mut dyn FnMut(Event)) {
        if self
            .lever_error_at
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        self.lever_error_at = Some(Instant::now());
        let mut d = Diagnostic::warning(format!("the guard could not act: {e}"));
        d.hint =
            Some("it keeps trying; check that the plan's slices exist (bulkhead apply)".into());
        on(Event::Note(d));
    }

    fn beat(&mut self) {
        if let Some(h) = &mut self.heartbeat {
            if !h.beat() {
                let hang = (self.g.spec.period * 20).max(Duration::from_secs(3));
                self.heartbeat = Heartbeat::spawn(hang).ok();
            }
        }
        if self
            .watchdog_every
            .is_some_and(|e| self.last_notify.elapsed() >= e)
        {
            self.last_notify = Instant::now();
            self.notify("WATCHDOG=1");
        }
    }

    /// Once a second: re-assert the throttles, give the protected slice's new threads their
    /// scheduler slice, and write the status.
    fn every_second(&mut self, on: &mut dyn FnMut(Event)) {
        if let Err(e) = self.g.levers.reassert() {
            self.lever_failed(e, on);
        }
        if let Some(ns) = crate::tasks::recorded(&self.g.spec.protect) {
            crate::tasks::set_on_pids(&self.sources.protected_pids(), ns);
        }
        let cutoff = self.started.elapsed().as_secs_f64() - 60.0;
        while self.recent.front().is_some_and(|a| a.t < cutoff)
            || self.recent.len() > state::MAX_RECENT
        {
            self.recent.pop_front();
        }
        let phase = match &self.phase {
            Phase::Calibrating { until, .. } => {
                let left = until.saturating_duration_since(Instant::now()).as_secs();
                self.notify(&format!("STATUS=calibrating ({left} s left)"));
                "calibrating"
            }
            Phase::Guarding => {
                let s = format!(
                    "STATUS=guarding {}: {}",
                    self.g.spec.protect,
                    self.sideloads_line()
                );
                self.notify(&s);
                "guarding"
            }
        };
        self.write_status(phase);
    }

    fn sideloads_line(&self) -> String {
        self.g
            .spec
            .sideloads
            .iter()
            .zip(self.g.levers.applied())
            .map(|(s, t)| format!("{s} {}", t.describe()))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn notify(&self, msg: &str) {
        if let Some(n) = &self.notifier {
            n.send(msg);
        }
    }

    fn write_status(&mut self, phase: &str) {
        let (fast, slow) = self.ctl.harm();
        let r: &Reading = &self.period.reading;
        let mut notes = self.notes.clone();
        if let Some(e) = self.prober.as_ref().and_then(|p| p.error()) {
            notes.push(format!("probe failing: {e}"));
        }
        let s = Status {
            pid: std::process::id(),
            started: self.started_unix,
            updated: unix_now(),
            plan: self.g.resolved.source.clone(),
            backend: self.g.levers.chosen.layout_line(),
            protect: self.g.spec.protect.to_string(),
            period_ms: self.g.spec.period.as_secs_f64() * 1e3,
            phase: phase.into(),
            calibration_left_s: match &self.phase {
                Phase::Calibrating { until, .. } => Some(
                    until
                        .saturating_duration_since(Instant::now())
                        .as_secs_f64(),
                ),
                Phase::Guarding => None,
            },
            baseline: self.ctl.baseline(),
            calibrated_at: self.calibrated_at,
            harm: state::HarmPair {
                fast: fast.into(),
                slow: slow.into(),
            },
            signals: state::Signals {
                cpu_stall: r.cpu,
                io_stall: r.io,
                memory_stall: r.memory,
                wait_per_run_us: self.period.wait_per_run_us,
                service_cpus: self.period.service_cpus,
                probe_ms: r.probe_ms,
                steal: self.period.steal,
            },
            sideloads: self
                .g
                .spec
                .sideloads
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let t = self.g.levers.applied()[i];
                    let u = r.sideloads.get(i).copied().unwrap_or_default();
                    SideStatus {
                        slice: s.to_string(),
                        throttle: t,
                        now: t.describe(),
                        cpus: u.cpu,
                        io_bps: u.io_bps,
                    }
                })
                .collect(),
            actions_last_minute: self.recent.iter().cloned().collect(),
            cost_cpu_percent: self.cost(),
            notes,
        };
        let _ = state::write_json(&state::status_path(), &s);
    }

    fn cost(&self) -> f64 {
        let cpu = process::cpu_time(std::process::id()).unwrap_or_default();
        100.0 * cpu.as_secs_f64() / self.started.elapsed().as_secs_f64().max(1e-3)
    }

    fn summary(&self) -> Summary {
        Summary {
            seconds: self.started.elapsed().as_secs_f64(),
            actions: self.actions,
            cost_cpu_percent: self.cost(),
        }
    }
}

/// What a calibration was taken for: the `[guard]` section and the plan file.
fn calibration_key(g: &Guard) -> String {
    format!(
        "{}|{}",
        g.resolved.source,
        serde_json::to_string(&g.spec).unwrap_or_default()
    )
}
