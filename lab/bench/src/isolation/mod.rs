//! `bulkhead bench isolation`: what a real database feels next to its helpers, per second.
//!
//! Redis runs in the plan's server slice and bulkhead's RESP load generator in a slice of its
//! own. For each hog (cpu, io, memory) the bench first measures the baseline peak (closed
//! loop, no hog), then runs every load (open loop at 50%, 80% and 100% of that peak, and the
//! closed loop) under every setup: the baseline (no hog), the hog free (a plain cgroup), the
//! plan's static confinement, the helper at `CPUWeight=idle`, idle with a static CPUQuota,
//! and the plan guarded by `bulkhead guard`. A CPU hog that alternates bursts and pauses
//! runs at 80% as well, so the guard's reaction and release show. Rounds repeat everything in
//! rotated order; figures are paired with the same round's baseline at the same load, and
//! medians over rounds are reported (see [`figures`]).

mod chart;
pub mod db;
pub mod diag;
pub mod figures;
mod group;
mod guarded;
mod hogs;
mod monitor;
mod placed;
mod sampler;
mod scenario;
mod text;

pub use chart::chart;
pub use figures::{Figures, ScenarioResult};
pub use hogs::work as hog_work;
pub use text::text;

use crate::env::Env;
use bulkhead::plan::{ResolvedPlan, SliceName};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The helpers that compete with the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HogKind {
    /// One busy loop pinned per CPU.
    Cpu,
    /// Direct (O_DIRECT) writes and reads on the database's file system.
    Io,
    /// The seeds' `find | grep` over the database's files: buffered reads.
    Reader,
    /// A backup: an archive written with buffered writes to the database's file system.
    Backup,
    /// The same backup, written to another file system.
    BackupOther,
    /// Anonymous memory and page cache growing past the small host's memory.
    Memory,
    /// A real backup: `pg_dump -Z6` of the bench's own database in a loop (PostgreSQL only).
    #[serde(rename = "pgdump")]
    PgDump,
}

impl HogKind {
    pub const ALL: [HogKind; 7] = [
        HogKind::Cpu,
        HogKind::Io,
        HogKind::Reader,
        HogKind::Backup,
        HogKind::BackupOther,
        HogKind::Memory,
        HogKind::PgDump,
    ];
    pub fn parse(s: &str) -> Result<HogKind, String> {
        match s.trim() {
            "direct" => Ok(HogKind::Io),
            "mem" => Ok(HogKind::Memory),
            "pg_dump" | "pg-dump" => Ok(HogKind::PgDump),
            other => HogKind::ALL
                .into_iter()
                .find(|k| k.name() == other)
                .ok_or_else(|| {
                    format!(
                        "unknown hog '{other}' (choose from {})",
                        HogKind::ALL.map(|k| k.name()).join(", ")
                    )
                }),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            HogKind::Cpu => "cpu",
            HogKind::Io => "io",
            HogKind::Reader => "reader",
            HogKind::Backup => "backup",
            HogKind::BackupOther => "backup-other",
            HogKind::Memory => "memory",
            HogKind::PgDump => "pgdump",
        }
    }
    /// Whether it competes for the disk (the group runs on the bench's file system, and
    /// the I/O path is followed).
    pub fn is_io(self) -> bool {
        matches!(
            self,
            HogKind::Io
                | HogKind::Reader
                | HogKind::Backup
                | HogKind::BackupOther
                | HogKind::PgDump
        )
    }
    /// Whether each round also runs it alone (no database), the yardstick of its progress:
    /// the CPU and I/O hogs. The memory hog's work is what it holds, which the plan bounds
    /// on purpose.
    pub fn has_alone(self) -> bool {
        self == HogKind::Cpu || self.is_io()
    }
    /// What it does, for the report's headings.
    pub fn describe(self) -> &'static str {
        match self {
            HogKind::Cpu => "one busy loop pinned per CPU",
            HogKind::Io => "O_DIRECT writes and reads of a 512 MiB file on the database's file system",
            HogKind::Reader => "find | grep over the database's files (buffered reads; the cold set read from the disk each pass)",
            HogKind::Backup => "a backup: 1 GiB archives of the database's files, buffered writes to the database's file system, synced at the end of each",
            HogKind::BackupOther => "the same backup written to another file system on the same disk",
            HogKind::Memory => "anonymous memory and page cache growing to twice the small host's memory",
            HogKind::PgDump => "pg_dump -Z6 of the bench's database in a loop, as the backup role, to the database's file system (placed: its backend moved to the helper slice by bulkhead place)",
        }
    }
}

/// The offered load: open loop at a share of the baseline peak, or the closed loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    /// Percent of the peak.
    Open(u32),
    Closed,
}

