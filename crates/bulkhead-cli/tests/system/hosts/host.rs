//! The host a check runs on, and its slices: made by systemd where it is PID 1 (the default
//! backend, as users get them), else by cgroupfs under a unique test root. Slices are named
//! `bh<pid>x<n>-<name>` under a parent of their own, and destroyed (with their processes)
//! when the `Host` is dropped, also when the check fails.

use crate::common::{self, TestRoot};
use bulkhead::cgroup::{Layout, Version};
use bulkhead::plan::SliceName;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub struct Host {
    pub layout: Layout,
    /// systemd is PID 1 and makes the slices.
    pub systemd: bool,
    /// The parent slice every check's slices are in.
    pub parent: String,
    plan: PathBuf,
    tmp: PathBuf,
    root: Option<TestRoot>,
}

impl Host {
    /// None (after saying why) when the suite cannot run here: see `common::prerequisites`.
    pub fn new() -> Option<Host> {
        if !common::prerequisites() {
            return None;
        }
        let layout = Layout::detect().expect("mountinfo");
        let systemd = bulkhead::host::pid1_is_systemd();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let parent = format!("bh{}x{n}", std::process::id());
        let tmp = Path::new("/var/tmp").join(format!("bulkhead-hosts-{parent}"));
        std::fs::create_dir_all(&tmp).unwrap();
        let root = (!systemd).then(TestRoot::new);
        Some(Host {
            layout,
            systemd,
            plan: tmp.join("plan.toml"),
            tmp,
            parent,
            root,
        })
    }

    /// A scratch directory on a disk file system (page cache, swap and loop files), removed
    /// with the host.
    pub fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// `v2 systemd`, `hybrid cgroupfs`: the start of every report line.
    pub fn label(&self) -> String {
        let layout = match (self.layout.v1.is_empty(), &self.layout.unified) {
            (true, Some(_)) => "v2",
            (false, Some(_)) => "hybrid",
            _ => "v1",
        };
        let backend = if self.systemd { "systemd" } else { "cgroupfs" };
        format!("{layout} {backend}")
    }

    /// Print one line of the report.
    pub fn report(&self, directive: &str, what: &str) {
        println!("hosts: {} | {directive}: {what}", self.label());
    }

    /// The full slice name of `name` (`a` -> `bh123x0-a`).
    pub fn slice(&self, name: &str) -> String {
        format!("{}-{name}", self.parent)
    }

    /// Write the plan: `[slice.NAME]` sections for the given names with their directives (one
    /// `Key = value` per line), inside the parent slice. Then apply it; returns what apply
    /// said on stderr (warnings).
    pub fn apply(&self, slices: &[(&str, &str)]) -> String {
        self.write_plan(slices);
        let o = self.bulkhead(&["apply"]);
        assert!(
            o.status.success(),
            "apply failed:\n{}{}",
            common::stdout(&o),
            common::stderr(&o)
        );
        common::stderr(&o)
    }

    /// Write the plan (see `apply`) without applying it.
    pub fn write_plan(&self, slices: &[(&str, &str)]) {
        self.write_plan_with(slices, "");
    }

    /// Write the plan with more TOML after the slices (sockets, say).
    pub fn write_plan_with(&self, slices: &[(&str, &str)], more: &str) {
        let mut text = format!(
            "[slice.{}]\nDescription = \"bulkhead host suite\"\n",
            self.parent
        );
        for (name, body) in slices {
            text.push_str(&format!("\n[slice.{}]\n{body}\n", self.slice(name)));
        }
        text.push_str(more);
        std::fs::write(&self.plan, text).unwrap();
    }

    /// The processes in the slice and every cgroup below it, by cgroup path (relative to
    /// the slice): where spawn's and serve's sandboxes landed.
    pub fn processes_below(&self, name: &str) -> Vec<(String, u32)> {
        let Some(h) = self.layout.primary() else {
            return vec![];
        };
        let top = self.dir_in(&h.mount, name);
        let mut out = Vec::new();
        let mut stack = vec![top.clone()];
        while let Some(d) = stack.pop() {
            let rel = d.strip_prefix(&top).unwrap().display().to_string();
            let rel = if rel.is_empty() { ".".to_string() } else { rel };
            for pid in std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
            {
                if let Ok(p) = pid.trim().parse() {
                    out.push((rel.clone(), p));
                }
            }
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
        }
        out
    }

