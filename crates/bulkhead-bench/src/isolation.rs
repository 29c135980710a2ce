//! `bulkhead bench isolation`: the seeds' slice experiment with a real database. Redis runs in
//! the plan's server slice, a load generator in its own slice, and for each hog (cpu, io,
//! memory) three scenarios run: baseline (no hog), free (the hog in a plain cgroup outside
//! any bulkhead slice) and confined (the hog in the helper slice). The CPU hog also runs
//! under helper weights 100 and idle, reporting the hog's own progress in each.

use crate::env::Env;
use crate::hog::HogReport;
use crate::redis::{self, Redis};
use crate::LoadResult;
use bulkhead::cgroup::{Backend, CgroupFs};
use bulkhead::plan::{CpuWeight, Plan, ResolvedPlan, SliceName};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HogKind {
    Cpu,
    Io,
    Memory,
}

impl HogKind {
    pub fn parse(s: &str) -> Result<HogKind, String> {
        match s.trim() {
            "cpu" => Ok(HogKind::Cpu),
            "io" => Ok(HogKind::Io),
            "memory" | "mem" => Ok(HogKind::Memory),
            other => Err(format!(
                "unknown hog '{other}' (choose from cpu, io, memory)"
            )),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            HogKind::Cpu => "cpu",
            HogKind::Io => "io",
            HogKind::Memory => "memory",
        }
    }
}

pub struct Spec {
    pub hogs: Vec<HogKind>,
    pub warmup: Duration,
    pub duration: Duration,
    pub connections: usize,
    pub rate: Option<u64>,
    pub keys: u64,
    pub value_size: usize,
    pub get_ratio: f64,
    pub plan: ResolvedPlan,
    pub server: SliceName,
    pub helper: SliceName,
    /// The memory of the "small host" the memory scenarios run in.
    pub host_memory: u64,
    pub port: Option<u16>,
    /// The bulkhead binary (runs the hogs and the load generator as separate processes).
    pub exe: PathBuf,
    pub progress: bool,
    /// Rounds; each runs every scenario of a hog once, in rotated order.
    pub repeat: usize,
}

/// Where a hog runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    None,
    Free,
    Confined,
}

/// One round of one scenario, with its ratios to the same round's baseline.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Round {
    pub op_rate: f64,
    pub p99_ms: f64,
    pub op_rate_ratio: f64,
    pub p99_ratio: f64,
    /// The hogs' summed work rate (CPU, I/O) or MiB held (memory).
    pub hog_work: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scenario {
    pub hog: String,
    /// baseline, free, confined, "confined (helper CPUWeight=100)", ...
    pub name: String,
    pub placement: Placement,
    /// The round with the median op rate (its full latency profile).
    pub load: LoadResult,
    /// Every round; the summary's figures are medians over them.
    #[serde(default)]
    pub rounds: Vec<Round>,
    #[serde(default)]
    pub median_op_rate_ratio: f64,
    #[serde(default)]
    pub median_p99_ratio: f64,
    pub hogs: Vec<HogReport>,
    /// The database was OOM-killed (or died) during the scenario.
    pub db_died: Option<String>,
    /// What happened to the hog when it did not end by itself (e.g. OOM-killed in its slice).
    pub hog_fate: Option<String>,
    /// CPU use over the scenario, percent of one CPU, of the database's and the load
    /// generator's slices (read from the cgroups).
    #[serde(default)]
    pub server_cpu_percent: Option<f64>,
    #[serde(default)]
    pub loadgen_cpu_percent: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub machine: Machine,
    pub settings: serde_json::Value,
    pub database: String,
    pub load_generator: String,
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub memory: u64,
    pub kernel: String,
    pub cgroups: String,
}

fn check_interrupt() -> Result<(), String> {
    if crate::stop::requested() {
        return Err("interrupted: everything the bench started was stopped and removed".into());
    }
    Ok(())
}

