//! The escape tests' guard: slices applied under a test root and `bulkhead guard` of the
//! binary under test with a state directory of its own, stopped and released on drop.

use crate::common::{stderr, TestRoot};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Slices applied under a test root, a guard of the binary under test with its own state
/// directory; stopped and released on drop.
pub(crate) struct Guarded {
    pub(crate) t: TestRoot,
    pub(crate) plan: PathBuf,
    pub(crate) state: PathBuf,
    pub(crate) guard: Option<Child>,
    pub(crate) procs: Vec<Child>,
}

impl Guarded {
    /// `more`: the `[guard]` lines beside protect, sideloads and period (calibration, probe).
    pub(crate) fn new(more: &str) -> Guarded {
        let t = TestRoot::new();
        let plan = t.plan(&format!(
            "[slice.db-server]\nCPUWeight = 100\n[slice.db-helper]\nCPUWeight = 100\n\n\
             [guard]\nprotect = \"db-server\"\nsideloads = [\"db-helper\"]\nperiod = \"100ms\"\n{more}"
        ));
        let state = t.plan_dir.join("guard-state");
        let g = Guarded {
            t,
            plan,
            state,
            guard: None,
            procs: vec![],
        };
        let o = g.cmd().arg("apply").output().unwrap();
        assert!(o.status.success(), "apply: {}", stderr(&o));
        g
    }

    pub(crate) fn cmd(&self) -> Command {
        let mut c = Command::new(crate::common::bin());
        c.env("BULKHEAD_CGROUP_ROOT", &self.t.cgroup)
            .env("BULKHEAD_GUARD_DIR", &self.state)
            .env_remove("BULKHEAD_CONFIG")
            .arg("-c")
            .arg(&self.plan);
        c
    }

    pub(crate) fn start_guard(&mut self) {
        let c = self
            .cmd()
            .arg("guard")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.guard = Some(c);
    }

    pub(crate) fn status(&self) -> serde_json::Value {
        std::fs::read_to_string(self.state.join("status.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(mut g) = self.guard.take() {
            let _ = bulkhead::sys::process::kill(g.id() as i32, libc::SIGTERM);
            let t0 = Instant::now();
            while g.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = g.kill();
            let _ = g.wait();
        }
        for p in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
        let _ = self.cmd().args(["guard", "--release", "-q"]).output();
    }
}