impl Load {
    pub fn parse(s: &str) -> Result<Load, String> {
        let s = s.trim();
        if s == "closed" {
            return Ok(Load::Closed);
        }
        match s.trim_end_matches('%').parse::<u32>() {
            Ok(p) if (1..=200).contains(&p) => Ok(Load::Open(p)),
            _ => Err(format!(
                "'{s}' is not a load: give percentages of the peak (50, 80, 100) or closed"
            )),
        }
    }
    pub fn label(self) -> String {
        match self {
            Load::Open(p) => format!("{p}%"),
            Load::Closed => "closed".into(),
        }
    }
}

/// How the hog runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Setup {
    /// No hog.
    Baseline,
    /// In a plain cgroup outside any slice.
    Free,
    /// In the helper slice, as the plan has it (the embedded default plan unless -c names
    /// another).
    #[serde(rename = "plan", alias = "static")]
    Static,
    /// In the helper slice at CPUWeight=idle.
    Idle,
    /// In the helper slice at CPUWeight=idle and a static CPUQuota.
    IdleQuota,
    /// In the helper slice as planned, with `bulkhead guard` running.
    Guarded,
    /// In the helper slice as planned, and the dump's backend moved there too by
    /// `bulkhead place` with the docs' backup-backend rule (the pgdump hog only).
    Placed,
}

impl Setup {
    pub const ALL: [Setup; 7] = [
        Setup::Baseline,
        Setup::Free,
        Setup::Static,
        Setup::Idle,
        Setup::IdleQuota,
        Setup::Guarded,
        Setup::Placed,
    ];
    pub fn parse(s: &str) -> Result<Setup, String> {
        let s = match s.trim() {
            "static" => "plan",
            other => other,
        };
        Setup::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown setup '{s}' (choose from {})",
                    Setup::ALL.map(|x| x.name()).join(", ")
                )
            })
    }
    pub fn name(self) -> &'static str {
        match self {
            Setup::Baseline => "baseline",
            Setup::Free => "free",
            Setup::Static => "plan",
            Setup::Idle => "idle",
            Setup::IdleQuota => "idle+quota",
            Setup::Guarded => "guarded",
            Setup::Placed => "placed",
        }
    }
}

/// The static CPUQuota of the `idle+quota` setup (of one CPU).
pub const STATIC_QUOTA: f64 = 0.25;
/// The bursty hog: busy, then paused, seconds.
pub const BURST: (f64, f64) = (3.0, 4.0);
/// The open load the bursty hog and the guard's calibration run at.
pub const REFERENCE_LOAD: Load = Load::Open(80);

/// One scenario to run (the group builds it, `scenario.rs` runs it).
pub(crate) struct Sc<'a> {
    pub kind: HogKind,
    pub bursty: bool,
    pub load: Load,
    pub setup: Setup,
    pub round: usize,
    /// ops/s for an open load.
    pub rate: Option<u64>,
    pub data_dir: &'a Path,
}

pub struct Spec {
    pub db: db::DbKind,
    pub hogs: Vec<HogKind>,
    pub loads: Vec<Load>,
    pub setups: Vec<Setup>,
    /// Also run the bursty CPU hog (at 80%).
    pub bursty: bool,
    pub warmup: Duration,
    pub duration: Duration,
    pub connections: usize,
    pub keys: u64,
    pub value_size: usize,
    pub get_ratio: f64,
    pub plan: ResolvedPlan,
    pub server: SliceName,
    pub helper: SliceName,
    /// The plan's slice for monitoring agents: a tiny exporter runs there for the whole
    /// bench and every run scrapes it once a second (None: no probe).
    pub monitor: Option<SliceName>,
    /// PostgreSQL's bin directory (None: the newest under /usr/lib/postgresql) and the
    /// settings given to its server (`-c KEY=VALUE`).
    pub pg_bin: Option<PathBuf>,
    pub pg_settings: Vec<(String, String)>,
    /// The memory of the "small host" the memory scenarios run in.
    pub host_memory: u64,
    pub port: Option<u16>,
    /// The bench binary (hogs, load generator) and the bulkhead binary (guard).
    pub exe: PathBuf,
    pub bulkhead: PathBuf,
    pub progress: bool,
    pub repeat: usize,
    /// The guard's calibration.
    pub calibration: Duration,
    /// The guard's `io_keep` (the helper's I/O progress floor), when not the plan's default.
    pub io_keep: Option<String>,
    /// The I/O scenarios' disk: the scheduler of the bench's loop device, whether its ext4
    /// has a journal, the reader's cold data and the backup's archive size.
    pub io: IoSpec,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IoSpec {
    /// `bfq`, `mq-deadline`, `none`, or `kyber`; `None`: `none` on the bench's loop device,
    /// and a `--data-dir` disk's own.
    pub scheduler: Option<String>,
    /// The database's files go in a directory of the bench's own here (a file system on the
    /// disk to measure); `None`: the file system that holds /var/lib, where databases live.
    pub data_dir: Option<PathBuf>,
    /// A loop-backed ext4 of the bench's own instead (`--loop`): the inversion a loop device
    /// on a file system shows is measured, not the host's disk.
    pub use_loop: bool,
    /// The backup's other file system (`backup-other`) instead of a second loop device.
    pub other_dir: Option<PathBuf>,
    pub journal: bool,
    pub cold_bytes: u64,
    pub archive_bytes: u64,
    /// The loop file system's size.
    pub fs_bytes: u64,
}

/// One machine, for the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub memory: u64,
    pub kernel: String,
    pub cgroups: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub machine: Machine,
    /// Where the I/O hogs' groups kept the database's files: path, device, file system,
    /// scheduler, BFQ and io.cost (None: no I/O hog ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    pub settings: serde_json::Value,
    pub database: String,
    pub load_generator: String,
    /// Baseline peak (closed loop, no hog) per hog group, ops/s.
    pub peaks: Vec<(String, f64)>,
    pub scenarios: Vec<ScenarioResult>,
    pub checks: Vec<crate::report::Check>,
}

