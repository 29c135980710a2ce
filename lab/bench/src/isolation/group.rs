//! The bench's state across scenarios (its environment, slices, plan file and guard
//! directory), and one hog's group: the data directory, the database, the baseline peak,
//! the guard's calibration, then every load and setup for every round (and, for the I/O
//! hogs, the hog alone), folded into results.

use super::db::{LoadShape, Server, StartIn};
use super::diag::{Group, IoProbe};
use super::figures::{combine, RunData, ScenarioResult};
use super::guarded::{plan_text, Where};
use super::hogs::unit;
use super::{HogKind, Load, Sc, Setup, Spec, REFERENCE_LOAD};
use crate::env::Env;
use crate::redis;
use bulkhead::plan::{Plan, ResolvedPlan, SliceName};
use bulkhead_testkit::groups::Groups;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub struct Bench<'a> {
    pub spec: &'a Spec,
    pub env: Env,
    pub fs: Groups,
    /// The user's plan with the load generator's slice (and a `[guard]` section).
    pub plan: ResolvedPlan,
    pub plan_file: PathBuf,
    pub loadgen: SliceName,
    pub free: Vec<PathBuf>,
    pub bar: Option<indicatif::ProgressBar>,
    pub bar_base: Cell<u64>,
    pub port: u16,
    /// What the I/O scenarios follow on the database's path (set per group).
    pub io_probe: Option<IoProbe>,
    /// The other file system the backup may write to (set per group).
    pub other_dir: Option<PathBuf>,
    /// The database, as the report names it.
    pub database: String,
    /// Where the database's files of the I/O groups are, for the report.
    pub storage: Option<String>,
    /// The exporter the monitoring probe scrapes, in the monitoring slice.
    pub exporter: Option<super::monitor::Exporter>,
    /// PostgreSQL's bin directory, once it runs (the pgdump hog's pg_dump).
    pub pg_bin: Option<PathBuf>,
}

/// A library error as the bench's message (the bench's caller adds its own "error: ").
fn msg(e: impl ToString) -> String {
    let t = e.to_string();
    t.strip_prefix("error: ").map(str::to_string).unwrap_or(t)
}

