//! One run of one scenario: the setup's plan (or the guard), the hogs, the load generator
//! in its slice, samples every 250 ms, and what it all measured.

use super::figures::{Mark, RunData};
use super::group::Bench;
use super::guarded::GuardProc;
use super::hogs::{exit_text, HogSpec, Hogs};
use super::sampler::Sampler;
use super::{check_interrupt, HogKind, Load, Setup, STATIC_QUOTA};
use crate::redis::Redis;
use crate::LoadResult;
use bulkhead::plan::{CpuMax, CpuWeight, ResolvedPlan};
use bulkhead::sys::process::unix_now;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to run.
pub struct Sc<'a> {
    pub kind: HogKind,
    pub bursty: bool,
    pub load: Load,
    pub setup: Setup,
    pub round: usize,
    /// ops/s for an open load.
    pub rate: Option<u64>,
    pub data_dir: &'a Path,
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
        redis: &Redis,
        rate: Option<u64>,
        warmup: Duration,
        duration: Duration,
    ) -> Command {
        let s = self.spec;
        let mut lg = Command::new(&s.exe);
        lg.args(["loadgen", "--addr", &redis.addr.to_string()])
            .args(["--connections", &s.connections.to_string()])
            .args(["--warmup", &format!("{}ms", warmup.as_millis())])
            .args(["--duration", &format!("{}ms", duration.as_millis())])
            .args([
                "--keys",
                &s.keys.to_string(),
                "--value-size",
                &s.value_size.to_string(),
            ])
            .args(["--get-ratio", &s.get_ratio.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(r) = rate {
            lg.args(["--rate", &r.to_string()]);
        }
        lg
    }

    /// Run the load generator to its end, sampling the machine; (its report, the sampler,
    /// when it started, on the wall clock too).
    fn run_load(
        &self,
        redis: &Redis,
        rate: Option<u64>,
        warmup: Duration,
        free: bool,
    ) -> Result<(LoadResult, Sampler<'_>, Instant, f64), String> {
        let mut lg = self.loadgen_command(redis, rate, warmup, self.spec.duration);
        let files = self.fs.procs_files(&self.loadgen);
        let slices = [
            self.spec.server.clone(),
            self.spec.helper.clone(),
            self.loadgen.clone(),
        ];
        let mut sampler = Sampler::new(&self.fs, redis.pid, slices);
        if free {
            sampler.hog_in(PathBuf::from("free"));
        }
        sampler.take();
        let started = Instant::now();
        let started_unix = unix_now();
        let mut child = bulkhead::run::spawn_joined(&mut lg, &files)
            .map_err(|e| format!("cannot start the load generator: {e}"))?;
        let total = warmup + self.spec.duration;
        let status = loop {
            if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                break st;
            }
            if crate::stop::requested() || started.elapsed() > total + Duration::from_secs(30) {
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
        let (out, err) = outputs(&mut child);
        if !status.success() {
            return Err(format!("the load generator failed: {}", err.trim()));
        }
        let load: LoadResult = serde_json::from_str(&out)
            .map_err(|e| format!("cannot read the load generator's report: {e}: {out}"))?;
        Ok((load, sampler, started, started_unix))
    }

    fn tick(&self, started: Instant, total: Duration) {
        if let Some(b) = &self.bar {
            let done = started.elapsed().min(total).as_secs();
            b.set_position(self.bar_base.get() + done);
        }
    }

    /// One run.
    pub fn scenario(&mut self, redis: &mut Redis, sc: &Sc) -> Result<RunData, String> {
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
        let result = self.scenario_in_plan(redis, sc);
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

    fn scenario_in_plan(&mut self, redis: &mut Redis, sc: &Sc) -> Result<RunData, String> {
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
        let hogs = match sc.setup {
            Setup::Baseline => None,
            setup => {
                let procs = if setup == Setup::Free {
                    self.free.clone()
                } else {
                    self.fs.procs_files(&s.helper)
                };
                let h = HogSpec {
                    kind: sc.kind,
                    bursty: sc.bursty,
                    seconds: total.as_secs_f64() + 3.0,
                    data_dir: sc.data_dir,
                    host_memory: s.host_memory,
                };
                let hogs = Hogs::start(&s.exe, &h, &procs)?;
                std::thread::sleep(Duration::from_millis(500));
                Some(hogs)
            }
        };
        let measured = self.run_load(redis, sc.rate, s.warmup, sc.setup == Setup::Free);
        let (hog_work, hog_fate) = hogs.map_or((0.0, None), Hogs::finish);
        let outcome = guard.map(GuardProc::stop).transpose()?;
        let (load, sampler, started, started_unix) = measured?;
        let from = started + s.warmup;
        let window = sampler.window(from, from + s.duration);
        let window_unix = started_unix + s.warmup.as_secs_f64();
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
            load,
            offered: sc.rate.map(|r| r as f64),
            window,
            hog_work,
            db_died: redis.exited().map(exit_text),
            hog_fate,
            guard_actions,
            guard_cost_percent,
        })
    }

    /// The guard's calibration: the load at `rate` with no hog, and the guard told to take
    /// a new baseline once the load runs; the guarded runs reuse it.
    pub fn calibrate(&mut self, redis: &Redis, rate: u64) -> Result<(), String> {
        let cal = self.spec.calibration;
        self.say(format!("calibrating the guard for {cal:?} at {rate} op/s"));
        let warm = Duration::from_secs(1);
        let mut lg = self.loadgen_command(redis, Some(rate), warm, cal + Duration::from_secs(2));
        let files = self.fs.procs_files(&self.loadgen);
        let mut child = bulkhead::run::spawn_joined(&mut lg, &files)
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
            let (_, err) = outputs(&mut child);
            return Err(format!(
                "the load generator failed during calibration: {}",
                err.trim()
            ));
        }
        Ok(())
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
