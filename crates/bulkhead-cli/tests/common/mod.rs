//! Test support: a unique cgroup root per test in every hierarchy of this machine, removed
//! (processes killed, cgroups deleted, controllers put back) even when the test fails.

#![allow(dead_code)]

pub mod container;
pub mod rootfs;
pub mod serve;

use bulkhead::cgroup::Layout;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The unified root's cgroup.subtree_control before the first test of this process touched
/// anything: tests run in parallel, so each restores to this, not to what it saw at its start.
static UNIFIED_BEFORE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// True when the test can run. Outside CI a missing prerequisite skips with a message; in CI
/// (CI=true) it fails the run, so a broken machine is never reported green.
pub fn prerequisites() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let problem = if !nix::unistd::Uid::effective().is_root() {
        Some("these tests need root (cgroups)")
    } else if !Path::new("/proc/self/mountinfo").exists()
        || Layout::detect()
            .map(|l| l.primary().is_none())
            .unwrap_or(true)
    {
        Some("no cgroup hierarchy is mounted")
    } else {
        None
    };
    match problem {
        None => true,
        Some(p) if ci => panic!("prerequisite missing in CI: {p}"),
        Some(p) => {
            eprintln!("SKIPPED: {p}");
            false
        }
    }
}

pub struct TestRoot {
    /// The cgroup path given to --cgroup-root, e.g. /bulkhead-test-123-0.
    pub cgroup: String,
    pub dirs: Vec<PathBuf>,
    pub layout: Layout,
    unified_subtree_before: Option<String>,
    pub plan_dir: PathBuf,
}

impl TestRoot {
    pub fn new() -> TestRoot {
        let layout = Layout::detect().expect("mountinfo");
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("bulkhead-test-{}-{n}", std::process::id());
        let mut dirs = Vec::new();
        for h in layout.v1.iter().chain(layout.unified.iter()) {
            let d = h.mount.join(&name);
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
            // v1 cpuset starts a new cgroup with no CPUs; v2 inherits them.
            if h.has("cpuset") && h.version == bulkhead::cgroup::Version::V1 {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(h.mount.join(f)).unwrap();
                    std::fs::write(d.join(f), v.trim()).unwrap();
                }
            }
            dirs.push(d);
        }
        let unified_subtree_before = UNIFIED_BEFORE
            .get_or_init(|| {
                layout.unified.as_ref().and_then(|u| {
                    std::fs::read_to_string(u.mount.join("cgroup.subtree_control")).ok()
                })
            })
            .clone();
        let plan_dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&plan_dir).unwrap();
        TestRoot {
            cgroup: format!("/{name}"),
            dirs,
            layout,
            unified_subtree_before,
            plan_dir,
        }
    }

    /// Write a plan file and return its path.
    pub fn plan(&self, text: &str) -> PathBuf {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p = self.plan_dir.join(format!("plan-{n}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bulkhead"));
        c.env("BULKHEAD_CGROUP_ROOT", &self.cgroup)
            .env_remove("BULKHEAD_CONFIG");
        c
    }

    /// `bulkhead run --slice SLICE -- sh -c SCRIPT`, ready to spawn or run.
    pub fn sh_in(&self, slice: &str, script: &str) -> Command {
        let mut c = self.cmd();
        c.args(["run", "--slice", slice, "--", "sh", "-c", script]);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("run bulkhead")
    }

    /// The directory of a slice path (e.g. "db.slice/db-helper.slice") in a hierarchy whose
    /// mount ends with `mount_suffix` ("cpu", "memory", "unified").
    pub fn dir(&self, mount_suffix: &str, rel: &str) -> PathBuf {
        let d = self
            .dirs
            .iter()
            .find(|d| d.parent().unwrap().ends_with(mount_suffix))
            .unwrap_or_else(|| panic!("no {mount_suffix} hierarchy"));
        d.join(rel)
    }

    /// Every cgroup directory under the test root, in all hierarchies.
    pub fn cgroups(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for d in &self.dirs {
            walk(d, &mut out);
        }
        out
    }
}

fn walk(d: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                out.push(e.path());
                walk(&e.path(), out);
            }
        }
    }
}

impl Drop for TestRoot {
    fn drop(&mut self) {
        if let Err(e) = bulkhead::cgroup::fs::remove_trees(&self.dirs) {
            eprintln!("test cleanup: {e}");
        }
        if let (Some(u), Some(before)) = (&self.layout.unified, &self.unified_subtree_before) {
            let f = u.mount.join("cgroup.subtree_control");
            let now = std::fs::read_to_string(&f).unwrap_or_default();
            for c in now.split_whitespace() {
                if !before.split_whitespace().any(|b| b == c) {
                    let _ = std::fs::write(&f, format!("-{c}"));
                }
            }
        }
        // Forget bookkeeping about this root.
        let state = Path::new("/run/bulkhead/enabled-controllers");
        if let Ok(t) = std::fs::read_to_string(state) {
            let keep: String = t
                .lines()
                .filter(|l| {
                    !l.contains(self.cgroup.trim_start_matches('/'))
                        && !l.ends_with("/unified")
                        && !l.ends_with("/cgroup")
                })
                .map(|l| format!("{l}\n"))
                .collect();
            let _ = if keep.is_empty() {
                std::fs::remove_file(state)
            } else {
                std::fs::write(state, keep)
            };
        }
        let _ = std::fs::remove_dir_all(&self.plan_dir);
    }
}

/// The bulkhead binary: `BULKHEAD_UNDER_TEST` (the escape suite takes an older build there,
/// to show it falling to the attacks), else this build's, else the one beside this test
/// binary (in a `scripts/vmhost` guest the build's absolute path does not exist, the target
/// dir is mounted at /mnt/target).
pub fn bin() -> std::ffi::OsString {
    if let Some(b) = std::env::var_os("BULKHEAD_UNDER_TEST") {
        return b;
    }
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_bulkhead"));
    if built.exists() {
        return built.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.parent()?.join("bulkhead")))
        .filter(|p| p.exists())
        .map(Into::into)
        .unwrap_or_else(|| built.into())
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_string()
}
