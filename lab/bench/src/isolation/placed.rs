//! The placed setup: the real `bulkhead place` binary, run for the scenario on a plan file
//! the bench writes (the bench's plan and the docs' backup-backend rule, docs/POSTGRESQL.md),
//! on the bench's cgroup root, with a state directory of its own. It moves each dump's
//! backend into the helper slice as the backend starts; its `--json` lines say how many it
//! moved.

use bulkhead_sys::process;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The rule, as docs/POSTGRESQL.md gives it: the backup role's backends, in the helper slice.
pub fn rule(helper: &str, server_user: &str) -> String {
    format!(
        "\n[place.bench-backup-backends]\nslice = \"{helper}\"\nuser = \"{server_user}\"\ncmdline = [\"postgres: {} *\"]\n",
        crate::pgdump::ROLE
    )
}

/// A `bulkhead place` the bench started.
pub struct PlaceProc {
    child: Child,
    out: PathBuf,
}

impl Drop for PlaceProc {
    fn drop(&mut self) {
        crate::child::stop(&mut self.child, libc::SIGTERM, Duration::from_secs(3));
    }
}

impl PlaceProc {
    /// Start it on `plan` and wait (up to 30 s) until its first scan is done (its state
    /// file is written).
    pub fn start(
        bulkhead: &Path,
        plan: &Path,
        cgroup_root: &str,
        dir: &Path,
    ) -> Result<PlaceProc, String> {
        let state = dir.join("place-state");
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&state).map_err(|e| format!("{}: {e}", state.display()))?;
        let out = dir.join("place.jsonl");
        let file = std::fs::File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        let mut cmd = Command::new(bulkhead);
        cmd.arg("-c")
            .arg(plan)
            .args(["--backend", "cgroupfs", "--cgroup-root", cgroup_root])
            .args(["place", "--json"])
            .env("BULKHEAD_PLACE_DIR", &state)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::null());
        // It stops if the bench dies.
        process::pass_fds_before_exec(&mut cmd, &[], libc::SIGTERM);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start bulkhead place: {e}"))?;
        let mut p = PlaceProc { child, out };
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = std::fs::read_dir(&state).is_ok_and(|mut d| d.next().is_some());
            if ready {
                return Ok(p);
            }
            if let Ok(Some(st)) = p.child.try_wait() {
                return Err(format!("bulkhead place ended at its start ({st})"));
            }
            if Instant::now() > until {
                return Err("bulkhead place wrote no state file within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop it; how many processes it moved.
    pub fn stop(mut self) -> usize {
        crate::child::stop(&mut self.child, libc::SIGTERM, Duration::from_secs(3));
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"moved\":true"))
            .count()
    }
}
