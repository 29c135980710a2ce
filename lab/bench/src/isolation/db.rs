//! The database under test: Redis (the RESP load generator drives it) or PostgreSQL
//! (pgbench drives it), started in the server slice, with what the scenarios need from it:
//! its PID, whether it died, a checkpoint before each run, the command of its load, and the
//! guard's probe.

use crate::postgres::{Postgres, Script};
use crate::redis::Redis;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Which database, and how it is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "db")]
pub enum DbKind {
    Redis,
    Postgres { script: Script, scale: u32 },
}

impl DbKind {
    pub fn name(self) -> &'static str {
        match self {
            DbKind::Redis => "redis",
            DbKind::Postgres { .. } => "postgres",
        }
    }
}

/// How the load generator is told what to do (from the bench's settings).
pub struct LoadShape {
    pub connections: usize,
    pub keys: u64,
    pub value_size: usize,
    pub get_ratio: f64,
}

pub enum Server {
    Redis(Redis),
    Postgres(Postgres, Script, u32),
}

pub struct StartIn<'a> {
    pub dir: &'a Path,
    pub port: u16,
    /// Redis: an append-only file with an fsync per write (the I/O scenarios).
    pub aof: bool,
    pub procs_files: &'a [PathBuf],
    /// PostgreSQL's bin directory (None: the newest under /usr/lib/postgresql) and the
    /// settings its server is given.
    pub pg_bin: Option<&'a Path>,
    pub pg_settings: &'a [(String, String)],
}

impl Server {
    /// Start it in the slice and load its data.
    pub fn start(kind: DbKind, at: &StartIn, shape: &LoadShape) -> Result<Server, String> {
        match kind {
            DbKind::Redis => {
                let r = Redis::start(&crate::redis::Options {
                    port: at.port,
                    dir: at.dir,
                    aof_always: at.aof,
                    procs_files: at.procs_files,
                })?;
                crate::loadgen::preload(r.addr, shape.keys, shape.value_size)?;
                Ok(Server::Redis(r))
            }
            DbKind::Postgres { script, scale } => {
                let pg = Postgres::start(&crate::postgres::Options {
                    port: at.port,
                    dir: at.dir,
                    procs_files: at.procs_files,
                    bin: at.pg_bin,
                    settings: at.pg_settings,
                })?;
                pg.load(scale)?;
                Ok(Server::Postgres(pg, script, scale))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Server::Redis(r) => r.pid,
            Server::Postgres(p, ..) => p.pid,
        }
    }

    /// PostgreSQL's bin directory (None for Redis).
    pub fn pg_bin(&self) -> Option<&Path> {
        match self {
            Server::Redis(_) => None,
            Server::Postgres(p, ..) => Some(p.bin()),
        }
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        match self {
            Server::Redis(r) => r.exited(),
            Server::Postgres(p, ..) => p.exited(),
        }
    }

    pub fn stop(&mut self) {
        match self {
            Server::Redis(r) => r.stop(),
            Server::Postgres(p, ..) => p.stop(),
        }
    }

    /// Before each run: PostgreSQL writes out what the last run dirtied (a checkpoint), so
    /// no run pays for another's.
    pub fn before_run(&self) -> Result<(), String> {
        match self {
            Server::Redis(_) => Ok(()),
            Server::Postgres(p, ..) => p.checkpoint(),
        }
    }

    /// The guard's probe: Redis answers PING on its main thread (blocked while it fsyncs);
    /// PostgreSQL's postmaster accepts connections whatever its backends wait for, so a TCP
    /// connect is all a probe can time there.
    pub fn probe(&self) -> String {
        match self {
            Server::Redis(r) => format!("redis:{}", r.addr),
            Server::Postgres(p, ..) => format!("tcp:127.0.0.1:{}", p.port),
        }
    }

    /// The load's command: `bench loadgen` for Redis, `bench pgload` (pgbench) for
    /// PostgreSQL; either prints one [`crate::LoadResult`] as JSON.
    pub fn load_command(
        &self,
        exe: &Path,
        shape: &LoadShape,
        rate: Option<u64>,
        warmup: Duration,
        duration: Duration,
        log_dir: &Path,
    ) -> Command {
        let mut c = Command::new(exe);
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        match self {
            Server::Postgres(p, script, _) => {
                c.args(["pgload", "--port", &p.port.to_string()])
                    .args(["--clients", &shape.connections.to_string()])
                    .args(["--script", script.name()])
                    .arg("--bin")
                    .arg(p.bin())
                    .arg("--log-dir")
                    .arg(log_dir);
            }
            Server::Redis(r) => {
                c.args(["loadgen", "--addr", &r.addr.to_string()])
                    .args(["--connections", &shape.connections.to_string()])
                    .args(["--keys", &shape.keys.to_string()])
                    .args(["--value-size", &shape.value_size.to_string()])
                    .args(["--get-ratio", &shape.get_ratio.to_string()]);
            }
        }
        c.args(["--warmup", &ms(warmup), "--duration", &ms(duration)])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(r) = rate {
            c.args(["--rate", &r.to_string()]);
        }
        c
    }

    /// For the report: `redis-server` / `PostgreSQL 15.18, pgbench tpcb-like at scale 10`.
    pub fn describe(&self) -> String {
        match self {
            Server::Postgres(p, script, scale) => {
                let v = Command::new(p.bin().join("postgres"))
                    .arg("--version")
                    .stdin(Stdio::null())
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                    .unwrap_or_default();
                format!(
                    "{v}, pgbench {} at scale {scale} (fsync and synchronous commit on)",
                    script.name()
                )
            }
            Server::Redis(_) => "redis-server".into(),
        }
    }
}