/// Check everything a user can get wrong, before anything starts.
pub fn validate(spec: &Spec) -> Result<(), String> {
    if spec.hogs.is_empty() {
        return Err("--hog needs at least one of cpu, io, memory".into());
    }
    if spec.duration.is_zero() {
        return Err("--duration must be above zero".into());
    }
    if spec.rate == Some(0) {
        return Err("--rate must be above zero (leave it out for a closed loop)".into());
    }
    if spec.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    if spec.keys == 0 {
        return Err("--keys must be at least 1".into());
    }
    for s in [&spec.server, &spec.helper] {
        if spec.plan.slice(s).is_none() {
            return Err(format!(
                "the plan ({}) has no slice '{s}', which the bench needs; name the slices with --server-slice and --helper-slice",
                spec.plan.source
            ));
        }
    }
    if !bulkhead::sys::process::is_root() {
        return Err("the bench creates cgroups, a loop device and mounts: run it as root".into());
    }
    if redis::find_server().is_none() {
        return Err("redis-server is not installed: apt-get install redis-server".into());
    }
    if let Some(p) = spec.port {
        if redis::port_busy(p) {
            return Err(format!(
                "port {p} on 127.0.0.1 is busy; pick another with --port"
            ));
        }
    }
    if spec.hogs.contains(&HogKind::Io) {
        for tool in ["losetup", "mkfs.ext4", "mount", "umount"] {
            if !["/sbin", "/usr/sbin", "/bin", "/usr/bin"]
                .iter()
                .any(|d| Path::new(d).join(tool).exists())
            {
                return Err(format!(
                    "the I/O scenario needs {tool} (apt-get install util-linux e2fsprogs mount)"
                ));
            }
        }
    }
    Ok(())
}

struct Run<'a> {
    spec: &'a Spec,
    env: Env,
    fs: CgroupFs,
    plan: ResolvedPlan,
    loadgen: SliceName,
    free: Vec<PathBuf>,
    bar: Option<indicatif::ProgressBar>,
}

/// Hogs that are killed when dropped, so no error path leaves one running.
struct Hogs(Vec<Child>);

impl Drop for Hogs {
    fn drop(&mut self) {
        for h in &mut self.0 {
            kill_wait(h, Duration::from_secs(1));
        }
    }
}

fn kill_wait(c: &mut Child, grace: Duration) -> Option<std::process::ExitStatus> {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = c.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    c.wait().ok()
}

fn exit_text(st: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (_, Some(9)) => "killed by SIGKILL (the kernel's OOM killer)".into(),
        (_, Some(s)) => format!("killed by signal {s}"),
        (Some(c), _) => format!("exited with status {c}"),
        _ => "ended".into(),
    }
}

