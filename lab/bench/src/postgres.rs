//! A real PostgreSQL for the benchmarks (Debian's package: the binaries under
//! /usr/lib/postgresql/VERSION/bin), started inside a slice as the `postgres` user and always
//! stopped; and pgbench as its load: TPC-B-like or select-only, closed loop or open loop
//! (`--rate`), every transaction logged (`-l`) and folded into the same per-second report as
//! the RESP load generator's ([`crate::LoadResult`]).

use crate::child::Server;
use crate::loadgen::Stats;
use crate::LoadResult;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The newest PostgreSQL's bin directory (`/usr/lib/postgresql/15/bin`).
pub fn find_bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b)
}

/// The user PostgreSQL runs as (it refuses root): `postgres` where the package made it,
/// else `nobody`. (name, uid, gid)
pub fn run_as() -> Option<(String, u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    ["postgres", "nobody"].iter().find_map(|want| {
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == *want)
                .then(|| Some((f[0].to_string(), f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
    })
}

/// The pgbench script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Script {
    /// pgbench's default: three UPDATEs, a SELECT and an INSERT per transaction, a commit
    /// (WAL fsync) each.
    TpcbLike,
    /// One primary-key SELECT per transaction.
    SelectOnly,
}

impl Script {
    pub fn parse(s: &str) -> Result<Script, String> {
        match s.trim() {
            "tpcb-like" | "tpcb" => Ok(Script::TpcbLike),
            "select-only" | "select" => Ok(Script::SelectOnly),
            o => Err(format!(
                "unknown pgbench script '{o}' (choose from tpcb-like, select-only)"
            )),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Script::TpcbLike => "tpcb-like",
            Script::SelectOnly => "select-only",
        }
    }
}

pub struct Postgres {
    server: Server,
    pub pid: u32,
    pub port: u16,
    bin: PathBuf,
    /// Unix socket directory.
    sock: PathBuf,
}

pub struct Options<'a> {
    pub port: u16,
    /// Where the cluster lives (created by initdb, owned by the server's user).
    pub dir: &'a Path,
    /// cgroup.procs files of the slice the server starts in.
    pub procs_files: &'a [PathBuf],
    /// The bin directory (None: [`find_bin_dir`]).
    pub bin: Option<&'a Path>,
    /// Settings after the bench's own (`io_method=sync`).
    pub settings: &'a [(String, String)],
}

fn wrapped(user: &(String, u32, u32), bin: &Path, prog: &str) -> Command {
    // setpriv execs in place: the PID is the server's, and it joins the slice as root first.
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        &user.1.to_string(),
        "--regid",
        &user.2.to_string(),
        "--clear-groups",
        "--",
    ])
    .arg(bin.join(prog));
    c
}

