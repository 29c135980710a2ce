//! `place`: the plan's placement rules ([place.NAME]) applied to processes as they start;
//! once (`--once`), as a dry run, or until stopped. And the placements the plan promises
//! ([`expected`]), for `check` and `plan show`.
//!
//! Until stopped, the kernel's process events (`bulkhead_sys::procevents`) say which
//! processes forked, exec'd or changed their user or name, and only those are read; the
//! young ones are read again every `interval` (a title set after the fork has no event).
//! /proc is scanned whole at the start, after the kernel dropped events, and every
//! 10 s (`SAFETY_SCAN`). Where the events cannot be had (no CAP_NET_ADMIN, a PID or network
//! namespace other than the initial one), /proc is scanned every `interval` instead.

use super::slices::require_slice;
use super::Context;
use crate::place::pidfiles::{Pidfiles, ServiceMove};
use crate::place::rules::{self, Change, Decision, Engine, MAX_PER_SCAN};
use crate::place::tree;
use bulkhead_cgroups::{Chosen, Placement};
use bulkhead_plan::place::Expected;
use bulkhead_plan::SliceName;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::procevents::ProcEvents;
use bulkhead_sys::signals::stop_requested;
use std::time::{Duration, Instant};

/// While the kernel's process events drive `place`, /proc is still scanned whole this
/// often: the safety net for what no event says (a process that came to match a rule
/// without forking, exec'ing or changing its user or name) and for a bug on either side.
/// A scan reads only the processes it has not decided on, so it costs a listing of /proc.
pub(crate) const SAFETY_SCAN: Duration = Duration::from_secs(10);

/// How long the processes events name are gathered before they are read (see [`Pending`]):
/// a placement waits this much longer, far below an interval.
const GATHER: Duration = Duration::from_millis(20);

/// How to run.
#[derive(Debug, Clone)]
pub struct PlaceRequest {
    /// One scan, then stop.
    pub once: bool,
    /// Say what would move, move nothing (one scan).
    pub dry_run: bool,
    /// Time between scans.
    pub interval: Duration,
    /// How long a new process is re-read (its command line may change after it starts).
    pub recheck: Duration,
}

impl Default for PlaceRequest {
    fn default() -> Self {
        PlaceRequest {
            once: false,
            dry_run: false,
            interval: Duration::from_millis(100),
            recheck: Duration::from_secs(2),
        }
    }
}

/// One process placed (or, in a dry run, that would be).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Placed {
    pub pid: i32,
    pub comm: String,
    pub cmdline: String,
    pub rule: String,
    pub slice: SliceName,
    pub moved: bool,
    /// A service's main process moves with its descendants: those moved with it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub descendants: Vec<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a run did.
#[derive(Debug, Default, serde::Serialize)]
pub struct PlaceSummary {
    /// Full scans of /proc.
    pub scans: u64,
    pub placed: u64,
    pub failed: u64,
    /// The kernel's process events drove the run (else it scanned every interval).
    pub events: bool,
    /// Why the events could not be had (the run scanned instead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_events: Option<String>,
    /// Rounds that decided on the processes events named.
    pub rounds: u64,
    /// Times the kernel dropped events (each answered by a full scan).
    pub lost: u64,
    /// Times SIGHUP made it read the plan again (and the plan was good).
    pub reloads: u64,
}

/// The placements the plan promises (its services and rules, and the slices they place in): the hook
/// `bulkhead check` reads to say whether the database's processes are where they belong.
pub fn expected(cx: &Context) -> Result<Vec<Expected>> {
    Ok(bulkhead_plan::place::expected(&cx.load_plan()?))
}

/// A daemon's log (`place --log FILE`): every line from now on appended to `path`.
pub fn log_to(path: &std::path::Path) -> Result<()> {
    bulkhead_sys::process::log_output_to(path).map_err(|e| {
        Error::invalid(
            Diagnostic::error(format!("cannot log to {}: {e}", path.display()))
                .context("--log")
                .hint("give a file in a directory only root can write (e.g. /var/log/bulkhead-place.log)"),
        )
    })
}

