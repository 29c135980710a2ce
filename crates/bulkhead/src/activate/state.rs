//! What `bulkhead status` shows about served sockets: one JSON file per socket under
//! /run/bulkhead/sockets, written by the `serve` process that owns it.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A socket's state and counters.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SocketStatus {
    pub name: String,
    /// The `bulkhead serve` process.
    pub pid: u32,
    pub mode: String,
    pub listen: Vec<String>,
    pub backend: Option<String>,
    /// idle, starting, ready, stopping, freezing, frozen or backoff.
    pub state: String,
    /// The target's process (a `bulkhead spawn` or `bulkhead run`), while it runs.
    pub target_pid: Option<u32>,
    pub connections_active: u64,
    pub connections_total: u64,
    /// Connections closed at once because the target could not be started (or its starts
    /// failed in a row and serve backs off).
    #[serde(default)]
    pub connections_refused: u64,
    /// Client -> target bytes.
    pub bytes_in: u64,
    /// Target -> client bytes.
    pub bytes_out: u64,
    pub cold_starts: u64,
    pub last_start_ms: Option<f64>,
    /// How long the cold starts took.
    #[serde(default)]
    pub start_latency: super::latency::StartLatency,
    pub failed_starts: u64,
    pub last_error: Option<String>,
    /// How often each limit was hit.
    #[serde(default)]
    pub limits: super::limits::LimitsStatus,
    /// What an idle target becomes: stop or freeze.
    #[serde(default)]
    pub on_idle: String,
    /// Times the target was frozen, and thawed by a connection (or to stop it).
    #[serde(default)]
    pub freezes: u64,
    #[serde(default)]
    pub thaws: u64,
    #[serde(default)]
    pub last_thaw_ms: Option<f64>,
    /// While frozen: its processes' resident memory when they froze.
    #[serde(default)]
    pub frozen_memory_bytes: Option<u64>,
}

pub fn dir() -> PathBuf {
    bulkhead_sys::paths::sockets_dir()
}

pub fn path(name: &str) -> PathBuf {
    dir().join(format!("{name}.json"))
}

fn alive(pid: u32) -> bool {
    pid > 0 && bulkhead_sys::process::alive(pid)
}

/// Read a state file; a symlink in its place is not followed.
fn read_file(p: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text)
}

/// The socket another live `serve` already owns under this name.
pub fn owner(name: &str) -> Option<u32> {
    let text = read_file(&path(name)).ok()?;
    let s: SocketStatus = serde_json::from_str(&text).ok()?;
    (alive(s.pid) && s.pid != std::process::id()).then_some(s.pid)
}

/// Write atomically (a reader never sees half a file): a new temporary file (O_EXCL and
/// O_NOFOLLOW, so nothing planted under its name is written through), then a rename over
/// the old one.
pub fn write(s: &SocketStatus) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir())?;
    let p = path(&s.name);
    let tmp = p.with_extension(format!("json.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let text = serde_json::to_vec(s).map_err(std::io::Error::other)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    if let Err(e) = f.write_all(&text) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    drop(f);
    std::fs::rename(&tmp, &p)
}

pub fn remove(name: &str) {
    let _ = std::fs::remove_file(path(name));
}

/// Every socket a live `serve` owns, by name. Files left by a killed `serve` are removed.
pub fn read_all() -> Vec<SocketStatus> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir()) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Ok(text) = read_file(&p) else {
            continue;
        };
        match serde_json::from_str::<SocketStatus>(&text) {
            Ok(s) if alive(s.pid) => out.push(s),
            _ => {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