/// Runs of a group by (hog label, load, setup).
type Runs = BTreeMap<(String, String, &'static str), (Load, Setup, Vec<RunData>)>;

impl<'a> Bench<'a> {
    pub fn new(
        spec: &'a Spec,
        env: Env,
        bar: Option<indicatif::ProgressBar>,
    ) -> Result<Bench<'a>, String> {
        let fs = env.layout.groups(&env.cgroup_root).map_err(msg)?;
        let port = match spec.port {
            Some(p) => p,
            None => redis::free_port().map_err(msg)?,
        };
        let loadgen = SliceName::parse("loadgen").map_err(msg)?;
        let user = &spec.plan.plan;
        let mut tuning = match spec.db {
            super::db::DbKind::Redis => format!("probe = \"redis:127.0.0.1:{port}\"\n"),
            super::db::DbKind::Postgres { .. } => format!("probe = \"tcp:127.0.0.1:{port}\"\n"),
        };
        if let Some(keep) = &spec.io_keep {
            tuning.push_str(&format!("io_keep = \"{keep}\"\n"));
        }
        let text = plan_text(
            &user.source.text,
            user.slices.contains_key(&loadgen),
            user.guard.is_some(),
            spec.server.as_str(),
            spec.helper.as_str(),
            spec.calibration,
            &tuning,
        );
        let plan_file = env.dir.join("plan.toml");
        std::fs::write(&plan_file, &text).map_err(|e| format!("{}: {e}", plan_file.display()))?;
        let plan = Plan::parse(&text, Some(&plan_file))
            .and_then(|p| bulkhead_testkit::host::resolve(&p))
            .map_err(msg)?;
        let free = env.plain_cgroup("free")?;
        let mut b = Bench {
            spec,
            env,
            fs,
            plan,
            plan_file,
            loadgen,
            free,
            bar,
            bar_base: Cell::new(0),
            port,
            io_probe: None,
            other_dir: None,
            database: spec.db.name().into(),
            storage: None,
            exporter: None,
            pg_bin: None,
        };
        b.apply(&b.plan.clone())?;
        if let Some(m) = &spec.monitor {
            let port = redis::free_port().map_err(msg)?;
            let day = std::time::Duration::from_secs(86_400);
            let procs = b.fs.procs_files(m);
            b.exporter = Some(super::monitor::Exporter::start(
                &spec.exe, port, &procs, day,
            )?);
        }
        Ok(b)
    }

    /// The placed setup's plan: the bench's, with the docs' backup-backend rule.
    pub fn place_plan_file(&self) -> Result<PathBuf, String> {
        let user = crate::postgres::run_as().map_or("postgres".into(), |u| u.0);
        let mut text = std::fs::read_to_string(&self.plan_file)
            .map_err(|e| format!("{}: {e}", self.plan_file.display()))?;
        text.push_str(&super::placed::rule(self.spec.helper.as_str(), &user));
        let file = self.env.dir.join("place-plan.toml");
        std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
        Ok(file)
    }

    pub fn apply(&self, plan: &ResolvedPlan) -> Result<(), String> {
        // The plan's [iocost] (io.cost on the database's disks), as `bulkhead apply` sets
        // it; the record in the bench's directory puts the lines back at the end.
        self.fs
            .apply_iocost(plan, &crate::env::iocost_record(&self.env.dir))
            .map_err(msg)?;
        self.fs.apply(plan).map_err(msg)
    }

    pub fn say(&self, msg: String) {
        match &self.bar {
            // Without a terminal the bar is hidden: its messages go to stderr as lines.
            Some(b) if !b.is_hidden() => b.set_message(msg),
            _ if self.spec.progress => eprintln!("bench: {msg}"),
            _ => {}
        }
    }

    pub fn guard_where(&self) -> Where<'_> {
        Where {
            bulkhead: &self.spec.bulkhead,
            plan: &self.plan_file,
            cgroup_root: &self.env.cgroup_root,
            dir: &self.env.dir,
        }
    }

    /// Clear the bar; the layout line for the report. Dropping the environment removes
    /// cgroups, mounts and loop devices.
    pub fn finish(self) -> String {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        self.env.layout.describe()
    }

    /// The server and helper slices' directives as planned, for the report.
    pub fn plan_line(&self) -> String {
        [&self.spec.server, &self.spec.helper]
            .iter()
            .filter_map(|n| self.plan.slice(n))
            .map(|s| {
                let mut d: Vec<String> = Vec::new();
                match s.cpu_weight {
                    Some(bulkhead::plan::CpuWeight::Idle) => d.push("CPUWeight=idle".into()),
                    Some(bulkhead::plan::CpuWeight::Weight(w)) => d.push(format!("CPUWeight={w}")),
                    None => {}
                }
                if let Some(w) = &s.io_weight {
                    d.push(format!("IOWeight={w}"));
                }
                if let Some(m) = &s.memory_max {
                    d.push(format!("MemoryMax={m}"));
                }
                format!("{}: {}", s.name(), d.join(" "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn shape(&self) -> LoadShape {
        LoadShape {
            connections: self.spec.connections,
            keys: self.spec.keys,
            value_size: self.spec.value_size,
            get_ratio: self.spec.get_ratio,
        }
    }

    fn start_db(&mut self, dir: &Path, aof: bool) -> Result<Server, String> {
        let files = self.fs.procs_files(&self.spec.server);
        self.say(format!(
            "starting {} and loading its data",
            self.spec.db.name()
        ));
        let s = Server::start(
            self.spec.db,
            &StartIn {
                dir,
                port: self.port,
                aof,
                procs_files: &files,
                pg_bin: self.spec.pg_bin.as_deref(),
                pg_settings: &self.spec.pg_settings,
            },
            &self.shape(),
        )?;
        self.pg_bin = s.pg_bin().map(Path::to_path_buf);
        self.database = s.describe();
        Ok(s)
    }

    /// The groups whose I/O the diagnosis follows: the server, the helper, the free cgroup.
    fn io_groups(&self) -> Vec<Group> {
        let mut out = Vec::new();
        for (label, rel) in [
            ("server", self.spec.server.cgroup_path()),
            ("helper", self.spec.helper.cgroup_path()),
            ("free", PathBuf::from("free")),
        ] {
            let (d, u) = self.fs.io_dirs(&rel);
            out.push(Group::new(label, d, u));
        }
        out
    }

    /// The database's directory for the I/O hogs: on the host's disk (the file system of
    /// `--data-dir`, by default the one holding /var/lib: its scheduler as it is, or as
    /// `--io-scheduler` says), or with `--loop` on a loop-backed ext4 of the bench's own.
    fn io_data_dir(&mut self) -> Result<PathBuf, String> {
        let io = &self.spec.io;
        let dir = if io.use_loop {
            let sched = io.scheduler.clone().unwrap_or_else(|| "none".into());
            self.say(format!(
                "making a loop-backed ext4{} with the {sched} scheduler for the database's data",
                if io.journal { "" } else { " without a journal" },
            ));
            self.env.loop_fs(io.fs_bytes, &sched, io.journal)?.0
        } else {
            let parent = io
                .data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("/var/lib"));
            let dir = self.env.dir_in(&parent, "data")?;
            if let Some(s) = &io.scheduler {
                for dev in super::diag::block::path_devices(&dir) {
                    self.env.set_scheduler(&dev.name, s)?;
                }
            }
            dir
        };
        let about = describe_storage(&dir);
        self.say(format!("the database's data: {about}"));
        self.storage = Some(about);
        Ok(dir)
    }

    /// One hog's group: (the baseline peak, its scenarios).
    pub fn group(&mut self, kind: HogKind) -> Result<(f64, Vec<ScenarioResult>), String> {
        let io = &self.spec.io;
        let (data_dir, aof) = if kind.is_io() {
            (self.io_data_dir()?, true)
        } else {
            (self.env.scratch()?, false)
        };
        if kind == HogKind::BackupOther {
            self.other_dir = Some(match &io.other_dir {
                Some(d) => self.env.dir_in(d, "other")?,
                None => {
                    self.say("making another loop-backed ext4 for the backup".into());
                    let size = (io.archive_bytes * 2).max(1 << 30);
                    self.env
                        .mkfs_loop("other", size, &["mkfs.ext4", "-q", "-F"])?
                }
            });
        }
        if kind == HogKind::Reader {
            self.say(format!(
                "writing the reader's cold data ({})",
                bulkhead::units::human_bytes(io.cold_bytes)
            ));
            crate::hog::make_cold(&data_dir.join("cold"), io.cold_bytes)
                .map_err(|e| format!("cannot write the reader's cold data: {e}"))?;
        }
        if kind.is_io() {
            let mut paths: Vec<&Path> = vec![&data_dir];
            if let Some(o) = &self.other_dir {
                paths.push(o);
            }
            self.io_probe = Some(IoProbe::new(&paths, self.io_groups()));
        }
        if kind == HogKind::Memory {
            self.env.limit_memory(Some(self.spec.host_memory))?;
        }
        let result = self.group_in(kind, &data_dir, aof);
        if kind == HogKind::Memory {
            let _ = self.env.limit_memory(None);
        }
        self.io_probe = None;
        if kind.is_io() {
            self.env.drop_loop_fs();
            if !io.use_loop {
                let _ = std::fs::remove_dir_all(&data_dir);
            }
        }
        if self.other_dir.take().is_some() {
            self.env.drop_loops();
        }
        result
    }

    fn group_in(
        &mut self,
        kind: HogKind,
        dir: &Path,
        aof: bool,
    ) -> Result<(f64, Vec<ScenarioResult>), String> {
        let mut db = self.start_db(dir, aof)?;
        let sc = |load, setup, round, rate| Sc {
            kind,
            bursty: false,
            load,
            setup,
            round,
            rate,
            data_dir: dir,
        };
        self.say(format!(
            "{}: measuring the baseline peak (closed loop, no hog)",
            kind.name()
        ));
        let peak = self
            .scenario(&mut db, &sc(Load::Closed, Setup::Baseline, 0, None))?
            .load
            .op_rate;
        let rate = |l: Load| match l {
            Load::Open(p) => Some((peak * p as f64 / 100.0).round().max(1.0) as u64),
            Load::Closed => None,
        };
        if self.spec.setups.contains(&Setup::Guarded) {
            self.calibrate(&db, rate(REFERENCE_LOAD).unwrap_or(1))?;
        }
        let mut setups = with_baseline(&self.spec.setups);
        setups.retain(|s| *s != Setup::Placed || kind == HogKind::PgDump);
        let bursty = kind == HogKind::Cpu && self.spec.bursty;
        let kinds_here = kind == HogKind::Cpu && !self.spec.hogs.contains(&HogKind::Cpu);
        let mut runs = Runs::new();
        let mut alone = BTreeMap::new();
        for round in 0..self.spec.repeat.max(1) {
            if kind.has_alone() && !kinds_here {
                alone.insert(round, self.hog_alone(kind, round, dir)?);
            }
            for &load in &self.spec.loads {
                if kinds_here {
                    break; // only the bursty hog was asked for
                }
                for k in 0..setups.len() {
                    let setup = setups[(k + round) % setups.len()];
                    let mut r = self.scenario(&mut db, &sc(load, setup, round, rate(load)))?;
                    r.hog_alone = alone.get(&round).copied();
                    self.restart_if_died(&mut db, &r, dir, aof)?;
                    push(&mut runs, kind.name(), load, setup, r);
                }
            }
            if bursty {
                self.bursty_round(&mut db, &mut runs, round, rate(REFERENCE_LOAD), dir, aof)?;
            }
        }
        db.stop();
        Ok((peak, fold(kind, runs)))
    }

    fn bursty_round(
        &mut self,
        redis: &mut Server,
        runs: &mut Runs,
        round: usize,
        rate: Option<u64>,
        dir: &Path,
        aof: bool,
    ) -> Result<(), String> {
        let has_base = runs.contains_key(&key("cpu", REFERENCE_LOAD, Setup::Baseline))
            && self.spec.loads.contains(&REFERENCE_LOAD);
        let mut setups: Vec<Setup> = [Setup::Static, Setup::Idle, Setup::Guarded]
            .into_iter()
            .filter(|s| self.spec.setups.contains(s))
            .collect();
        if !has_base {
            setups.insert(0, Setup::Baseline);
        }
        for setup in setups {
            let sc = Sc {
                kind: HogKind::Cpu,
                bursty: setup != Setup::Baseline,
                load: REFERENCE_LOAD,
                setup,
                round,
                rate,
                data_dir: dir,
            };
            let r = self.scenario(redis, &sc)?;
            self.restart_if_died(redis, &r, dir, aof)?;
            let label = if setup == Setup::Baseline {
                "cpu"
            } else {
                "cpu-bursty"
            };
            push(runs, label, REFERENCE_LOAD, setup, r);
        }
        Ok(())
    }

    /// A scenario that killed the database (the OOM killer) gets it back for the next one.
    fn restart_if_died(
        &mut self,
        db: &mut Server,
        r: &RunData,
        dir: &Path,
        aof: bool,
    ) -> Result<(), String> {
        if r.db_died.is_some() {
            self.say("the database died; restarting it for the next scenario".into());
            db.stop();
            if let super::db::DbKind::Postgres { .. } = self.spec.db {
                // A new cluster: the old one's files may be half written.
                let _ = std::fs::remove_dir_all(dir.join("pgdata"));
            }
            *db = self.start_db(dir, aof)?;
        }
        Ok(())
    }
}

fn key(hog: &str, load: Load, setup: Setup) -> (String, String, &'static str) {
    (hog.to_string(), load.label(), setup.name())
}

fn push(runs: &mut Runs, hog: &str, load: Load, setup: Setup, r: RunData) {
    runs.entry(key(hog, load, setup))
        .or_insert_with(|| (load, setup, Vec::new()))
        .2
        .push(r);
}

/// The baseline first, then the other setups as asked.
fn with_baseline(setups: &[Setup]) -> Vec<Setup> {
    let mut v = vec![Setup::Baseline];
    v.extend(setups.iter().copied().filter(|s| *s != Setup::Baseline));
    v
}

/// Every scenario against the baseline of its hog's group at its load.
fn fold(kind: HogKind, runs: Runs) -> Vec<ScenarioResult> {
    let mut out = Vec::new();
    for ((hog, _, _), (load, setup, list)) in &runs {
        let group = hog.trim_end_matches("-bursty");
        let Some((_, _, bases)) = runs.get(&key(group, *load, Setup::Baseline)) else {
            continue;
        };
        out.push(combine(hog, *load, *setup, unit(kind), list.clone(), bases));
    }
    let order = |s: &ScenarioResult| {
        let l = match s.load {
            Load::Open(p) => p,
            Load::Closed => u32::MAX,
        };
        let st = Setup::ALL.iter().position(|x| *x == s.setup).unwrap_or(0);
        (s.hog.clone(), l, st)
    };
    out.sort_by_key(order);
    out
}

/// One line about where the data is: `/var/lib/bulkhead-bench-9-data: vda (ext4, scheduler
/// mq-deadline; BFQ: not in this kernel; io.cost: off)`, the loop device's file named.
pub fn describe_storage(dir: &Path) -> String {
    let fs = bulkhead_testkit::host::fs_magic(dir).map_or_else(
        || "unknown file system".into(),
        bulkhead_testkit::host::fs_name,
    );
    let devs: Vec<String> = super::diag::block::path_devices(dir)
        .iter()
        .map(|d| {
            let backing = d
                .backing
                .as_ref()
                .map(|b| format!(", a loop device over {}", b.display()))
                .unwrap_or_default();
            format!("{} (scheduler {}{backing})", d.name, d.scheduler)
        })
        .collect();
    let k = bulkhead_testkit::host::io_kernel();
    format!(
        "{}: {} on {}; BFQ: {}; io.cost: {}",
        dir.display(),
        fs,
        if devs.is_empty() {
            "an unknown device".to_string()
        } else {
            devs.join(" over ")
        },
        if k.bfq {
            "available"
        } else if k.bfq_module {
            "a module, not loaded"
        } else {
            "not in this kernel"
        },
        if k.io_cost { "on" } else { "off" },
    )
}
