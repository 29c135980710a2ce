//! `place`: the plan's placement rules ([place.NAME]) applied to processes as they start,
//! by bounded scans of /proc; once (`--once`), as a dry run, or until stopped. And the
//! placements the plan promises ([`expected`]), for `check` and `plan show`.

use super::slices::require_slice;
use super::Context;
use crate::place::pidfiles::{Pidfiles, ServiceMove};
use crate::place::rules::{Decision, Engine};
use crate::place::tree;
use bulkhead_cgroups::Placement;
use bulkhead_plan::place::Expected;
use bulkhead_plan::{Plan, SliceName};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::path::Path;
use std::time::Duration;

/// The largest plan file `place` reads as root.
const MAX_PLAN_BYTES: usize = 1 << 20;

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
    pub scans: u64,
    pub placed: u64,
    pub failed: u64,
}

/// The placements the plan promises (its services and rules, and the slices they place in): the hook
/// `bulkhead check` reads to say whether the database's processes are where they belong.
pub fn expected(cx: &Context) -> Result<Vec<Expected>> {
    Ok(bulkhead_plan::place::expected(&cx.load_plan()?))
}

/// Run the rules: scan, move what matches, report each through `on`, until `once`, a dry
/// run's one scan, or SIGINT/SIGTERM.
pub fn place(
    cx: &Context,
    req: &PlaceRequest,
    mut on: impl FnMut(&Placed),
) -> Result<PlaceSummary> {
    let plan = load_trusted_plan(cx)?;
    let chosen = cx.choose()?;
    // systemd attaches services itself (their Slice= drop-ins); elsewhere their pidfiles do.
    let services = if chosen.name() == "systemd" {
        Vec::new()
    } else {
        bulkhead_plan::services::with_pidfiles(&plan)
    };
    let mut pidfiles = Pidfiles::new(services);
    if plan.place.is_empty() && pidfiles.is_empty() {
        return Err(Error::invalid(
            Diagnostic::error("the plan has no placement rules (and no service with a pidfile to place without systemd)")
                .at(plan.source.label())
                .hint("add a [place.NAME] section: slice = \"db-helper\" and what to match (exe, cmdline, user, parent, unit); see docs/PLACEMENT.md"),
        ));
    }
    for e in bulkhead_plan::place::expected(&plan) {
        require_slice(cx, &chosen, &e.slice)?;
    }
    let mut engine = Engine::new(crate::place::rules::compile(&plan)?, req.recheck);
    let mut sum = PlaceSummary::default();
    let one_scan = req.once || req.dry_run;
    if !one_scan {
        bulkhead_sys::signals::catch_stop(&[libc::SIGINT, libc::SIGTERM]);
    }
    loop {
        let now = bulkhead_sys::procs::now_ticks().unwrap_or(0);
        let services = pidfiles.scan().into_iter();
        let placed = services
            .map(|m| carry_out_service(&chosen, m, req.dry_run))
            .chain(
                engine
                    .scan(now)
                    .into_iter()
                    .map(|d| carry_out(&chosen, d, req.dry_run)),
            );
        for p in placed {
            if p.error.is_some() {
                sum.failed += 1;
            } else {
                sum.placed += 1;
            }
            on(&p);
        }
        sum.scans += 1;
        if one_scan || bulkhead_sys::signals::stop_requested() {
            return Ok(sum);
        }
        std::thread::sleep(req.interval);
        if bulkhead_sys::signals::stop_requested() {
            return Ok(sum);
        }
    }
}

fn carry_out(chosen: &impl Placement, d: Decision, dry_run: bool) -> Placed {
    let r = if dry_run {
        Ok(())
    } else {
        chosen.move_pid(&d.slice, d.pid)
    };
    Placed {
        pid: d.pid,
        comm: d.comm,
        cmdline: d.cmdline,
        rule: d.rule,
        slice: d.slice,
        moved: r.is_ok() && !dry_run,
        descendants: Vec::new(),
        error: r.err(),
    }
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

/// As root, rules decide where every process of the host goes: the plan must be a file
/// only root can change (read through the descriptor that was checked).
fn load_trusted_plan(cx: &Context) -> Result<Plan> {
    let default = Path::new(bulkhead_plan::DEFAULT_PLAN_PATH);
    let path = match cx.config.as_deref() {
        Some(p) => p,
        None if default.exists() => default,
        None => return cx.load_plan(),
    };
    if !bulkhead_sys::process::is_root() {
        return Plan::load(Some(path));
    }
    use bulkhead_sys::trusted::{read_root_file, RootFileError};
    let text = read_root_file(path, MAX_PLAN_BYTES).map_err(|e| {
        let at = path.display().to_string();
        Error::invalid(match e {
            RootFileError::Untrusted(why) => Diagnostic::error(format!("refusing the plan file: it {why}"))
                .at(at)
                .hint("placement rules run as root and move any process: make the file root's and writable only by root (chown root: FILE; chmod go-w FILE)"),
            RootFileError::Io(err) => Diagnostic::error(format!("cannot read the plan file: {err}"))
                .at(at)
                .hint("-c names the plan file; it must be a regular file, not a symlink"),
        })
    })?;
    Plan::parse(&text, Some(path))
}