/// Run the rules: move what matches, report each through `on`; one full scan for `once` or
/// a dry run, else until SIGINT/SIGTERM (driven by the kernel's process events where they
/// can be had, by a scan every interval where not).
pub fn place(
    cx: &Context,
    req: &PlaceRequest,
    mut on: impl FnMut(&Placed),
) -> Result<PlaceSummary> {
    let chosen = cx.choose()?;
    let (engine, pidfiles, read) = prepare(cx, &chosen, req)?;
    let mut pl = Placer {
        cx,
        req,
        chosen: &chosen,
        engine,
        pidfiles,
        dry_run: req.dry_run,
        sum: PlaceSummary::default(),
        on: &mut on,
        beat: None,
    };
    if req.once || req.dry_run {
        pl.full_scan();
        return Ok(pl.sum);
    }
    // Who places for this cgroup root, with which plan: `check` reads it.
    pl.beat = crate::place::state::Beat::start(&cx.cgroup_root, read.0, read.1);
    bulkhead_sys::signals::catch_stop(&[libc::SIGINT, libc::SIGTERM]);
    bulkhead_sys::signals::catch_reload(&[libc::SIGHUP]);
    match ProcEvents::open() {
        Ok(events) => pl.by_events(events, req.interval),
        Err(e) => pl.fall_back(e, req.interval),
    }
    Ok(pl.sum)
}

/// The plan's rules and services as `place` decides with them, the slices they name checked:
/// at the start, and again at each SIGHUP. With them, the plan's source and digest (its
/// state file's).
fn prepare(
    cx: &Context,
    chosen: &Chosen,
    req: &PlaceRequest,
) -> Result<(Engine, Pidfiles, (String, String))> {
    let plan = cx.load_plan()?;
    let read = (
        plan.source.label(),
        crate::place::state::digest(&plan.source.text),
    );
    // systemd attaches services itself (their Slice= drop-ins); elsewhere their pidfiles do.
    let services = if chosen.attaches_services() {
        Vec::new()
    } else {
        bulkhead_plan::services::with_pidfiles(&plan)
    };
    let pidfiles = Pidfiles::new(services);
    if plan.place.is_empty() && pidfiles.is_empty() {
        return Err(Error::invalid(
            Diagnostic::error("the plan has no placement rules (and no service with a pidfile to place without systemd)")
                .at(plan.source.label())
                .hint("add a [place.NAME] section: slice = \"db-helper\" and what to match (exe, cmdline, user, parent, unit); see docs/PLACEMENT.md"),
        ));
    }
    for e in bulkhead_plan::place::expected(&plan) {
        require_slice(cx, chosen, &e.slice)?;
    }
    Ok((
        Engine::new(rules::compile(&plan)?, req.recheck),
        pidfiles,
        read,
    ))
}

/// A run's state: what it moves with, what it decides with, what it has done.
struct Placer<'a, F: FnMut(&Placed)> {
    cx: &'a Context,
    req: &'a PlaceRequest,
    chosen: &'a Chosen,
    engine: Engine,
    pidfiles: Pidfiles,
    dry_run: bool,
    sum: PlaceSummary,
    on: &'a mut F,
    /// The state file's heartbeat (a long run only).
    beat: Option<crate::place::state::Beat>,
}

