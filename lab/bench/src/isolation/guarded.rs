//! The guarded setup: the real `bulkhead guard` binary, started on a plan file the bench
//! writes (the user's plan, the load generator's slice, and a `[guard]` section unless the
//! plan has its own), on the bench's cgroup root, with a state directory of its own. Its
//! action log marks the chart; its status file gives its own CPU cost.

use bulkhead::actions::guard::{Logged, Status};
use bulkhead_sys::process;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The load generator's slice, added when the plan has none.
pub const LOADGEN_SLICE: &str =
    "[slice.loadgen]\nDescription = \"bulkhead's load generator\"\nCPUWeight = 10000\n";

/// The plan file the bench applies and the guard reads; `tuning` goes into the guard's
/// section as written (`probe = "..."`, `io_keep = "5%"`).
pub fn plan_text(
    user: &str,
    has_loadgen: bool,
    has_guard: bool,
    server: &str,
    helper: &str,
    calibration: Duration,
    tuning: &str,
) -> String {
    let mut t = user.to_string();
    if !t.ends_with('\n') {
        t.push('\n');
    }
    if !has_loadgen {
        t.push('\n');
        t.push_str(LOADGEN_SLICE);
    }
    if !has_guard {
        t.push_str(&format!(
            "\n[guard]\nprotect = \"{server}\"\nsideloads = [\"{helper}\"]\ncalibration = \"{}ms\"\n{tuning}",
            calibration.as_millis()
        ));
    }
    t
}

/// A guard the bench started.
pub struct GuardProc {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
    /// Its stdout and stderr (and its watchdog's).
    out: PathBuf,
}

/// What it did.
#[derive(Debug, Default)]
pub struct GuardOutcome {
    pub actions: Vec<Logged>,
    pub cost_cpu_percent: Option<f64>,
}

/// Where the bench runs the guard: the plan, the cgroup root, its state directory.
pub struct Where<'a> {
    pub bulkhead: &'a Path,
    pub plan: &'a Path,
    pub cgroup_root: &'a str,
    pub dir: &'a Path,
}

impl GuardProc {
    /// Start it and wait until it runs its loop (calibrating or guarding).
    pub fn start(
        w: &Where,
        tag: &str,
        limit: Duration,
        recalibrate: bool,
    ) -> Result<GuardProc, String> {
        let log = w.dir.join(format!("guard-{tag}.jsonl"));
        let out_path = w.dir.join(format!("guard-{tag}.out"));
        let out =
            std::fs::File::create(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(w.dir.join("status.json"));
        let mut cmd = Command::new(w.bulkhead);
        cmd.arg("-c")
            .arg(w.plan)
            .args([
                "--backend",
                "cgroupfs",
                "--cgroup-root",
                w.cgroup_root,
                "guard",
            ])
            .arg("--log")
            .arg(&log)
            .args(["--duration", &format!("{}ms", limit.as_millis())])
            .env("BULKHEAD_GUARD_DIR", w.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().map_err(|e| e.to_string())?))
            .stderr(Stdio::from(out));
        if recalibrate {
            cmd.arg("--recalibrate");
        }
        // The guard stops (and puts the helper back) if the bench dies.
        process::pass_fds_before_exec(&mut cmd, &[], libc::SIGTERM);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the guard: {e}"))?;
        let mut g = GuardProc {
            child,
            dir: w.dir.to_path_buf(),
            log,
            out: out_path,
        };
        g.wait_running()?;
        Ok(g)
    }

    fn status(&self) -> Option<Status> {
        serde_json::from_slice(&std::fs::read(self.dir.join("status.json")).ok()?).ok()
    }

    fn wait_running(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!(
                    "the guard exited at its start ({st}): {}",
                    self.stderr()
                ));
            }
            if self.status().is_some_and(|s| s.pid == self.child.id()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("the guard did not start its loop within 10 s".into())
    }

    fn stderr(&mut self) -> String {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// Stop it (SIGTERM: it gives the helper its plan back) and read what it did.
    pub fn stop(mut self) -> Result<GuardOutcome, String> {
        let _ = process::kill(self.child.id() as i32, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err("the guard did not stop within 10 s of SIGTERM".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if !status.success() {
            return Err(format!("the guard failed ({status}): {}", self.stderr()));
        }
        let actions = std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        Ok(GuardOutcome {
            actions,
            cost_cpu_percent: self.status().map(|s| s.cost_cpu_percent),
        })
    }
}
