//! `bench metrics --attack`: what an attacker with N connections costs the exporter. A real
//! `bulkhead exporter` (this build's and, with `--against`, another build's, alternated in
//! the same run) over N slices; a local user (UID 65534) holds idle connections and opens a
//! new one whenever one is closed, and/or floods it with scrapes from several threads; a
//! legitimate scraper (root, as Prometheus: 10 s timeout) scrapes every 250 ms. Per build
//! and scenario: the scrapes that came back, their latency, the exporter's CPU, and what the
//! attacker got. Each exporter can be run under a CPU quota, as the packaged unit runs it.

use crate::env::Env;
use crate::stats;
use bulkhead::plan::{Plan, SliceName};
use bulkhead_testkit::groups::Groups;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Spec {
    pub slices: usize,
    /// Idle connections the attacker holds.
    pub idle: usize,
    /// Threads the attacker floods with.
    pub flood: usize,
    /// Legitimate scrapes per build, scenario and round.
    pub scrapes: usize,
    pub rounds: usize,
    /// (label, bulkhead binary).
    pub builds: Vec<(String, PathBuf)>,
    /// This bench binary (the attacker runs as its hidden `attacker` subcommand).
    pub bench: PathBuf,
    /// The exporter's CPU quota in CPUs (0.2 as the packaged unit's CPUQuota=20%).
    pub quota: Option<f64>,
    pub progress: bool,
}

/// One build in one scenario, over every round.
#[derive(Debug, serde::Serialize)]
pub struct Row {
    pub build: String,
    pub scenario: String,
    pub scrapes: usize,
    pub ok: usize,
    pub median_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// The exporter's CPU while the scrapes ran, in CPUs (median of rounds).
    pub exporter_cpus: f64,
    /// Pages the flood got per second (median of rounds).
    pub flood_pages_per_s: f64,
    /// Connections the attacker opened per second (median of rounds).
    pub attacker_connects_per_s: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub slices: usize,
    pub idle: usize,
    pub flood: usize,
    pub rounds: usize,
    pub quota: Option<f64>,
    pub rows: Vec<Row>,
}

/// What the attacker subcommand reports.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Attacked {
    pub opened: u64,
    pub flood_pages: u64,
    pub secs: f64,
}

const SCENARIOS: [&str; 4] = ["quiet", "idle", "flood", "idle+flood"];

/// One scrape as Prometheus makes it: Some(milliseconds) when a whole page came back.
pub fn scrape(addr: SocketAddr, timeout: Duration) -> Option<f64> {
    let t0 = Instant::now();
    let mut c = TcpStream::connect_timeout(&addr, timeout).ok()?;
    c.set_read_timeout(Some(timeout)).ok()?;
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
        .ok()?;
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let ok = out.starts_with(b"HTTP/1.1 200")
        && out
            .windows(b"bulkhead_slice_".len())
            .any(|w| w == b"bulkhead_slice_");
    ok.then(|| t0.elapsed().as_secs_f64() * 1e3)
}