impl<F: FnMut(&Placed)> Placer<'_, F> {
    /// The services by their pidfiles, then every process not decided on yet.
    fn full_scan(&mut self) {
        self.services();
        let now = now_ticks();
        let decisions = self.engine.scan(now);
        self.rules(decisions);
        self.sum.scans += 1;
    }

    /// Until stopped: a full scan every `interval`.
    fn by_scans(&mut self, interval: Duration) {
        loop {
            self.reload_if_asked();
            self.full_scan();
            if let Some(b) = &mut self.beat {
                b.beat();
            }
            if stop_requested() {
                return;
            }
            std::thread::sleep(interval);
            if stop_requested() {
                return;
            }
        }
    }

    /// The events could not be had: say so once, and scan.
    fn fall_back(&mut self, why: std::io::Error, interval: Duration) {
        eprintln!("bulkhead: warning: place: {why}; scanning /proc every {interval:?} instead");
        self.sum.events = false;
        self.sum.no_events = Some(why.to_string());
        self.by_scans(interval);
    }

    /// Until stopped: decide on the processes the kernel's events name (gathered for
    /// [`GATHER`]), read the young ones again and the services' pidfiles every `interval`,
    /// and scan /proc whole at the start, after lost events and every `SAFETY_SCAN`.
    fn by_events(&mut self, mut events: ProcEvents, interval: Duration) {
        self.sum.events = true;
        self.full_scan();
        let mut last_full = Instant::now();
        let mut tick = last_full + interval;
        let mut pending = Pending::default();
        let mut batch = Vec::new();
        while !stop_requested() {
            if self.reload_if_asked() {
                pending = Pending::default();
                self.full_scan();
                last_full = Instant::now();
            }
            let waited = wait(&events, &pending, tick);
            batch.clear();
            let room = MAX_PER_SCAN - pending.pids.len();
            let got = match waited.and_then(|_| events.read(&mut batch, room)) {
                Ok(got) => got,
                Err(e) => return self.fall_back(e, interval),
            };
            for change in batch.iter().filter_map(rules::change_of) {
                pending.add(change, &mut self.engine);
            }
            if pending.ready() {
                let decisions = self.engine.decide_on(now_ticks(), &pending.take());
                self.rules(decisions);
                self.sum.rounds += 1;
            }
            self.sum.lost += u64::from(got.lost);
            if got.lost || last_full.elapsed() >= SAFETY_SCAN {
                self.full_scan();
                last_full = Instant::now();
            }
            if Instant::now() >= tick {
                self.every_interval();
                tick = Instant::now() + interval;
                if let Some(b) = &mut self.beat {
                    b.beat();
                }
            }
        }
    }

    /// After a SIGHUP: the plan read again and checked; its rules replace the old ones (every
    /// process is decided on again by them), or on an error the old ones stay and the reason
    /// is said. Whether the rules changed.
    fn reload_if_asked(&mut self) -> bool {
        if !bulkhead_sys::signals::reload_requested() {
            return false;
        }
        let at = bulkhead_sys::units::utc_now();
        match prepare(self.cx, self.chosen, self.req) {
            Ok((engine, pidfiles, read)) => {
                self.engine = engine;
                self.pidfiles = pidfiles;
                if let Some(b) = &mut self.beat {
                    b.plan(read.0, read.1);
                }
                self.sum.reloads += 1;
                eprintln!("{at} bulkhead: place: SIGHUP: the plan was read again; its rules apply from now");
                true
            }
            Err(e) => {
                eprintln!("{at} bulkhead: error: place: SIGHUP: the plan was not reloaded, the rules before it stay: {e}");
                false
            }
        }
    }

    /// The services' pidfiles, and the young processes read again.
    fn every_interval(&mut self) {
        self.services();
        if self.engine.watched() > 0 {
            let decisions = self.engine.recheck(now_ticks());
            self.rules(decisions);
        }
    }

    /// Move the services whose pidfile names a process outside their slice.
    fn services(&mut self) {
        for m in self.pidfiles.scan() {
            let p = carry_out_service(self.chosen, m, self.dry_run);
            self.report(&p);
        }
    }

    /// Move what the rules decided.
    fn rules(&mut self, decisions: Vec<Decision>) {
        for d in decisions {
            // A process that exited since the rules matched it is nothing to place.
            if let Some(p) = carry_out(self.chosen, d, self.dry_run) {
                self.report(&p);
            }
        }
    }

    fn report(&mut self, p: &Placed) {
        if p.error.is_some() {
            self.sum.failed += 1;
        } else {
            self.sum.placed += 1;
        }
        (self.on)(p);
    }
}

/// The processes events named, gathered for [`GATHER`] after the first of them before
/// they are read: a fork and its exec are read once, and a process that exits within it
/// (most of a shell script's) is not read at all.
#[derive(Default)]
struct Pending {
    pids: Vec<i32>,
    since: Option<Instant>,
}

impl Pending {
    /// A change an event says: a process to read, or one gone (forgotten by the engine).
    fn add(&mut self, change: Change, engine: &mut Engine) {
        match change {
            Change::Read(pid) if !self.pids.contains(&pid) => {
                self.pids.push(pid);
                self.since.get_or_insert_with(Instant::now);
            }
            Change::Read(_) => {}
            Change::Gone(pid) => {
                self.pids.retain(|&p| p != pid);
                if self.pids.is_empty() {
                    self.since = None;
                }
                engine.forget(pid);
            }
        }
    }

    /// When the gathered processes are to be read.
    fn due(&self) -> Option<Instant> {
        Some(self.since? + GATHER)
    }

    /// Time to read them: [`GATHER`] has passed, or there are as many as a round takes.
    fn ready(&self) -> bool {
        !self.pids.is_empty()
            && (self.pids.len() >= MAX_PER_SCAN || self.due().is_some_and(|d| Instant::now() >= d))
    }

