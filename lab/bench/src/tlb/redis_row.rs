//! The end-to-end rows: Redis plain and under `bulkhead run --hugepages thp`, alternating
//! each round, GET throughput from the RESP load generator.

use super::progress::Progress;
use super::report::{RedisReport, RedisVariant};
use super::{RedisSpec, Spec};
use crate::loadgen::{self, LoadSpec};
use crate::redis::{self, Redis};
use crate::stats;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The Redis rows: plain and under `bulkhead run --hugepages thp`, alternating.
pub(super) struct RedisRun {
    spec: RedisSpec,
    bulkhead: PathBuf,
    dir: PathBuf,
    variants: Vec<RedisVariant>,
    skipped: Option<String>,
}

fn rollup_coverage(pid: u32) -> f64 {
    let r = bulkhead::actions::hugepages::rollup(pid);
    if r.anonymous == 0 {
        0.0
    } else {
        r.anon_huge as f64 / r.anonymous as f64
    }
}

impl RedisRun {
    pub(super) fn new(spec: &Spec, r: &RedisSpec) -> RedisRun {
        let mk = |name: &str, command: String| RedisVariant {
            name: name.into(),
            command,
            op_rates: vec![],
            median_op_rate: f64::NAN,
            ratios: vec![],
            ratio_median: f64::NAN,
            ratio_min: f64::NAN,
            ratio_max: f64::NAN,
            thp_coverage: vec![],
            errors: 0,
            skipped: None,
        };
        let skipped = redis::find_server()
            .is_none()
            .then(|| "redis-server is not installed (apt-get install redis-server)".to_string());
        RedisRun {
            spec: r.clone(),
            bulkhead: spec.bulkhead.clone(),
            dir: std::env::temp_dir().join(format!("bulkhead-bench-tlb-{}", std::process::id())),
            variants: vec![
                mk("plain", "redis-server".into()),
                mk(
                    "run --hugepages thp",
                    "bulkhead run --hugepages thp --no-verify -- redis-server".into(),
                ),
            ],
            skipped,
        }
    }

    pub(super) fn round(&mut self, round: usize, p: &Progress) -> Result<(), String> {
        if self.skipped.is_some() {
            p.bar.inc(2);
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        for k in 0..2 {
            let vi = (round + k) % 2;
            if self.variants[vi].skipped.is_some() {
                p.bar.inc(1);
                continue;
            }
            p.say(&format!(
                "round {}: Redis {}",
                round + 1,
                self.variants[vi].name
            ));
            let port = redis::free_port()?;
            let o = redis::Options {
                port,
                dir: &self.dir,
                aof_always: false,
                procs_files: &[],
            };
            let wrapper: Vec<OsString> = if vi == 1 {
                [
                    self.bulkhead.as_os_str(),
                    "-q".as_ref(),
                    "run".as_ref(),
                    "--hugepages".as_ref(),
                    "thp".as_ref(),
                    "--no-verify".as_ref(),
                    "--".as_ref(),
                ]
                .iter()
                .map(|s| s.to_os_string())
                .collect()
            } else {
                vec![]
            };
            let mut server = match Redis::start_wrapped(&o, &wrapper) {
                Ok(s) => s,
                Err(e) if vi == 1 => {
                    // `run --hugepages thp` refused (THP off, say): say so, keep the rest.
                    self.variants[vi].skipped = Some(e);
                    p.bar.inc(1);
                    continue;
                }
                Err(e) => return Err(e),
            };
            loadgen::preload(server.addr, self.spec.keys, self.spec.value_size)?;
            let cov = rollup_coverage(server.pid);
            let r = loadgen::run(&LoadSpec {
                addr: server.addr,
                connections: self.spec.connections,
                warmup: self.spec.warmup,
                duration: self.spec.duration,
                rate: None,
                get_ratio: 1.0,
                keys: self.spec.keys,
                value_size: self.spec.value_size,
                timeout: Duration::from_secs(2),
            })?;
            if let Some(st) = server.exited() {
                return Err(format!("redis-server exited during the measurement: {st}"));
            }
            server.stop();
            let v = &mut self.variants[vi];
            v.op_rates.push(r.op_rate);
            v.thp_coverage.push(cov);
            v.errors += r.errors;
            p.bar.inc(1);
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> (Option<RedisReport>, Option<String>) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(s) = self.skipped {
            return (None, Some(s));
        }
        let base = self.variants[0].op_rates.clone();
        for v in &mut self.variants {
            let n = v.op_rates.len().min(base.len());
            v.ratios = (0..n).map(|i| v.op_rates[i] / base[i]).collect();
            v.median_op_rate = stats::interpolated(&v.op_rates, 0.5);
            v.ratio_median = stats::interpolated(&v.ratios, 0.5);
            v.ratio_min = stats::interpolated(&v.ratios, 0.0);
            v.ratio_max = stats::interpolated(&v.ratios, 1.0);
        }
        let server = redis::find_server()
            .and_then(|s| std::process::Command::new(s).arg("--version").output().ok())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        (
            Some(RedisReport {
                server,
                keys: self.spec.keys,
                value_size: self.spec.value_size,
                connections: self.spec.connections,
                duration_s: self.spec.duration.as_secs_f64(),
                variants: self.variants,
            }),
            None,
        )
    }
}