pub(crate) fn check_interrupt() -> Result<(), String> {
    if crate::stop::requested() {
        return Err("interrupted: everything the bench started was stopped and removed".into());
    }
    Ok(())
}

/// Check everything a user can get wrong, before anything starts.
pub fn validate(spec: &Spec) -> Result<(), String> {
    if spec.hogs.is_empty() && !spec.bursty {
        return Err("--hog needs at least one of cpu, io, memory".into());
    }
    if spec.loads.is_empty() || spec.setups.is_empty() {
        return Err("--loads and --setups need at least one entry each".into());
    }
    if spec.duration < Duration::from_secs(1) {
        return Err("--duration must be at least 1s (figures are per second)".into());
    }
    if spec.connections == 0 || spec.keys == 0 {
        return Err("--connections and --keys must be at least 1".into());
    }
    for s in [
        Some(&spec.server),
        Some(&spec.helper),
        spec.monitor.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        if spec.plan.slice(s).is_none() {
            return Err(format!(
                "the plan ({}) has no slice '{s}', which the bench needs; name the slices with --server-slice, --helper-slice and --monitor-slice (none: no monitoring probe)",
                spec.plan.source
            ));
        }
    }
    if !bulkhead_sys::process::is_root() {
        return Err("the bench creates cgroups, a loop device and mounts: run it as root".into());
    }
    match spec.db {
        db::DbKind::Redis => {
            if crate::redis::find_server().is_none() {
                return Err("redis-server is not installed: apt-get install redis-server".into());
            }
        }
        db::DbKind::Postgres { .. } => {
            match &spec.pg_bin {
                Some(b) if !b.join("postgres").is_file() || !b.join("pg_dump").is_file() => {
                    return Err(format!("--pg-bin {}: no postgres and pg_dump there (give the bin directory of a PostgreSQL installation)", b.display()));
                }
                Some(_) => {}
                None if crate::postgres::find_bin_dir().is_none() => {
                    return Err("PostgreSQL is not installed: apt-get install postgresql-15 (the bench looks for /usr/lib/postgresql/VERSION/bin/postgres), or give --pg-bin DIR".into());
                }
                None => {}
            }
            if crate::postgres::run_as().is_none() {
                return Err("PostgreSQL refuses to run as root, and this host has neither a postgres nor a nobody user".into());
            }
            if !have_tool("setpriv") {
                return Err("the bench starts PostgreSQL as the postgres user with setpriv (apt-get install util-linux)".into());
            }
        }
    }
    if spec.hogs.contains(&HogKind::PgDump) && spec.db == db::DbKind::Redis {
        return Err(
            "--hog pgdump dumps the bench's PostgreSQL database: give --db postgres".into(),
        );
    }
    if spec.setups.contains(&Setup::Placed) && !spec.hogs.contains(&HogKind::PgDump) {
        return Err("--setups placed moves a dump's backend: it needs --hog pgdump".into());
    }
    if let Some(s) = &spec.io.scheduler {
        if !["bfq", "mq-deadline", "kyber", "none"].contains(&s.as_str()) {
            return Err(format!(
                "--io-scheduler {s}: choose from bfq, mq-deadline, kyber, none"
            ));
        }
    }
    for (d, flag) in [
        (&spec.io.data_dir, "--data-dir"),
        (&spec.io.other_dir, "--other-dir"),
    ] {
        if let Some(d) = d {
            if !d.is_dir() {
                return Err(format!(
                    "{flag} {}: not a directory (give a directory on the file system to measure)",
                    d.display()
                ));
            }
        }
    }
    if let Some(p) = spec.port {
        if crate::redis::port_busy(p) {
            return Err(format!(
                "port {p} on 127.0.0.1 is busy; pick another with --port"
            ));
        }
    }
    if spec.hogs.iter().any(|h| h.is_io()) {
        for tool in ["losetup", "mkfs.ext4", "mount", "umount"] {
            if !have_tool(tool) {
                return Err(format!(
                    "the I/O scenarios need {tool} (apt-get install util-linux e2fsprogs mount)"
                ));
            }
        }
    }
    Ok(())
}

