//! `bulkhead guard`: a feedback controller that keeps the plan's protected slice at full
//! speed next to its sideloads, for the plan's `[guard]` section.
//!
//! - [`signals`]: what it reads each period (PSI, run-queue waits, CPU and I/O use, steal).
//! - [`probe`]: an optional TCP or Redis round trip to the service itself.
//! - [`control`]: the decisions, a pure function of the readings (cut fast, release slowly).
//! - [`levers`]: the decisions made real through the chosen backend, re-asserted each second.
//! - [`state`]: status for `bulkhead status`, the holds record, calibration, the action log.
//! - [`mod@release`]: putting the plan back after a guard is gone (watchdog, `--release`).
//! - [`run`]: the loop that ties them together.

pub mod control;
pub mod levers;
pub mod probe;
pub mod release;
mod run;
pub mod signals;
pub mod state;

pub use release::{release, watchdog, Released, WatchdogEnd};
pub use run::{run, Event, Summary};

use crate::context::Context;
use bulkhead_cgroups::{Chosen, Placement, Throttle};
use bulkhead_plan::guard::GuardSpec;
use bulkhead_plan::{CpuWeight, ResolvedPlan};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::Host;
use control::Settings;
use levers::Levers;
use std::path::PathBuf;

/// The least I/O bandwidth a throttled sideload keeps (read and write, each disk).
pub const IO_FLOOR: u64 = 8 << 20;

/// What the user asked for.
#[derive(Debug, Clone, Default)]
pub struct GuardRequest {
    /// `--log FILE`: every action as a JSON line.
    pub log: Option<PathBuf>,
    /// Calibrate even when a calibration of this `[guard]` from this boot exists.
    pub recalibrate: bool,
    /// Stop after this long (benchmarks, tests); `None`: until a signal.
    pub duration: Option<std::time::Duration>,
}

/// A guard ready to run: the plan, the backend and what it can do here.
pub struct Guard {
    pub cx: Context,
    pub spec: GuardSpec,
    pub resolved: ResolvedPlan,
    pub levers: Levers,
    pub settings: Settings,
    /// Findings for people (what this host cannot do, and what takes its place).
    pub notes: Vec<Diagnostic>,
}

/// Check the plan's `[guard]` against the host and the slices that exist.
pub fn prepare(cx: &Context) -> Result<Guard> {
    let plan = cx.load_plan()?;
    let Some(spec) = plan.guard.clone() else {
        return Err(Error::invalid(
            Diagnostic::error(format!("the plan ({}) has no [guard] section", plan.source.label()))
                .hint("add one: [guard] with protect = \"db-server\" and sideloads = [\"db-helper\"] (see docs/GUARD.md)"),
        ));
    };
    let resolved = plan.resolve(&Host::detect_for(plan.device_paths()))?;
    let mut chosen = cx.choose()?;
    chosen.keep_caps();
    check_slices_exist(&chosen, &spec)?;
    let slices = spec
        .sideloads
        .iter()
        .map(|s| {
            resolved
                .slice(s)
                .cloned()
                .expect("the plan checks its sideloads")
        })
        .collect();
    let disks = bulkhead_sys::host::disks();
    let mut notes = Vec::new();
    let settings = settings(&spec, &chosen, &disks, &mut notes);
    Ok(Guard {
        cx: cx.clone(),
        spec,
        resolved,
        levers: Levers::new(chosen, slices, disks),
        settings,
        notes,
    })
}

fn check_slices_exist(chosen: &Chosen, spec: &GuardSpec) -> Result<()> {
    let missing: Vec<String> = std::iter::once(&spec.protect)
        .chain(&spec.sideloads)
        .filter(|s| !chosen.slice_exists(s))
        .map(|s| s.to_string())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::invalid(
        Diagnostic::error(format!(
            "the guard's slices do not exist yet: {}",
            missing.join(", ")
        ))
        .hint("create them first: bulkhead apply"),
    ))
}