/// The attacker (run as UID 65534): `idle` connections held, each from another 127.x
/// address and reopened as soon as it is closed, and `flood` threads scraping in a loop.
pub fn attack(addr: SocketAddr, idle: usize, flood: usize, secs: f64) -> Attacked {
    let stop = Arc::new(AtomicBool::new(false));
    let pages = Arc::new(AtomicU64::new(0));
    let floods: Vec<_> = (0..flood)
        .map(|_| {
            let (stop, pages) = (stop.clone(), pages.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if scrape(addr, Duration::from_secs(10)).is_some() {
                        pages.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let mut held: Vec<TcpStream> = Vec::new();
    let mut opened = 0u64;
    while idle > 0 && Instant::now() < end {
        held.retain(|c| match c.peek(&mut [0u8; 1]) {
            Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            Ok(_) => false,
        });
        while held.len() < idle && Instant::now() < end {
            let from = [127, 0, (opened / 200 % 200) as u8, (2 + opened % 200) as u8];
            opened += 1;
            if let Ok(c) = connect_from(from, addr) {
                let _ = c.set_nonblocking(true);
                held.push(c);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if idle == 0 {
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
    }
    stop.store(true, Ordering::Relaxed);
    for f in floods {
        let _ = f.join();
    }
    Attacked {
        opened,
        flood_pages: pages.load(Ordering::Relaxed),
        secs: t0.elapsed().as_secs_f64(),
    }
}

fn connect_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.bind(&SocketAddr::from((from, 0)).into())?;
    s.connect_timeout(&to.into(), Duration::from_secs(2))?;
    Ok(s.into())
}

/// A running exporter, killed on drop.
struct Exporter {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_exporter(
    bin: &PathBuf,
    env: &Env,
    jail: Option<(&Groups, &SliceName)>,
) -> Result<Exporter, String> {
    let mut child = Command::new(bin)
        .args(["--cgroup-root", &env.cgroup_root, "--backend", "cgroupfs"])
        .args(["exporter", "--listen", "127.0.0.1:0"])
        .env_remove("BULKHEAD_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .and_then(|r| r.strip_suffix("/metrics"))
        .and_then(|a| a.parse().ok());
    let Some(addr) = addr else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("{}: the exporter said {line:?}", bin.display()));
    };
    let e = Exporter { child, addr };
    if let Some((fs, slice)) = jail {
        fs.move_pid(slice, e.child.id() as i32)?;
    }
    Ok(e)
}

/// One build in one scenario, one round: (latencies of the scrapes that came back, exporter
/// CPUs, flood pages/s, attacker connects/s).
fn one(
    spec: &Spec,
    env: &Env,
    bin: &PathBuf,
    scenario: &str,
    jail: Option<(&Groups, &SliceName)>,
) -> Result<(Vec<f64>, f64, f64, f64), String> {
    let e = start_exporter(bin, env, jail)?;
    if scrape(e.addr, Duration::from_secs(10)).is_none() {
        return Err(format!("{}: the exporter does not answer", bin.display()));
    }
    let every = Duration::from_millis(250);
    let secs = spec.scrapes as f64 * every.as_secs_f64() + 2.0;
    let (idle, flood) = match scenario {
        "idle" => (spec.idle, 0),
        "flood" => (0, spec.flood),
        "idle+flood" => (spec.idle, spec.flood),
        _ => (0, 0),
    };
    let attacker = if idle + flood > 0 {
        Some(
            Command::new(&spec.bench)
                .args(["attacker", "--addr", &e.addr.to_string()])
                .args(["--idle", &idle.to_string(), "--flood", &flood.to_string()])
                .args(["--secs", &secs.to_string()])
                .uid(65534)
                .gid(65534)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|err| format!("cannot start the attacker: {err}"))?,
        )
    } else {
        None
    };
    std::thread::sleep(Duration::from_secs(1));
    let pid = e.child.id();
    let cpu = || bulkhead_sys::process::cpu_time(pid).unwrap_or_default();
    let (c0, t0) = (cpu(), Instant::now());
    let mut ms = Vec::new();
    for _ in 0..spec.scrapes {
        let t = Instant::now();
        ms.extend(scrape(e.addr, Duration::from_secs(10)));
        std::thread::sleep(every.saturating_sub(t.elapsed()));
    }
    let cpus = (cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    let got: Attacked = match attacker {
        Some(a) => {
            let out = a
                .wait_with_output()
                .map_err(|err| format!("the attacker: {err}"))?;
            serde_json::from_slice(&out.stdout).unwrap_or_default()
        }
        None => Attacked::default(),
    };
    let per_s = |n: u64| {
        if got.secs > 0.0 {
            n as f64 / got.secs
        } else {
            0.0
        }
    };
    Ok((ms, cpus, per_s(got.flood_pages), per_s(got.opened)))
}

pub fn run(spec: &Spec) -> Result<Report, String> {
    if spec.slices == 0 || spec.scrapes == 0 || spec.rounds == 0 {
        return Err("--slices, --scrapes and --rounds must be at least 1".into());
    }
    crate::env::clean_stale();
    let env = Env::create()?;
    let mut text = crate::metrics::slices_plan(spec.slices);
    if let Some(q) = spec.quota {
        text.push_str(&format!(
            "[slice.bexporter]\nCPUQuota = \"{}%\"\n",
            (q * 100.0).round()
        ));
    }
    let plan = Plan::parse(&text, None)
        .and_then(|p| bulkhead_testkit::host::resolve(&p))
        .map_err(|e| e.to_string())?;
    let fs = env
        .layout
        .groups(&env.cgroup_root)
        .map_err(|e| e.to_string())?;
    fs.apply(&plan).map_err(|e| e.to_string())?;
    let jail_name = SliceName::parse("bexporter").map_err(|e| e.to_string())?;
    let jail = spec.quota.map(|_| (&fs, &jail_name));
    // (build, scenario) -> per round results.
    type Runs = Vec<(Vec<f64>, f64, f64, f64)>;
    let mut runs: Vec<Vec<Runs>> = spec
        .builds
        .iter()
        .map(|_| SCENARIOS.iter().map(|_| Vec::new()).collect())
        .collect();
    for round in 0..spec.rounds {
        for (si, scenario) in SCENARIOS.iter().enumerate() {
            // Alternate which build goes first.
            let mut order: Vec<usize> = (0..spec.builds.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for bi in order {
                let (label, bin) = &spec.builds[bi];
                if spec.progress {
                    eprintln!(
                        "bench metrics --attack: round {}/{}, {scenario}, {label}",
                        round + 1,
                        spec.rounds
                    );
                }
                if crate::stop::requested() {
                    return Err("interrupted".into());
                }
                runs[bi][si].push(one(spec, &env, bin, scenario, jail)?);
            }
        }
    }
    let mut rows = Vec::new();
    for (si, scenario) in SCENARIOS.iter().enumerate() {
        for (bi, (label, _)) in spec.builds.iter().enumerate() {
            let r = &runs[bi][si];
            let mut ms: Vec<f64> = r.iter().flat_map(|x| x.0.iter().copied()).collect();
            ms.sort_by(f64::total_cmp);
            rows.push(Row {
                build: label.clone(),
                scenario: scenario.to_string(),
                scrapes: spec.scrapes * spec.rounds,
                ok: ms.len(),
                median_ms: stats::at_rank(&ms, 0.5),
                p99_ms: stats::at_rank(&ms, 0.99),
                max_ms: stats::at_rank(&ms, 1.0),
                exporter_cpus: stats::at_rank_of(r.iter().map(|x| x.1).collect(), 0.5)
                    .unwrap_or(0.0),
                flood_pages_per_s: stats::at_rank_of(r.iter().map(|x| x.2).collect(), 0.5)
                    .unwrap_or(0.0),
                attacker_connects_per_s: stats::at_rank_of(r.iter().map(|x| x.3).collect(), 0.5)
                    .unwrap_or(0.0),
            });
        }
    }
    drop(env);
    Ok(Report {
        slices: spec.slices,
        idle: spec.idle,
        flood: spec.flood,
        rounds: spec.rounds,
        quota: spec.quota,
        rows,
    })
}

pub fn text(r: &Report) -> String {
    let mut out = format!(
        "exporter under attack: {} slices, attacker (UID 65534) with {} idle connections (renewed as closed) and/or {} flooding threads, {} round(s){}\n",
        r.slices,
        r.idle,
        r.flood,
        r.rounds,
        match r.quota {
            Some(q) => format!(", each exporter under a CPU quota of {:.0}%", q * 100.0),
            None => ", no CPU quota".into(),
        }
    );
    out.push_str(&format!(
        "{:<11} {:<10} {:>9} {:>9} {:>9} {:>9} {:>13} {:>13} {:>14}\n",
        "scenario",
        "build",
        "scrapes",
        "p50 ms",
        "p99 ms",
        "max ms",
        "exporter CPU",
        "flood pages/s",
        "attacker conn/s"
    ));
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for row in &r.rows {
        out.push_str(&format!(
            "{:<11} {:<10} {:>9} {:>9} {:>9} {:>9} {:>12.0}% {:>13.0} {:>14.0}\n",
            row.scenario,
            row.build,
            format!("{}/{}", row.ok, row.scrapes),
            ms(row.median_ms),
            ms(row.p99_ms),
            ms(row.max_ms),
            row.exporter_cpus * 100.0,
            row.flood_pages_per_s,
            row.attacker_connects_per_s
        ));
    }
    out
}