impl Run<'_> {
    fn apply(&self, plan: &ResolvedPlan) -> Result<(), String> {
        let changes = self
            .fs
            .plan_apply(plan, Default::default())
            .map_err(|e| e.to_string())?;
        self.fs.execute(&changes).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn procs(&self, slice: &SliceName) -> Vec<PathBuf> {
        self.fs.procs_files(slice)
    }

    fn say(&self, msg: String) {
        match &self.bar {
            Some(b) => b.set_message(msg),
            None if self.spec.progress => eprintln!("{msg}"),
            None => {}
        }
    }

    fn start_redis(&self, dir: &Path, aof: bool) -> Result<Redis, String> {
        let port = match self.spec.port {
            Some(p) => p,
            None => redis::free_port().map_err(|e| e.to_string())?,
        };
        let files = self.procs(&self.spec.server);
        let r = Redis::start(&redis::Options {
            port,
            dir,
            aof_always: aof,
            procs_files: &files,
        })?;
        self.say(format!(
            "loading {} keys of {} bytes into redis",
            self.spec.keys, self.spec.value_size
        ));
        crate::loadgen::preload(r.addr, self.spec.keys, self.spec.value_size)?;
        Ok(r)
    }

    fn hog_commands(&self, kind: HogKind, data_dir: &Path, seconds: f64) -> Vec<Command> {
        let exe = &self.spec.exe;
        let secs = format!("{seconds:.1}");
        match kind {
            HogKind::Cpu => (0..bulkhead::host::Host::detect().cpu_count())
                .map(|cpu| {
                    let mut c = Command::new(exe);
                    c.args(["hog", "cpu", "--pin", &cpu.to_string(), "--seconds", &secs]);
                    c
                })
                .collect(),
            HogKind::Io => {
                let mut c = Command::new(exe);
                c.args(["hog", "io", "--size", "512M", "--seconds", &secs, "--dir"])
                    .arg(data_dir);
                vec![c]
            }
            HogKind::Memory => {
                let mut c = Command::new(exe);
                let max = (self.spec.host_memory * 2).to_string();
                c.args([
                    "hog",
                    "memory",
                    "--max",
                    &max,
                    "--step",
                    "67108864",
                    "--seconds",
                    &secs,
                    "--dir",
                ])
                .arg(data_dir);
                vec![c]
            }
        }
    }

    fn scenario(
        &mut self,
        redis: &mut Redis,
        kind: HogKind,
        name: &str,
        placement: Placement,
        data_dir: &Path,
    ) -> Result<Scenario, String> {
        check_interrupt()?;
        self.say(format!("{} / {name}", kind.name()));
        let total = self.spec.warmup + self.spec.duration;
        let hog_secs = total.as_secs_f64() + 3.0;
        let mut hogs = Hogs(Vec::new());
        let target = match placement {
            Placement::None => None,
            Placement::Free => Some(self.free.clone()),
            Placement::Confined => Some(self.procs(&self.spec.helper)),
        };
        if let Some(files) = &target {
            for mut c in self.hog_commands(kind, data_dir, hog_secs) {
                c.stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null());
                hogs.0.push(
                    bulkhead::run::spawn_joined(&mut c, files)
                        .map_err(|e| format!("cannot start the {} hog: {e}", kind.name()))?,
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let mut lg = Command::new(&self.spec.exe);
        lg.args(["loadgen", "--addr", &redis.addr.to_string()])
            .args(["--connections", &self.spec.connections.to_string()])
            .args(["--warmup", &format!("{}ms", self.spec.warmup.as_millis())])
            .args([
                "--duration",
                &format!("{}ms", self.spec.duration.as_millis()),
            ])
            .args([
                "--keys",
                &self.spec.keys.to_string(),
                "--value-size",
                &self.spec.value_size.to_string(),
            ])
            .args(["--get-ratio", &self.spec.get_ratio.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(r) = self.spec.rate {
            lg.args(["--rate", &r.to_string()]);
        }
        let loadgen_files = self.procs(&self.loadgen);
        let cpu_of = |s: &SliceName| bulkhead::metrics::read_slice(&self.fs, s).cpu_usage_us;
        let cpu0 = (
            cpu_of(&self.spec.server),
            cpu_of(&self.loadgen),
            Instant::now(),
        );
        let mut child = bulkhead::run::spawn_joined(&mut lg, &loadgen_files)
            .map_err(|e| format!("cannot start the load generator: {e}"))?;
        let started = Instant::now();
        let base = self.bar.as_ref().map_or(0, |b| b.position());
        let status = loop {
            if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                break st;
            }
            if crate::stop::requested() || started.elapsed() > total + Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                drop(hogs);
                check_interrupt()?;
                return Err("the load generator did not finish in time".into());
            }
            if let Some(b) = &self.bar {
                b.set_position(base + started.elapsed().as_secs().min(total.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if let Some(b) = &self.bar {
            b.set_position(base + total.as_secs());
        }
        let mut out = String::new();
        let mut err = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).ok();
        child.stderr.take().unwrap().read_to_string(&mut err).ok();
        // Stop the hogs and read what they did.
        let mut reports = Vec::new();
        let mut fate = None;
        for mut h in std::mem::take(&mut hogs.0) {
            let st = kill_wait(&mut h, Duration::from_secs(3));
            let mut text = String::new();
            h.stdout.take().unwrap().read_to_string(&mut text).ok();
            let last_json = text
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str::<HogReport>(l).ok());
            match last_json {
                Some(r) => reports.push(r),
                None => {
                    // It died: its last progress line says how far it got.
                    let got = text
                        .lines()
                        .rev()
                        .find_map(|l| {
                            l.strip_prefix("progress ")
                                .and_then(|v| v.trim().parse::<f64>().ok())
                        })
                        .unwrap_or(0.0);
                    reports.push(HogReport {
                        kind: kind.name().into(),
                        work: got,
                        unit: "MiB".into(),
                        ..Default::default()
                    });
                    fate = Some(st.map_or("died".into(), exit_text));
                }
            }
        }
        let db_died = redis.exited().map(exit_text);
        let secs = cpu0.2.elapsed().as_secs_f64();
        let pct = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?) as f64 / 1e4 / secs);
        let server_cpu_percent = pct(cpu0.0, cpu_of(&self.spec.server));
        let loadgen_cpu_percent = pct(cpu0.1, cpu_of(&self.loadgen));
        if !status.success() {
            return Err(format!("the load generator failed: {}", err.trim()));
        }
        let load: LoadResult = serde_json::from_str(&out)
            .map_err(|e| format!("cannot read the load generator's report: {e}: {out}"))?;
        Ok(Scenario {
            hog: kind.name().into(),
            name: name.into(),
            placement,
            load,
            rounds: vec![],
            median_op_rate_ratio: f64::NAN,
            median_p99_ratio: f64::NAN,
            hogs: reports,
            db_died,
            hog_fate: fate,
            server_cpu_percent,
            loadgen_cpu_percent,
        })
    }

    fn with_helper_weight(&self, w: CpuWeight) -> ResolvedPlan {
        let mut p = self.plan.clone();
        for s in &mut p.slices {
            if s.name() == &self.spec.helper {
                s.cpu_weight = Some(w);
            }
        }
        p
    }

    fn group(&mut self, kind: HogKind, out: &mut Vec<Scenario>) -> Result<(), String> {
        let (data_dir, aof) = match kind {
            HogKind::Io => {
                self.say(
                    "making a loop-backed ext4 with the BFQ scheduler for redis's data".into(),
                );
                let (m, _) = self.env.loop_fs(3 << 30)?;
                (m, true)
            }
            _ => (self.env.scratch()?, false),
        };
        if kind == HogKind::Memory {
            self.env.limit_memory(Some(self.spec.host_memory))?;
        }
        let result = (|| -> Result<(), String> {
            let mut redis = self.start_redis(&data_dir, aof)?;
            let mut scenarios: Vec<(String, Placement, Option<CpuWeight>)> = vec![
                ("baseline".into(), Placement::None, None),
                ("free".into(), Placement::Free, None),
                ("confined".into(), Placement::Confined, None),
            ];
            if kind == HogKind::Cpu {
                let current = self
                    .plan
                    .slice(&self.spec.helper)
                    .and_then(|s| s.cpu_weight);
                for w in [
                    CpuWeight::Weight(10),
                    CpuWeight::Weight(100),
                    CpuWeight::Idle,
                ] {
                    if Some(w) != current {
                        let label = match w {
                            CpuWeight::Weight(n) => n.to_string(),
                            CpuWeight::Idle => "idle".into(),
                        };
                        scenarios.push((
                            format!("confined, helper CPUWeight={label}"),
                            Placement::Confined,
                            Some(w),
                        ));
                    }
                }
            }
            let n = scenarios.len();
            let mut runs: Vec<Vec<Scenario>> = vec![Vec::new(); n];
            for round in 0..self.spec.repeat.max(1) {
                for k in 0..n {
                    let i = (k + round) % n;
                    let (name, placement, weight) = scenarios[i].clone();
                    if let Some(w) = weight {
                        self.apply(&self.with_helper_weight(w))?;
                    }
                    let s = self.scenario(&mut redis, kind, &name, placement, &data_dir);
                    if weight.is_some() {
                        self.apply(&self.plan.clone())?;
                    }
                    let s = s?;
                    let died = s.db_died.is_some();
                    runs[i].push(s);
                    if died {
                        self.say("redis died; restarting it for the next scenario".into());
                        redis = self.start_redis(&data_dir, aof)?;
                    }
                }
            }
            redis.stop();
            out.extend(combine(runs));
            Ok(())
        })();
        if kind == HogKind::Memory {
            let _ = self.env.limit_memory(None);
        }
        if kind == HogKind::Io {
            self.env.drop_loop_fs();
        }
        result
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Fold the rounds of every scenario (index 0 is the baseline) into one result each, with
/// ratios paired round by round against the same round's baseline.
fn combine(runs: Vec<Vec<Scenario>>) -> Vec<Scenario> {
    let base: Vec<(f64, f64)> = runs[0]
        .iter()
        .map(|s| (s.load.op_rate, s.load.latency.p99_ms))
        .collect();
    runs.into_iter()
        .map(|rs| {
            let rounds: Vec<Round> = rs
                .iter()
                .enumerate()
                .map(|(r, s)| {
                    let (b_rate, b_p99) = base.get(r).copied().unwrap_or((f64::NAN, f64::NAN));
                    Round {
                        op_rate: s.load.op_rate,
                        p99_ms: s.load.latency.p99_ms,
                        op_rate_ratio: s.load.op_rate / b_rate,
                        p99_ratio: s.load.latency.p99_ms / b_p99,
                        hog_work: hog_work(&s.hogs),
                    }
                })
                .collect();
            let mut by_rate: Vec<&Scenario> = rs.iter().collect();
            by_rate.sort_by(|a, b| a.load.op_rate.total_cmp(&b.load.op_rate));
            let mid = by_rate[by_rate.len() / 2].clone();
            let db_died = rs.iter().find_map(|s| s.db_died.clone());
            let hog_fate = rs.iter().find_map(|s| s.hog_fate.clone());
            Scenario {
                median_op_rate_ratio: median(
                    &mut rounds.iter().map(|r| r.op_rate_ratio).collect::<Vec<_>>(),
                ),
                median_p99_ratio: median(
                    &mut rounds.iter().map(|r| r.p99_ratio).collect::<Vec<_>>(),
                ),
                rounds,
                db_died,
                hog_fate,
                ..mid
            }
        })
        .collect()
}

/// The hogs' summed work rate, or for memory hogs the MiB they held.
pub fn hog_work(h: &[HogReport]) -> f64 {
    if h.first().is_some_and(|h| h.kind == "memory") {
        h.iter().map(|h| h.work).sum()
    } else {
        h.iter().map(|h| h.rate).sum()
    }
}

/// Run the whole benchmark. Everything it creates is removed before it returns.
pub fn run(spec: &Spec) -> Result<Report, String> {
    validate(spec)?;
    let stale = crate::env::clean_stale();
    if !stale.is_empty() && spec.progress {
        eprintln!("bench: removed what earlier benchmark runs {stale:?} left behind");
    }
    crate::stop::install_handler();
    let env = Env::create()?;
    let fs = CgroupFs::new(env.layout.clone(), &env.cgroup_root).map_err(|e| e.to_string())?;
    // The user's plan plus a slice for the load generator, so its CPU use is accounted for.
    let host = bulkhead::host::Host::detect();
    let mut plan = spec.plan.clone();
    let loadgen = SliceName::parse("loadgen").unwrap();
    if plan.slice(&loadgen).is_none() {
        let extra = Plan::parse(
            // The client stands in for a remote one (the seeds' client ran on another
            // machine): the highest CPU weight, so hogs on the database host never starve it.
            "[slice.loadgen]\nDescription = \"bulkhead's load generator\"\nCPUWeight = 10000\n",
            None,
        )
        .and_then(|p| p.resolve(&host))
        .map_err(|e| e.to_string())?;
        plan.slices.extend(extra.slices);
    }
    let total_secs: u64 = spec
        .hogs
        .iter()
        .map(|h| if *h == HogKind::Cpu { 5 } else { 3 })
        .sum::<u64>()
        * (spec.warmup + spec.duration).as_secs()
        * spec.repeat.max(1) as u64;
    let bar = spec.progress.then(|| {
        let b = indicatif::ProgressBar::new(total_secs);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len}s  {msg}",
            )
            .unwrap()
            .progress_chars("=> "),
        );
        b.enable_steady_tick(Duration::from_millis(200));
        b
    });
    let mut run = Run {
        spec,
        free: env.plain_cgroup("free")?,
        env,
        fs,
        plan,
        loadgen,
        bar,
    };
    run.apply(&run.plan.clone())?;
    let mut scenarios = Vec::new();
    let mut result = Ok(());
    for kind in &spec.hogs {
        if let Err(e) = run.group(*kind, &mut scenarios) {
            result = Err(e);
            break;
        }
    }
    if let Some(b) = &run.bar {
        b.finish_and_clear();
    }
    let layout = run.env.layout.describe();
    drop(run); // removes cgroups, mounts, loop devices
    result?;
    Ok(Report {
        machine: Machine {
            cpus: host.cpu_count(),
            memory: host.memory,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .into(),
            cgroups: layout,
        },
        settings: serde_json::json!({
            "warmup_s": spec.warmup.as_secs_f64(),
            "duration_s": spec.duration.as_secs_f64(),
            "connections": spec.connections,
            "rate": spec.rate,
            "keys": spec.keys,
            "value_size": spec.value_size,
            "get_ratio": spec.get_ratio,
            "plan": spec.plan.source,
            "server_slice": spec.server.to_string(),
            "helper_slice": spec.helper.to_string(),
            "small_host_memory": spec.host_memory,
            "repeat": spec.repeat,
        }),
        database: format!("redis-server in {}", spec.server.unit()),
        load_generator: format!(
            "bulkhead's RESP load generator in loadgen.slice (CPUWeight=10000, standing in for a remote client), {} connections, {}",
            spec.connections,
            spec.rate.map_or("closed loop".to_string(), |r| format!(
                "open loop at {r} ops/s"
            ))
        ),
        scenarios,
    })
}