    fn take(&mut self) -> Vec<i32> {
        self.since = None;
        std::mem::take(&mut self.pids)
    }
}

/// Wait for events until `tick`; while some are gathered, sleep until they are due (or
/// `tick`) instead, so that a burst of events wakes `place` once per [`GATHER`], not once
/// per event.
fn wait(events: &ProcEvents, pending: &Pending, tick: Instant) -> std::io::Result<()> {
    let until = pending.due().map_or(tick, |due| due.min(tick));
    let left = until.saturating_duration_since(Instant::now());
    if pending.pids.is_empty() {
        events.wait(left)?;
    } else {
        std::thread::sleep(left);
    }
    Ok(())
}

/// The clock processes' start times are on (0 if /proc/uptime cannot be read: every
/// process then looks old, and is decided on once).
fn now_ticks() -> u64 {
    bulkhead_sys::procs::now_ticks().unwrap_or(0)
}

fn carry_out(chosen: &impl Placement, d: Decision, dry_run: bool) -> Option<Placed> {
    let r = if dry_run {
        Ok(())
    } else {
        // Held from here to the write: the process the rules matched, not its number.
        let held = bulkhead_sys::process::Held::hold(d.pid, d.start)?;
        let r = chosen.move_held(&d.slice, held.pid(), &|| held.still_same());
        if r.is_err() && !held.still_same() && !held.pid_reused() {
            // It exited during the move (an autovacuum worker done in milliseconds) and its
            // PID names no other process: nothing to place, not an error. A PID given again
            // meanwhile is said (the move put that process back: escape::reuse).
            return None;
        }
        r
    };
    Some(Placed {
        pid: d.pid,
        comm: d.comm,
        cmdline: d.cmdline,
        rule: d.rule,
        slice: d.slice,
        moved: r.is_ok() && !dry_run,
        descendants: Vec::new(),
        error: r.err(),
    })
}

/// A service's main process with its whole tree (`move --tree`'s rounds).
fn carry_out_service(chosen: &impl Placement, m: ServiceMove, dry_run: bool) -> Placed {
    let mut p = Placed {
        pid: m.pid,
        comm: m.comm,
        cmdline: m.cmdline,
        rule: format!("service {}", m.service),
        slice: m.slice,
        moved: false,
        descendants: Vec::new(),
        error: m.refused,
    };
    if p.error.is_some() {
        return p;
    }
    if dry_run {
        p.descendants = tree::descendants_now(p.pid);
        return p;
    }
    let gone = |q: i32| bulkhead_sys::process::is_kernel_thread(q).is_none();
    let mv = |q: i32| chosen.move_pid(&p.slice, q);
    match tree::move_tree(p.pid, || tree::descendants_now(p.pid), mv, gone) {
        Ok(out) => {
            p.moved = true;
            p.descendants = out.moved.into_iter().skip(1).collect();
            if let Some((pid, e)) = out.failed.into_iter().next() {
                p.error = Some(format!("descendant {pid} could not move: {e}"));
            }
        }
        Err(e) => p.error = Some(e),
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_gathered_once_per_process_and_exits_drop_them() {
        let mut e = Engine::new(Vec::new(), Duration::from_secs(2));
        let mut p = Pending::default();
        assert!(p.due().is_none() && !p.ready());
        // A fork and its exec: one read.
        p.add(Change::Read(100), &mut e);
        p.add(Change::Read(100), &mut e);
        p.add(Change::Read(101), &mut e);
        assert_eq!(p.pids, [100, 101]);
        let due = p.due().unwrap();
        assert!(due > Instant::now() && due <= Instant::now() + GATHER);
        // Exited before it was read: not read; the last one gone, nothing is due.
        p.add(Change::Gone(100), &mut e);
        assert_eq!(p.pids, [101]);
        p.add(Change::Gone(101), &mut e);
        assert!(p.pids.is_empty() && p.due().is_none() && !p.ready());
        // As many as a round takes: ready at once.
        for pid in 0..MAX_PER_SCAN as i32 {
            p.add(Change::Read(1000 + pid), &mut e);
        }
        assert!(p.ready());
        assert_eq!(p.take().len(), MAX_PER_SCAN);
        assert!(p.due().is_none());
    }
}