    /// `bulkhead -c PLAN ARGS...` with this host's backend and root.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(crate::common::bin());
        match &self.root {
            Some(r) => c.env("BULKHEAD_CGROUP_ROOT", &r.cgroup),
            None => c.env_remove("BULKHEAD_CGROUP_ROOT"),
        };
        c.env_remove("BULKHEAD_CONFIG").arg("-c").arg(&self.plan);
        c
    }

    pub fn bulkhead(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("run bulkhead")
    }

    /// `bulkhead run --slice SLICE -- ARGV`: a scope on systemd (so the command stays
    /// bulkhead's child with its output), cgroupfs joins and execs.
    pub fn run_in(&self, name: &str, argv: &[&str]) -> Command {
        let mut c = self.cmd();
        c.arg("run");
        if self.systemd {
            c.arg("--scope");
        }
        c.args(["--slice", &self.slice(name), "--"]).args(argv);
        c
    }

    /// This test binary again, doing `op` (see `child.rs`), in the slice.
    pub fn child_in(&self, name: &str, op: &str) -> Command {
        let exe = std::env::current_exe().unwrap();
        let mut c = self.run_in(
            name,
            &[
                exe.to_str().unwrap(),
                "--exact",
                "hosts::child::child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ],
        );
        c.env("BH_CHILD", op).stdout(Stdio::null());
        c
    }

    /// The slice's directory in the hierarchy that holds `controller` (v2 names: `cpu`,
    /// `memory`, `io`, `pids`, `cpuset`, `hugetlb`), or None if that hierarchy has none.
    pub fn dir(&self, controller: &str, name: &str) -> Option<PathBuf> {
        let h = self.layout.hierarchy(controller)?;
        Some(self.dir_in(&h.mount, name)).filter(|d| d.is_dir())
    }

    /// The slice's directory on the unified (v2) mount, where PSI lives.
    pub fn unified_dir(&self, name: &str) -> Option<PathBuf> {
        let u = self.layout.unified.as_ref()?;
        Some(self.dir_in(&u.mount, name)).filter(|d| d.is_dir())
    }

    /// The directory with the CPU time counter: cpu.stat (v2) or cpuacct.usage (v1).
    pub fn cpu_usage_usec(&self, name: &str) -> u64 {
        if let Some(h) = self.layout.cpuacct() {
            let d = self.dir_in(&h.mount, name);
            return read_u64(&d.join("cpuacct.usage")) / 1000;
        }
        let d = self.dir("cpu", name).expect("slice has a cpu directory");
        stat_field(&d.join("cpu.stat"), "usage_usec").expect("usage_usec in cpu.stat")
    }

    /// Whether `controller` is on cgroup v2 here.
    pub fn v2(&self, controller: &str) -> bool {
        self.layout
            .hierarchy(controller)
            .is_some_and(|h| h.version == Version::V2)
    }

    /// `name`'s directory under `mount` (`""` is the parent slice).
    fn dir_in(&self, mount: &Path, name: &str) -> PathBuf {
        let full = if name.is_empty() {
            self.parent.clone()
        } else {
            self.slice(name)
        };
        let rel = SliceName::parse(&full).unwrap().cgroup_path();
        match &self.root {
            Some(r) => mount.join(r.cgroup.trim_start_matches('/')).join(rel),
            None => mount.join(rel),
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.plan.exists() {
            let o = self.bulkhead(&["destroy", "--kill"]);
            if !o.status.success() {
                eprintln!("hosts cleanup: destroy: {}", common::stderr(&o));
            }
        }
        let _ = std::fs::remove_dir_all(&self.tmp);
        // A TestRoot removes whatever is left under it when it drops (after this).
    }
}

/// Whether `bulkhead run` (PID `pid`, started by the check) has exec'd its command: it joins
/// the slice first, so the command runs there.
pub fn exec_done(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() != "bulkhead")
}

pub fn read_u64(p: &Path) -> u64 {
    common::read(p)
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `key value` lines (cpu.stat, memory.events, pids.events): the value of `key`.
pub fn stat_field(p: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(p).ok()?;
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

/// Killed by SIGKILL: directly, or as reported by a parent that stayed (128 + 9).
pub fn killed(o: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    o.signal() == Some(9) || o.code() == Some(137)
}

/// How a child ended: `exit N` or `signal N`.
pub fn ended(o: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (o.code(), o.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (_, Some(s)) => format!("signal {s}"),
        _ => "unknown".into(),
    }
}
