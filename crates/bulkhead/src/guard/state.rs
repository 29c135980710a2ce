//! The guard's files under /run/bulkhead/guard (or $BULKHEAD_GUARD_DIR):
//!
//! - `lock`: held (flock) by the running guard; its watchdog takes it to put things back.
//! - `holds.json`: written before the guard changes anything; names the sideloads it may
//!   have throttled and how to reach them. Whoever finds it with no guard alive (the
//!   watchdog, `guard --release`, the next guard) puts the plan's values back.
//! - `status.json`: what `bulkhead status` shows, rewritten every second.
//! - `calibration.json`: the last baselines, reused on restart for the same `[guard]`
//!   within the same boot.

use super::control::{Action, Baseline, Harm};
use bulkhead_cgroups::Throttle;
use bulkhead_sys::paths::guard_dir;
use bulkhead_sys::statefile;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How many actions `status` keeps (the last minute's, at most this many).
pub const MAX_RECENT: usize = 200;

pub fn lock_path() -> PathBuf {
    guard_dir().join("lock")
}
pub fn holds_path() -> PathBuf {
    guard_dir().join("holds.json")
}
pub fn status_path() -> PathBuf {
    guard_dir().join("status.json")
}
pub fn calibration_path() -> PathBuf {
    guard_dir().join("calibration.json")
}

/// What a guard may have changed, for whoever puts it back.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Holds {
    pub pid: u32,
    /// The plan file (`None`: the default path or the embedded plan).
    pub config: Option<PathBuf>,
    pub cgroup_root: String,
    /// `auto`, `cgroupfs` or `systemd`.
    pub backend: String,
    pub sideloads: Vec<String>,
    pub since: f64,
}

/// An action as logged and shown.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Logged {
    /// Seconds since the epoch.
    pub at: f64,
    /// Seconds since the guard started.
    pub t: f64,
    pub slice: String,
    pub kind: String,
    pub throttle: Throttle,
    /// The throttle in words.
    pub now: String,
    pub signal: String,
    pub harm: f64,
    pub why: String,
}

impl Logged {
    pub fn new(a: &Action, slice: &str, started: f64) -> Logged {
        Logged {
            at: started + a.t,
            t: a.t,
            slice: slice.to_string(),
            kind: a.kind.to_string(),
            throttle: a.to,
            now: a.to.describe(),
            signal: a.signal.to_string(),
            harm: a.harm,
            why: a.why.clone(),
        }
    }
}

/// One sideload in `status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SideStatus {
    pub slice: String,
    pub throttle: Throttle,
    pub now: String,
    /// CPUs and bytes/s it used in the last period.
    pub cpus: f64,
    pub io_bps: f64,
}

/// The latest reading, for people.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Signals {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_stall: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_stall: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_stall: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_per_run_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_cpus: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_ms: Option<f64>,
    pub steal: f64,
}

/// `status.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    pub pid: u32,
    pub started: f64,
    pub updated: f64,
    pub plan: String,
    pub backend: String,
    pub protect: String,
    pub period_ms: f64,
    /// calibrating, guarding, stopped
    pub phase: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration_left_s: Option<f64>,
    pub baseline: Baseline,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibrated_at: Option<f64>,
    pub harm: HarmPair,
    pub signals: Signals,
    pub sideloads: Vec<SideStatus>,
    pub actions_last_minute: Vec<Logged>,
    /// The guard's own CPU use since it started, percent of one CPU.
    pub cost_cpu_percent: f64,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct HarmPair {
    pub fast: HarmValues,
    pub slow: HarmValues,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct HarmValues {
    pub cpu: f64,
    pub io: f64,
    pub memory: f64,
    pub probe: f64,
}

impl From<Harm> for HarmValues {
    fn from(h: Harm) -> Self {
        HarmValues {
            cpu: h.cpu,
            io: h.io,
            memory: h.memory,
            probe: h.probe,
        }
    }
}

/// A saved calibration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Calibration {
    /// The `[guard]` section and slices it was taken for.
    pub key: String,
    pub boot_id: String,
    pub at: f64,
    pub baseline: Baseline,
}

pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Write a file whole (a reader never sees half of it): a new temporary file with a unique
/// name (O_EXCL|O_NOFOLLOW: nothing planted in the directory is written through), renamed
/// over the old one.
pub fn write_json<T: Serialize>(path: &Path, v: &T) -> std::io::Result<()> {
    if let Some(d) = path.parent() {
        statefile::ensure_dir(d, 0o755)?;
    }
    let text = serde_json::to_vec_pretty(v).map_err(std::io::Error::other)?;
    statefile::write_atomic(path, &text, 0o644)
}

/// The guard's files are small; anything larger is not one of them.
const MAX_JSON: u64 = 16 << 20;

/// Read one of the guard's files: a regular file, not through a symlink (O_NOFOLLOW).
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    serde_json::from_slice(&statefile::read(path, MAX_JSON).ok()?).ok()
}

/// The guard's status, if a guard ever ran since boot.
pub fn read_status() -> Option<Status> {
    read_json(&status_path())
}

/// `--log FILE`: one JSON line per action, appended.
pub struct ActionLog(fs::File);

impl ActionLog {
    /// Open `path` to append to (made 0640 if missing): never through a symlink, never a
    /// FIFO or device, never a file another user owns or one with other hard links.
    pub fn open(path: &Path) -> std::io::Result<ActionLog> {
        statefile::open_append_log(path).map(ActionLog)
    }

    pub fn write(&mut self, l: &Logged) {
        if let Ok(mut line) = serde_json::to_vec(l) {
            line.push(b'\n');
            let _ = self.0.write_all(&line);
        }
    }
}
