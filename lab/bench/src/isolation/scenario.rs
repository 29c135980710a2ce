//! One run of one scenario: the setup's plan (or the guard), the hogs, the load generator
//! in its slice, samples every 250 ms (and the I/O path, and where the database's threads
//! block, for the I/O hogs), and what it all measured.

use super::db::{LoadShape, Server};
use super::diag::stacks::WaitSampler;
use super::figures::{Mark, RunData};
use super::group::Bench;
use super::guarded::GuardProc;
use super::hogs::{exit_text, HogSpec, Hogs};
use super::placed::PlaceProc;
use super::sampler::Sampler;
use super::{check_interrupt, HogKind, Load, Sc, Setup, STATIC_QUOTA};
use crate::LoadResult;
use bulkhead::plan::{CpuMax, CpuWeight, ResolvedPlan};
use bulkhead_sys::process::unix_now;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// What [`Bench::run_load`] measured.
struct LoadRun<'a> {
    load: LoadResult,
    sampler: Sampler<'a>,
    started: Instant,
    started_unix: f64,
    waits: Option<super::diag::stacks::Waits>,
    probe: Option<crate::exporter::ProbeStats>,
}

impl Bench<'_> {
    /// The plan a setup runs under (the helper at idle, or idle with a static quota).
    fn plan_for(&self, setup: Setup) -> Option<ResolvedPlan> {
        let change: fn(&mut bulkhead::plan::ResolvedSlice) = match setup {
            Setup::Idle => |s| s.cpu_weight = Some(CpuWeight::Idle),
            Setup::IdleQuota => |s| {
                s.cpu_weight = Some(CpuWeight::Idle);
                s.cpu_max = Some(CpuMax {
                    quota_us: (STATIC_QUOTA * 100_000.0) as u64,
                    period_us: 100_000,
                });
            },
            _ => return None,
        };
        let mut p = self.plan.clone();
        for s in &mut p.slices {
            if s.name() == &self.spec.helper {
                change(s);
            }
        }
        Some(p)
    }

    fn loadgen_command(
        &self,
        db: &Server,
        rate: Option<u64>,
        warmup: Duration,
        duration: Duration,
    ) -> Command {
        let s = self.spec;
        let shape = LoadShape {
            connections: s.connections,
            keys: s.keys,
            value_size: s.value_size,
            get_ratio: s.get_ratio,
        };
        db.load_command(
            &s.exe,
            &shape,
            rate,
            warmup,
            duration,
            &self.env.dir.join("pgbench-log"),
        )
    }

    /// Where the database's threads block, sampled during the measured window.
    fn wait_sampler(&self, warmup: Duration) -> Option<WaitSampler> {
        self.io_probe.as_ref()?;
        let fs = self.fs.clone();
        let server = self.spec.server.clone();
        Some(WaitSampler::start(
            Box::new(move || fs.pids(&server)),
            warmup,
            Duration::from_millis(40),
        ))
    }

    /// Run the load generator to its end, sampling the machine; (its report, the sampler,
    /// when it started, on the wall clock too, where the database blocked).
    fn run_load(
        &self,
        db: &Server,
        rate: Option<u64>,
        warmup: Duration,
        free: bool,
    ) -> Result<LoadRun<'_>, String> {
        db.before_run()?;
        let mut lg = self.loadgen_command(db, rate, warmup, self.spec.duration);
        let files = self.fs.procs_files(&self.loadgen);
        let slices = [
            self.spec.server.clone(),
            self.spec.helper.clone(),
            self.loadgen.clone(),
        ];
        let mut sampler = Sampler::new(&self.fs, db.pid(), slices);
        sampler.follow_io(self.io_probe.as_ref());
        if free {
            sampler.hog_in(PathBuf::from("free"));
        }
        sampler.take();
        let started = Instant::now();
        let started_unix = unix_now();
        let mut child = bulkhead_testkit::groups::spawn_joined(&mut lg, &files)
            .map_err(|e| format!("cannot start the load generator: {e}"))?;
        let waits = self.wait_sampler(warmup);
        let prober = self
            .exporter
            .as_ref()
            .map(|e| super::monitor::Prober::start(e.addr, warmup, self.spec.duration));
        let total = warmup + self.spec.duration;
        let status = loop {
            if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                break st;
            }
            if crate::stop::requested() || started.elapsed() > total + Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                check_interrupt()?;
                return Err("the load generator did not finish in time".into());
            }
            self.tick(started, total);
            sampler.take();
            std::thread::sleep(Duration::from_millis(250));
        };
        sampler.take();
        let waits = waits.map(WaitSampler::finish);
        let probe = prober.map(super::monitor::Prober::finish);
        let (out, err) = outputs(&mut child);
        if !status.success() {
            check_interrupt()?;
            return Err(failed("the load generator", status, &err));
        }
        let load: LoadResult = serde_json::from_str(&out)
            .map_err(|e| format!("cannot read the load generator's report: {e}: {out}"))?;
        Ok(LoadRun {
            load,
            sampler,
            started,
            started_unix,
            waits,
            probe,
        })
    }

    fn tick(&self, started: Instant, total: Duration) {
        if let Some(b) = &self.bar {
            let done = started.elapsed().min(total).as_secs();
            b.set_position(self.bar_base.get() + done);
        }
    }

    /// One run.
    pub fn scenario(&mut self, db: &mut Server, sc: &Sc) -> Result<RunData, String> {
        check_interrupt()?;
        let hog = if sc.bursty {
            "cpu-bursty"
        } else {
            sc.kind.name()
        };
        self.say(format!(
            "{hog} / {} / {} (round {})",
            sc.load.label(),
            sc.setup.name(),
            sc.round + 1
        ));
        let variant = self.plan_for(sc.setup);
        if let Some(p) = &variant {
            self.apply(p)?;
        }
        let result = self.scenario_in_plan(db, sc);
        if variant.is_some() {
            self.apply(&self.plan.clone())?;
        }
        if let Some(b) = &self.bar {
            self.bar_base
                .set(self.bar_base.get() + (self.spec.warmup + self.spec.duration).as_secs());
            b.set_position(self.bar_base.get());
        }
        result
    }

    fn hog_spec<'b>(&'b self, sc: &Sc<'b>, seconds: f64) -> HogSpec<'b> {
        HogSpec {
            kind: sc.kind,
            bursty: sc.bursty,
            seconds,
            data_dir: sc.data_dir,
            other_dir: self.other_dir.as_deref(),
            archive_bytes: self.spec.io.archive_bytes,
            host_memory: self.spec.host_memory,
            pg: self.pg_bin.as_deref().map(|b| (b, self.port)),
        }
    }

    fn scenario_in_plan(&mut self, db: &mut Server, sc: &Sc) -> Result<RunData, String> {
        let s = self.spec;
        let total = s.warmup + s.duration;
        let guard = match sc.setup {
            Setup::Guarded => Some(GuardProc::start(
                &self.guard_where(),
                &format!("{}-{}-{}", sc.kind.name(), sc.load.label(), sc.round),
                total + Duration::from_secs(60),
                false,
            )?),
            _ => None,
        };
        let place = match sc.setup {
            Setup::Placed => Some(PlaceProc::start(
                &s.bulkhead,
                &self.place_plan_file()?,
                &self.env.cgroup_root,
                &self.env.dir,
            )?),
            _ => None,
        };
        let hogs = match sc.setup {
            Setup::Baseline => None,
            setup => {
                let procs = if setup == Setup::Free {
                    self.free.clone()
                } else {
                    self.fs.procs_files(&s.helper)
                };
                let h = self.hog_spec(sc, total.as_secs_f64() + 3.0);
                let hogs = Hogs::start(&s.exe, &h, &procs)?;
                std::thread::sleep(Duration::from_millis(500));
                Some(hogs)
            }
        };
        let measured = self.run_load(db, sc.rate, s.warmup, sc.setup == Setup::Free);
        // The guard first: it thaws a frozen helper, which could not stop otherwise.
        let outcome = guard.map(GuardProc::stop).transpose();
        let (hog_work, hog_fate) = hogs.map_or((0.0, None), Hogs::finish);
        let placed = place.map(PlaceProc::stop);
        let outcome = outcome?;
        let m = measured?;
        let from = m.started + s.warmup;
        let window = m.sampler.window(from, from + s.duration);
        let io = m.sampler.io_window(from, from + s.duration).map(|mut w| {
            w.waits = m.waits.clone().unwrap_or_default();
            w.runq_threads = window.runq_threads;
            w
        });
        let window_unix = m.started_unix + s.warmup.as_secs_f64();
        let (guard_actions, guard_cost_percent) = match outcome {
            Some(o) => (
                o.actions
                    .iter()
                    .map(|a| Mark {
                        t: a.at - window_unix,
                        kind: a.kind.clone(),
                    })
                    .collect(),
                o.cost_cpu_percent,
            ),
            None => (vec![], None),
        };
        Ok(RunData {
            round: sc.round,
            load: m.load,
            offered: sc.rate.map(|r| r as f64),
            window,
            hog_work,
            hog_alone: None,
            db_died: db.exited().map(exit_text),
            hog_fate,
            guard_actions,
            guard_cost_percent,
            io,
            probe: m.probe,
            placed,
        })
    }

    /// The hog alone (free, the database idle) for as long as a run: what the helper gets
    /// when nothing protects anything, the yardstick of "protection, not starvation".
    pub fn hog_alone(&mut self, kind: HogKind, round: usize, dir: &Path) -> Result<f64, String> {
        check_interrupt()?;
        self.say(format!("{} alone (round {})", kind.name(), round + 1));
        let s = self.spec;
        let sc = Sc {
            kind,
            bursty: false,
            load: Load::Closed,
            setup: Setup::Free,
            round,
            rate: None,
            data_dir: dir,
        };
        let total = s.warmup + s.duration;
        let h = self.hog_spec(&sc, total.as_secs_f64());
        let hogs = Hogs::start(&s.exe, &h, &self.free)?;
        let start = Instant::now();
        while start.elapsed() < total {
            if crate::stop::requested() {
                break;
            }
            self.tick(start, total);
            std::thread::sleep(Duration::from_millis(200));
        }
        let (work, _) = hogs.finish();
        check_interrupt()?;
        if let Some(b) = &self.bar {
            self.bar_base.set(self.bar_base.get() + total.as_secs());
            b.set_position(self.bar_base.get());
        }
        Ok(work)
    }

    /// The guard's calibration: the load at `rate` with no hog, and the guard told to take
    /// a new baseline once the load runs; the guarded runs reuse it.
    pub fn calibrate(&mut self, db: &Server, rate: u64) -> Result<(), String> {
        let cal = self.spec.calibration;
        self.say(format!("calibrating the guard for {cal:?} at {rate} op/s"));
        let warm = Duration::from_secs(1);
        db.before_run()?;
        let mut lg = self.loadgen_command(db, Some(rate), warm, cal + Duration::from_secs(2));
        let files = self.fs.procs_files(&self.loadgen);
        let mut child = bulkhead_testkit::groups::spawn_joined(&mut lg, &files)
            .map_err(|e| format!("cannot start the load generator: {e}"))?;
        std::thread::sleep(warm);
        let g = GuardProc::start(
            &self.guard_where(),
            "calibration",
            cal + Duration::from_secs(60),
            true,
        );
        let st = child.wait().map_err(|e| e.to_string())?;
        g?.stop()?;
        if !st.success() {
            check_interrupt()?;
            let (_, err) = outputs(&mut child);
            return Err(failed(
                "the load generator (calibrating the guard)",
                st,
                &err,
            ));
        }
        Ok(())
    }
}

/// Why a child failed: how it ended (a signal says who may have sent it) and the last lines
/// it wrote, never an empty reason.
pub fn failed(who: &str, st: std::process::ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match st.signal() {
        Some(libc::SIGKILL) => {
            "was killed by SIGKILL (the OOM killer, or someone's kill -9)".to_string()
        }
        Some(libc::SIGINT) | Some(libc::SIGTERM) => format!(
            "was stopped by signal {} (Ctrl-C or a kill from outside the bench)",
            st.signal().unwrap_or(0)
        ),
        Some(s) => format!("was killed by signal {s}"),
        None => format!("exited with status {}", st.code().unwrap_or(-1)),
    };
    let lines: Vec<&str> = stderr.trim().lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join("\n");
    if tail.is_empty() {
        format!("{who} {how} and printed no error")
    } else {
        format!("{who} {how}: {tail}")
    }
}

fn outputs(child: &mut Child) -> (String, String) {
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    (out, err)
}