fn output(cmd: &mut Command, what: &str) -> Result<String, String> {
    let o = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err.trim().lines().collect();
        return Err(format!(
            "{what} failed ({}): {}",
            o.status,
            lines[lines.len().saturating_sub(5)..].join("\n")
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

impl Postgres {
    /// initdb a cluster in `o.dir`, then start the server in the slice and wait until it
    /// takes connections. The settings keep the bench's windows comparable: no checkpoint
    /// by time or WAL size inside a run (the bench asks for one before each), no
    /// autovacuum (a VACUUM follows the initial load); fsync and synchronous commit on.
    pub fn start(o: &Options) -> Result<Postgres, String> {
        let bin = o.bin.map(Path::to_path_buf).or_else(find_bin_dir).ok_or(
            "PostgreSQL is not installed (Debian: apt-get install postgresql-15; its binaries are looked for in /usr/lib/postgresql/VERSION/bin)",
        )?;
        let user =
            run_as().ok_or("there is neither a postgres nor a nobody user to run PostgreSQL as")?;
        if crate::redis::port_busy(o.port) {
            return Err(format!("port {} on 127.0.0.1 is busy", o.port));
        }
        let data = o.dir.join("pgdata");
        let sock = o.dir.join("pgsock");
        for d in [&data, &sock] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            std::os::unix::fs::chown(d, Some(user.1), Some(user.2))
                .map_err(|e| format!("chown {}: {e}", d.display()))?;
        }
        std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .map_err(|e| format!("{}: {e}", data.display()))?;
        output(
            wrapped(&user, &bin, "initdb")
                .args([
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--no-instructions",
                ])
                .arg("-D")
                .arg(&data),
            "initdb",
        )?;
        let mut cmd = wrapped(&user, &bin, "postgres");
        cmd.arg("-D").arg(&data).args(["-p", &o.port.to_string()]);
        cmd.arg("-k").arg(&sock);
        for (k, v) in [
            ("listen_addresses", "127.0.0.1"),
            ("max_connections", "100"),
            ("shared_buffers", "128MB"),
            ("fsync", "on"),
            ("synchronous_commit", "on"),
            ("checkpoint_timeout", "1h"),
            ("max_wal_size", "8GB"),
            ("autovacuum", "off"),
            ("logging_collector", "off"),
        ] {
            cmd.args(["-c", &format!("{k}={v}")]);
        }
        for (k, v) in o.settings {
            cmd.args(["-c", &format!("{k}={v}")]);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = bulkhead_testkit::groups::spawn_joined(&mut cmd, o.procs_files)
            .map_err(|e| format!("cannot start postgres: {e}"))?;
        let mut pg = Postgres {
            pid: child.id(),
            server: Server::new(child, libc::SIGINT, Duration::from_secs(10)),
            port: o.port,
            bin,
            sock,
        };
        if let Err(e) = pg.wait_ready(Duration::from_secs(60)) {
            pg.stop();
            return Err(e);
        }
        Ok(pg)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.exited() {
                return Err(format!("postgres exited at its start ({st})"));
            }
            let ok = Command::new(self.bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .stdin(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "postgres did not accept connections within {timeout:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn psql(&self, sql: &str) -> Result<String, String> {
        output(
            Command::new(self.bin.join("psql"))
                .args(["-X", "-q", "-d", "postgres"])
                .args(over_tcp(self.port))
                .args(["-v", "ON_ERROR_STOP=1", "-c", sql]),
            &format!("psql -c '{sql}'"),
        )
    }

    /// pgbench's tables at `scale` (100,000 accounts each), then VACUUM and a checkpoint.
    pub fn load(&self, scale: u32) -> Result<(), String> {
        output(
            Command::new(self.bin.join("pgbench"))
                .args(["-i", "-q", "-s", &scale.max(1).to_string()])
                .args(over_tcp(self.port))
                .arg("postgres"),
            "pgbench -i",
        )?;
        self.psql("VACUUM ANALYZE")?;
        // The backup role the docs set up: its backends' titles name it.
        self.psql(crate::pgdump::ROLE_SQL)?;
        self.checkpoint()
    }

    /// Write everything dirty out now, so no run starts with another's checkpoint due.
    pub fn checkpoint(&self) -> Result<(), String> {
        self.psql("CHECKPOINT").map(|_| ())
    }

    pub fn bin(&self) -> &Path {
        &self.bin
    }

    pub fn socket_dir(&self) -> &Path {
        &self.sock
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.server.exited()
    }

    /// A fast shutdown (SIGINT), then SIGKILL after 10 s (also when dropped).
    pub fn stop(&mut self) {
        self.server.stop();
    }
}

/// What `bench pgload` runs.
#[derive(Debug, Clone)]
pub struct PgLoad {
    pub bin: PathBuf,
    pub port: u16,
    pub clients: usize,
    pub script: Script,
    /// Open loop at this many transactions/s (pgbench -R: Poisson arrivals).
    pub rate: Option<u64>,
    pub warmup: Duration,
    pub duration: Duration,
    /// Where pgbench writes its transaction log (removed after).
    pub log_dir: PathBuf,
}

/// One line of pgbench's transaction log: `client tx time script epoch us [lag]`. Returns
/// (completion time in µs since the epoch, latency in µs from the intended start, failed).
pub fn parse_log_line(l: &str) -> Option<(u64, u64, bool)> {
    let f: Vec<&str> = l.split_whitespace().collect();
    if f.len() < 6 {
        return None;
    }
    let epoch: u64 = f[4].parse().ok()?;
    let us: u64 = f[5].parse().ok()?;
    let at = epoch * 1_000_000 + us;
    // Failed (serialization/deadlock) or skipped transactions log a word instead of a time.
    let Ok(time) = f[2].parse::<u64>() else {
        return Some((at, 0, true));
    };
    let lag: u64 = f.get(6).and_then(|x| x.parse().ok()).unwrap_or(0);
    Some((at, time + lag, false))
}

/// Fold pgbench's log lines into the load report: transactions completing in the measured
/// window (`from` µs since the epoch, `window` long), latency from their intended start.
pub fn fold(
    lines: impl Iterator<Item = String>,
    from_us: u64,
    window: Duration,
    clients: usize,
    rate: Option<u64>,
    select_only: bool,
) -> LoadResult {
    let mut st = Stats::new();
    let end = from_us + window.as_micros() as u64;
    for l in lines {
        let Some((at, lat, failed)) = parse_log_line(&l) else {
            continue;
        };
        if at < from_us || at >= end {
            continue;
        }
        let sec = ((at - from_us) / 1_000_000) as usize;
        if failed {
            st.error(sec, 1);
        } else {
            st.record(sec, lat, select_only);
        }
    }
    crate::loadgen::summarize(&st, clients, rate, window.as_secs_f64(), window)
}

/// psql's and pgbench's connection options: the server over TCP on the loopback, as the
/// postgres role.
fn over_tcp(port: u16) -> [String; 6] {
    ["-h", "127.0.0.1", "-U", "postgres", "-p", &port.to_string()].map(String::from)
}

/// Run pgbench for warm-up plus window and report the window.
pub fn run_load(l: &PgLoad) -> Result<LoadResult, String> {
    std::fs::create_dir_all(&l.log_dir).map_err(|e| format!("{}: {e}", l.log_dir.display()))?;
    let prefix = l.log_dir.join("tx");
    let total = l.warmup + l.duration;
    let mut cmd = Command::new(l.bin.join("pgbench"));
    cmd.args(["-n", "-b", l.script.name()])
        .args(["-c", &l.clients.to_string(), "-j", "1"])
        .args(["-T", &total.as_secs().max(1).to_string()])
        .args(over_tcp(l.port))
        .arg("-l")
        .arg(format!("--log-prefix={}", prefix.display()));
    if let Some(r) = l.rate {
        cmd.args(["-R", &r.to_string()]);
    }
    cmd.arg("postgres");
    let started = bulkhead_sys::process::unix_now();
    let result = output(&mut cmd, "pgbench");
    let mut lines = Vec::new();
    for e in std::fs::read_dir(&l.log_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(t) = std::fs::read_to_string(e.path()) {
            lines.extend(t.lines().map(String::from));
        }
    }
    let _ = std::fs::remove_dir_all(&l.log_dir);
    result?;
    let from = ((started + l.warmup.as_secs_f64()) * 1e6) as u64;
    Ok(fold(
        lines.into_iter(),
        from,
        l.duration,
        l.clients,
        l.rate,
        l.script == Script::SelectOnly,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_and_windows() {
        assert_eq!(
            parse_log_line("3 17 2500 0 1700000000 250000"),
            Some((1_700_000_000_250_000, 2500, false))
        );
        // Open loop: the schedule lag counts (latency from the intended start).
        assert_eq!(
            parse_log_line("0 1 1000 0 1700000000 0 400"),
            Some((1_700_000_000_000_000, 1400, false))
        );
        assert_eq!(
            parse_log_line("0 2 failed 0 1700000000 5"),
            Some((1_700_000_000_000_005, 0, true))
        );
        assert!(parse_log_line("garbage").is_none());
        let from = 1_700_000_000_000_000u64;
        let lines = vec![
            "0 1 1000 0 1699999999 900000".to_string(), // warm-up: left out
            "0 2 1000 0 1700000000 100".into(),
            "0 3 3000 0 1700000000 500000".into(),
            "0 4 2000 0 1700000001 0".into(),
            "0 5 failed 0 1700000001 10".into(),
            "0 6 1000 0 1700000002 0".into(), // after the window
        ];
        let r = fold(
            lines.into_iter(),
            from,
            Duration::from_secs(2),
            4,
            Some(10),
            false,
        );
        assert_eq!(r.ops, 3);
        assert_eq!(r.errors, 1);
        assert_eq!(r.seconds.len(), 2);
        assert_eq!(r.seconds[0].ops, 2);
        assert_eq!(r.seconds[1].ops, 1);
        assert_eq!(r.mode, "open");
        assert!((r.op_rate - 1.5).abs() < 1e-9);
    }

    #[test]
    fn scripts() {
        assert_eq!(Script::parse("select-only"), Ok(Script::SelectOnly));
        assert!(Script::parse("tpcc").unwrap_err().contains("tpcb-like"));
    }
}