/// The controller's settings, from `[guard]` and what this host can do.
fn settings(
    spec: &GuardSpec,
    chosen: &Chosen,
    disks: &[bulkhead_sys::host::DevNum],
    notes: &mut Vec<Diagnostic>,
) -> Settings {
    let reader = chosen.reader();
    let can_idle = chosen.can_idle();
    let can_freeze = spec.sideloads.iter().all(|s| reader.freezer(s).is_some());
    let can_io = reader.layout.hierarchy("io").is_some() && !disks.is_empty();
    let say = |notes: &mut Vec<Diagnostic>, what: &str, instead: &str| {
        notes.push(Diagnostic::warning(format!("{what}; {instead}")));
    };
    if !can_idle {
        say(notes, "this host has no idle scheduling for slices (cpu.idle, Linux 5.15; CPUWeight=idle, systemd 250)", "the guard cuts CPU quota only");
    }
    if !can_freeze {
        say(
            notes,
            "no freezer is available for the sideloads (cgroup.freeze or the v1 freezer)",
            "the guard holds them at their CPU floor instead of freezing them",
        );
    }
    if !can_io {
        say(
            notes,
            "no I/O controller (or no disk) is available",
            "the guard cannot limit the sideloads' I/O",
        );
    }
    let no_wait: Vec<String> = spec
        .sideloads
        .iter()
        .filter(|s| signals::pressure(reader, s, "cpu.pressure").is_none())
        .map(|s| s.unit())
        .collect();
    let cpu_keep = spec.cpu_keep.filter(|_| no_wait.is_empty());
    if spec.cpu_keep.is_some() && cpu_keep.is_none() {
        say(
            notes,
            &format!("cpu_keep is not in force: no CPU pressure (cpu.pressure on the unified hierarchy) for {}, so a starved sideload cannot be told from an idle one", no_wait.join(", ")),
            "the guard gives no progress floor on CPU (boot with psi=1 on a kernel with CONFIG_PSI, and a unified hierarchy)",
        );
    }
    Settings {
        period: spec.period,
        cpus: Host::detect().cpu_count() as f64,
        cpu_floor: spec.cpu_floor,
        quota_period_us: spec.quota_period.as_micros() as u64,
        max_frozen: spec.max_frozen,
        stall: spec.stall,
        io_floor: IO_FLOOR,
        io_keep: spec.io_keep,
        cpu_keep,
        keep_after: spec.keep_after,
        can_idle,
        can_freeze,
        can_io,
    }
}

impl Guard {
    /// `--dry-run`: what the guard would read and what it would write at its strongest cut
    /// and at release, without changing anything.
    pub fn describe(&self) -> Result<Vec<String>> {
        let s = &self.settings;
        let sources = signals::Sources::new(
            self.levers.chosen.reader().clone(),
            self.spec.protect.clone(),
            self.spec.sideloads.clone(),
        );
        let mut out = vec![
            format!(
                "guard: protect {} from {}, every {:?} (calibration {:?} with the sideloads held)",
                self.spec.protect.unit(),
                self.spec
                    .sideloads
                    .iter()
                    .map(|s| s.unit())
                    .collect::<Vec<_>>()
                    .join(", "),
                s.period,
                self.spec.calibration
            ),
            format!("backend: {}", self.levers.chosen.layout_line()),
        ];
        for (name, p) in ["cpu", "io", "memory"].iter().zip(&sources.psi) {
            out.push(match p {
                Some(p) => format!(
                    "reads {} ({name} stall, {})",
                    p.display(),
                    match run::try_trigger(p) {
                        Ok(()) => "with a PSI trigger: tried now, this kernel takes it".to_string(),
                        Err(e) => format!(
                            "every period: a PSI trigger was tried now and refused ({e}), as the run would be"
                        ),
                    }
                ),
                None => format!(
                    "no {name} pressure file for {}: {}",
                    self.spec.protect,
                    if *name == "cpu" {
                        "its threads' run-queue waits stand in"
                    } else {
                        "this signal is not used"
                    }
                ),
            });
        }
        if let Some(p) = &self.spec.probe {
            let what = match p {
                bulkhead_plan::guard::Probe::Tcp(_) => "connect time",
                bulkhead_plan::guard::Probe::Redis(_) => "PING round trip",
            };
            out.push(format!("probes {p} ({what}) once a period"));
        }
        if let Some(k) = s.cpu_keep {
            out.push(format!(
                "progress floor on CPU: a sideload waiting for a CPU while it runs less than {:.0}% of one for {:?} is lifted out of idle to CPUWeight={} with CPUQuota={:.0}% (cpu_keep)",
                k * 100.0,
                s.keep_after,
                bulkhead_cgroups::LIFTED_WEIGHT,
                k * 100.0
            ));
        }
        let full = Throttle {
            cpu: Some(s.cpu_floor),
            period_us: s.quota_period_us,
            idle: s.can_idle,
            frozen: s.can_freeze,
            lifted: false,
            io_bps: s.can_io.then_some(IO_FLOOR),
        };
        for (i, name) in self.spec.sideloads.iter().enumerate() {
            out.push(format!(
                "# {}: strongest cut ({})",
                name.unit(),
                full.describe()
            ));
            out.extend(self.levers.plan(i, &full)?.iter().map(|o| o.to_string()));
            let planned = self.levers.slices[i].cpu_weight == Some(CpuWeight::Idle);
            out.push(format!(
                "# {}: release puts back the plan's values{}",
                name.unit(),
                if planned {
                    " (CPUWeight=idle stays: the plan has it)"
                } else {
                    ""
                }
            ));
        }
        Ok(out)
    }
}

/// The guard's status, when one runs or ran since boot (for `bulkhead status`), with
/// whether its process is alive.
pub fn status() -> Option<(state::Status, bool)> {
    let s = state::read_status()?;
    let alive = s.phase != "stopped" && bulkhead_sys::process::alive(s.pid);
    Some((s, alive))
}