fn have_tool(tool: &str) -> bool {
    ["/sbin", "/usr/sbin", "/bin", "/usr/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).exists())
}

/// The runs of one round, for the progress bar.
fn runs_per_round(spec: &Spec) -> u64 {
    let placed = spec.setups.contains(&Setup::Placed) as usize;
    let setups = |k: &HogKind| match k {
        HogKind::PgDump => spec.setups.len() + 1,
        _ => spec.setups.len() + 1 - placed,
    };
    let per_hog: u64 = spec
        .hogs
        .iter()
        .map(|k| (spec.loads.len() * setups(k)) as u64)
        .sum();
    let bursty = if spec.bursty { 3 } else { 0 };
    // The CPU and I/O hogs also run once alone per round (what the helper gets with no
    // database).
    let alone = spec.hogs.iter().filter(|h| h.has_alone()).count() as u64;
    per_hog + bursty + alone
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
    let secs_per_run = (spec.warmup + spec.duration).as_secs() + 2;
    let total = runs_per_round(spec) * spec.repeat.max(1) as u64 * secs_per_run;
    let bar = spec.progress.then(|| progress_bar(total));
    let host = bulkhead_testkit::host::Host::detect();
    let mut g = group::Bench::new(spec, env, bar)?;
    let mut scenarios = Vec::new();
    let mut peaks = Vec::new();
    let mut result = Ok(());
    let mut kinds: Vec<HogKind> = spec.hogs.clone();
    if spec.bursty && !kinds.contains(&HogKind::Cpu) {
        kinds.insert(0, HogKind::Cpu);
    }
    for kind in kinds {
        match g.group(kind) {
            Ok((peak, s)) => {
                peaks.push((kind.name().to_string(), peak));
                scenarios.extend(s);
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let database = g.database.clone();
    let storage = g.storage.clone();
    let plan_line = g.plan_line();
    let layout = g.finish();
    result?;
    let checks = figures::checks(&scenarios, spec.db);
    Ok(Report {
        machine: Machine {
            cpus: host.cpu_count(),
            memory: host.memory,
            kernel: bulkhead_testkit::host::kernel_release(),
            cgroups: layout,
        },
        storage,
        settings: serde_json::json!({
            "warmup_s": spec.warmup.as_secs_f64(),
            "duration_s": spec.duration.as_secs_f64(),
            "connections": spec.connections,
            "loads": spec.loads.iter().map(|l| l.label()).collect::<Vec<_>>(),
            "setups": spec.setups.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "keys": spec.keys,
            "value_size": spec.value_size,
            "get_ratio": spec.get_ratio,
            "plan": spec.plan.source,
            "server_slice": spec.server.to_string(),
            "helper_slice": spec.helper.to_string(),
            "monitor_slice": spec.monitor.as_ref().map(|s| s.to_string()),
            "monitor_probe": spec.monitor.as_ref().map(|_| format!(
                "an HTTP GET every {:?} to an exporter doing 5 ms of CPU per scrape, {:?} deadline",
                monitor::EVERY, monitor::DEADLINE
            )),
            "small_host_memory": spec.host_memory,
            "repeat": spec.repeat,
            "static_quota": STATIC_QUOTA,
            "burst_s": BURST.0,
            "pause_s": BURST.1,
            "calibration_s": spec.calibration.as_secs_f64(),
            "plan_slices": plan_line,
            "db": spec.db,
            "pg_settings": spec.pg_settings,
            "io": spec.io,
        }),
        database: format!("{database} in {}", spec.server.unit()),
        load_generator: match spec.db {
            db::DbKind::Redis => format!(
                "bulkhead's RESP load generator in loadgen.slice (CPUWeight=10000, standing in for a remote client), {} connections",
                spec.connections
            ),
            db::DbKind::Postgres { .. } => format!(
                "pgbench in loadgen.slice (CPUWeight=10000, standing in for remote clients), {} clients, every transaction logged",
                spec.connections
            ),
        },
        peaks,
        scenarios,
        checks,
    })
}

fn progress_bar(total: u64) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(total);
    b.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len}s  {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.enable_steady_tick(Duration::from_millis(200));
    b
}
