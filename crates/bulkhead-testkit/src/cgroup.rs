//! A scratch cgroup root: a unique cgroup in every hierarchy of this machine, handed to
//! bulkhead as its cgroup root, and removed when the test ends, failed or not (processes
//! killed, cgroups deleted, controllers put back, the library's record of them forgotten).

use bulkhead_cgroups::fs::foreign;
use bulkhead_cgroups::{Layout, Version};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The unified root's cgroup.subtree_control before the first test of this process touched
/// anything: tests run in parallel, so each restores to this, not to what it saw at its start.
static UNIFIED_BEFORE: OnceLock<Option<String>> = OnceLock::new();

pub struct TestRoot {
    /// The cgroup path given to --cgroup-root, e.g. /bulkhead-test-123-0.
    pub cgroup: String,
    /// Its directory in each hierarchy.
    pub dirs: Vec<PathBuf>,
    pub layout: Layout,
    /// Plans written by [`TestRoot::plan`], removed on drop.
    pub plan_dir: PathBuf,
    /// Put the unified root's subtree_control back on drop (see [`TestRoot::new`]).
    unified_subtree_before: Option<String>,
}

impl TestRoot {
    /// A root named `bulkhead-test-<pid>-<n>`. Its drop also turns off the controllers that
    /// were enabled on the unified root since this process's first root was made (a plan's
    /// directive may make bulkhead enable one there).
    pub fn new() -> TestRoot {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let mut root = TestRoot::named(&format!("bulkhead-test-{}-{n}", std::process::id()));
        root.unified_subtree_before = UNIFIED_BEFORE
            .get_or_init(|| {
                let u = root.layout.unified.as_ref()?;
                std::fs::read_to_string(u.mount.join("cgroup.subtree_control")).ok()
            })
            .clone();
        root
    }

    /// A root with this name; the unified root's controllers are left as they are.
    pub fn named(name: &str) -> TestRoot {
        let layout = Layout::detect().expect("mountinfo");
        let mut dirs = Vec::new();
        for h in layout.v1.iter().chain(layout.unified.iter()) {
            let d = h.mount.join(name);
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
            // v1 cpuset starts a new cgroup with no CPUs; v2 inherits them.
            if h.has("cpuset") && h.version == Version::V1 {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(h.mount.join(f)).unwrap();
                    std::fs::write(d.join(f), v.trim()).unwrap();
                }
            }
            dirs.push(d);
        }
        let plan_dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&plan_dir).unwrap();
        TestRoot {
            cgroup: format!("/{name}"),
            dirs,
            layout,
            plan_dir,
            unified_subtree_before: None,
        }
    }

    /// Write a plan file and return its path.
    pub fn plan(&self, text: &str) -> PathBuf {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p = self.plan_dir.join(format!("plan-{n}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    }

    /// This build's bulkhead with this root as its cgroup root.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(crate::bins::this_build());
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

    /// [`TestRoot::run`] that must succeed (its stderr shown when not).
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> Output {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "bulkhead {args:?}: {}",
            crate::stderr(&o)
        );
        o
    }

    /// `bulkhead -c PLAN destroy --kill -q`, which must succeed (a test's clean end).
    pub fn destroy(&self, plan: &str) {
        let o = self.run(&["-c", plan, "destroy", "--kill", "-q"]);
        assert!(o.status.success(), "destroy: {}", crate::stderr(&o));
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

    /// `rel` under the cgroup `under` ("/" for the hierarchy's root) in the hierarchy that
    /// holds `controller` (its v2 name: `io`, not `blkio`), else the unified one.
    pub fn path(&self, controller: &str, under: &str, rel: &str) -> PathBuf {
        let h = self
            .layout
            .hierarchy(controller)
            .or(self.layout.unified.as_ref())
            .expect("a hierarchy");
        h.mount.join(under.trim_start_matches('/')).join(rel)
    }

    /// A slice's directory under this root in the hierarchy that holds `controller`.
    pub fn controller_dir(&self, controller: &str, rel: &str) -> PathBuf {
        self.path(controller, &self.cgroup, rel)
    }

    /// Whether `controller` (its v2 name) is in a v1 hierarchy.
    pub fn v1(&self, controller: &str) -> bool {
        self.layout
            .hierarchy(controller)
            .is_some_and(|h| h.version == Version::V1)
    }

    /// Every cgroup directory under the test root, in all hierarchies.
    pub fn cgroups(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for d in &self.dirs {
            walk(d, &mut out);
        }
        out
    }

    /// Turn off the controllers enabled on the unified root since [`UNIFIED_BEFORE`]; their
    /// mount when it did (its record entries are then stale).
    fn restore_unified(&self) -> Option<&Path> {
        let (u, before) = (
            self.layout.unified.as_ref()?,
            self.unified_subtree_before.as_ref()?,
        );
        let f = u.mount.join("cgroup.subtree_control");
        let now = std::fs::read_to_string(&f).unwrap_or_default();
        for c in now.split_whitespace() {
            if !before.split_whitespace().any(|b| b == c) {
                let _ = std::fs::write(&f, format!("-{c}"));
            }
        }
        Some(&u.mount)
    }
}

impl Default for TestRoot {
    fn default() -> Self {
        TestRoot::new()
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
        if let Err(e) = bulkhead_cgroups::fs::remove_trees(&self.dirs) {
            eprintln!("test cleanup: {e}");
        }
        let unified = self.restore_unified().map(Path::to_path_buf);
        // The library's record of controllers it enabled on cgroups it did not create:
        // forget what was about this root (and the unified root, put back above).
        foreign::forget(|dir, _| {
            self.dirs.iter().any(|d| dir.starts_with(d)) || unified.as_deref() == Some(dir)
        });
        let _ = std::fs::remove_dir_all(&self.plan_dir);
    }
}

/// The hierarchies systemd and systemd-nspawn put a container's cgroups in: the cgroup2
/// mount and the named v1 `name=systemd` mount, each with its key in /proc/PID/cgroup
/// (`0::`, `:name=systemd:`). Read with the product's mountinfo parser.
pub fn systemd_hierarchies() -> Vec<(PathBuf, &'static str)> {
    bulkhead_sys::mountinfo::read()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| {
            let named = |o: &str| o == "name=systemd";
            let key = match m.fstype.as_str() {
                "cgroup2" => "0::",
                "cgroup" if m.super_options.split(',').any(named) => ":name=systemd:",
                _ => return None,
            };
            Some((m.point, key))
        })
        .collect()
}
