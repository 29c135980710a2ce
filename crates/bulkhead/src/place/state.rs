//! `place`'s state file: who runs the plan's placement, with which plan, and its heartbeat,
//! so that `check` can say "place is not running" or "place runs an older plan". One file per
//! cgroup root (`/run/bulkhead/place/ROOT.json`, `-` for `/`; `BULKHEAD_PLACE_DIR` moves it), written atomically (a new file
//! renamed over the old one) every [`HEARTBEAT`] and removed when `place` stops.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a running `place` writes its state.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// A heartbeat older than this says `place` no longer runs (three missed, and some slack for a
/// host under load).
pub const STALE: Duration = Duration::from_secs(45);

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlaceState {
    pub pid: i32,
    /// The process's start time (clock ticks since boot, /proc/PID/stat): a PID reused
    /// since is not `place`.
    pub start: u64,
    /// Seconds since the epoch of the last write.
    pub heartbeat: u64,
    /// The plan's source (`/etc/bulkhead/bulkhead.toml`).
    pub plan: String,
    /// [`digest`] of the plan's text as `place` read it (at its start or last SIGHUP).
    pub digest: String,
}

/// The state file of the slices under `cgroup_root`.
pub fn file(cgroup_root: &str) -> PathBuf {
    let name = cgroup_root.trim_matches('/').replace('/', "-");
    let name = if name.is_empty() {
        "-".to_string()
    } else {
        name
    };
    bulkhead_sys::paths::place_dir().join(format!("{name}.json"))
}

/// A short fingerprint of a plan's text (FNV-1a, 64 bits, hex): the same text gives the same
/// digest in every build.
pub fn digest(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

pub fn now_secs() -> u64 {
    bulkhead_sys::process::unix_now() as u64
}

/// Write `s` to `path` whole (a reader sees the old state or the new one), readable by all:
/// `check` runs as any user.
pub fn write(path: &Path, s: &PlaceState) -> std::io::Result<()> {
    use bulkhead_sys::statefile;
    if let Some(dir) = path.parent() {
        statefile::ensure_dir(dir, 0o755)?;
    }
    let text = serde_json::to_vec(s).map_err(std::io::Error::other)?;
    statefile::write_atomic(path, &text, 0o644)
}

/// The state file's content; None when there is none (or it cannot be read as one).
pub fn read(path: &Path) -> Option<PlaceState> {
    let bytes = bulkhead_sys::statefile::read(path, 64 * 1024).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Whether the state's process runs still (its PID names a process started when it was).
pub fn alive(s: &PlaceState) -> bool {
    u32::try_from(s.pid)
        .ok()
        .and_then(bulkhead_sys::process::start_time)
        .is_some_and(|t| t == s.start)
}

/// A running `place`'s heartbeat: written at the start and every [`HEARTBEAT`], removed when
/// dropped (the run's end).
pub struct Beat {
    path: PathBuf,
    state: PlaceState,
    last: std::time::Instant,
}

impl Beat {
    /// The first write; a failure is said once and the run goes on without a state file.
    pub fn start(cgroup_root: &str, plan: String, digest: String) -> Option<Beat> {
        let pid = std::process::id() as i32;
        let state = PlaceState {
            pid,
            start: bulkhead_sys::process::start_time(std::process::id()).unwrap_or(0),
            heartbeat: now_secs(),
            plan,
            digest,
        };
        let path = file(cgroup_root);
        if let Err(e) = write(&path, &state) {
            eprintln!(
                "bulkhead: warning: place: cannot write its state file {}: {e}; check cannot tell whether place runs",
                path.display()
            );
            return None;
        }
        Some(Beat {
            path,
            state,
            last: std::time::Instant::now(),
        })
    }

    /// Write again when a heartbeat is due.
    pub fn beat(&mut self) {
        if self.last.elapsed() < HEARTBEAT {
            return;
        }
        self.now();
    }

    /// The plan was read again (SIGHUP): its digest, written at once.
    pub fn plan(&mut self, plan: String, digest: String) {
        self.state.plan = plan;
        self.state.digest = digest;
        self.now();
    }

    fn now(&mut self) {
        self.state.heartbeat = now_secs();
        self.last = std::time::Instant::now();
        let _ = write(&self.path, &self.state);
    }
}

impl Drop for Beat {
    fn drop(&mut self) {
        // Only our own: another `place` may have started since and written its state.
        if read(&self.path).is_some_and(|s| s.pid == self.state.pid) {
            let _ = bulkhead_sys::statefile::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_per_cgroup_root_and_a_stable_digest() {
        assert!(file("/").ends_with("place/-.json"));
        assert!(file("/bh-test-1/x").ends_with("place/bh-test-1-x.json"));
        assert_eq!(digest(""), "cbf29ce484222325");
        assert_eq!(digest("a"), "af63dc4c8601ec8c");
        assert_ne!(digest("[slice.a]\n"), digest("[slice.b]\n"));
    }

    #[test]
    fn the_state_is_written_whole_and_read_back() {
        let d = std::env::temp_dir().join(format!("bh-place-state-{}", std::process::id()));
        let p = d.join("x.json");
        let s = PlaceState {
            pid: std::process::id() as i32,
            start: bulkhead_sys::process::start_time(std::process::id()).unwrap(),
            heartbeat: now_secs(),
            plan: "p.toml".into(),
            digest: digest("x"),
        };
        write(&p, &s).unwrap();
        assert_eq!(read(&p), Some(s.clone()));
        assert!(alive(&s));
        assert!(!alive(&PlaceState { start: 1, ..s }));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
