//! A real systemd to test against: a Debian bookworm root made by debootstrap (with systemd,
//! dbus, man-db, procps and PostgreSQL 15 with its `15/main` cluster), cached in
//! /var/cache/bulkhead/test/debian-systemd, booted with `systemd-nspawn --boot` on a
//! throw-away overlay (`--volatile=overlay`, so the cache stays clean) with this build's
//! bulkhead bound in at /usr/local/bin/bulkhead.
//!
//! For tests that need a second boot of the same system (install, reboot, check), a
//! [`PersistentRoot`] is an overlay this process mounts over the cached root (upper and work
//! directories in a scratch directory): [`Container::boot_from`] boots it without
//! `--volatile`, so what one boot wrote is there in the next; its Drop unmounts the overlay
//! and removes the scratch directory, also when the test fails.
//!
//! The container runs in cgroups of its own (nspawn splits them into `supervisor` and
//! `payload`), and [`Container`]'s Drop halts it, kills what is left and removes those
//! cgroups, so no machine, mount or process outlives a test, failed or not.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const ROOT: &str = "/var/cache/bulkhead/test/debian-systemd";
const SUITE: &str = "bookworm";
/// What debootstrap adds to minbase: systemd as PID 1, its bus, man-db (with groff-base)
/// for the package test's `man bulkhead`, procps (`pgrep`, `ps`), and Debian's PostgreSQL 15,
/// whose package scripts create the `15/main` cluster that `postgresql@15-main.service` runs
/// (the DBA's path on systemd, `place::postgres_systemd`). The cluster is `manual` in its
/// start.conf ([`PG_START_CONF`]): started by the test that wants it, so every other boot
/// stays as fast as before and no other test's `check` finds a database outside its slices.
/// libpam-systemd gives users a real user manager (`user@UID.service`, `systemd-run --user`:
/// the escape test of issue 40 #1).
const INCLUDE: &str = "systemd,systemd-sysv,dbus,libpam-systemd,man-db,procps,postgresql-15";
/// The 15/main cluster's start.conf in the root, and what it holds there.
const PG_START_CONF: (&str, &str) = ("etc/postgresql/15/main/start.conf", "manual\n");
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

use bulkhead_testkit::prereq::{missing, on_path as have};

/// Build the cached root once (several tests may ask at the same time: one builds, under a
/// lock, the others wait for it).
/// The cached root has everything the tests use (a root built before man-db, procps or
/// PostgreSQL was added is built again).
fn root_ready() -> bool {
    root_complete(Path::new(ROOT))
}

/// What INCLUDE puts in a root, down to the cluster the PostgreSQL package creates.
fn root_complete(root: &Path) -> bool {
    [
        "lib/systemd/systemd",
        "usr/bin/dbus-daemon",
        "usr/bin/man",
        "usr/bin/pgrep",
        "lib/x86_64-linux-gnu/security/pam_systemd.so",
        "usr/lib/postgresql/15/bin/postgres",
        "etc/postgresql/15/main/postgresql.conf",
        "var/lib/postgresql/15/main/PG_VERSION",
    ]
    .iter()
    .all(|p| root.join(p).exists())
        && std::fs::read_to_string(root.join(PG_START_CONF.0)).is_ok_and(|t| t == PG_START_CONF.1)
}

fn ensure_root() -> Result<(), String> {
    let root = Path::new(ROOT);
    let ready = root_ready;
    if ready() {
        return Ok(());
    }
    let parent = root.parent().unwrap();
    std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let lock = std::fs::File::create(parent.join(".debian-systemd.lock"))
        .map_err(|e| format!("lock: {e}"))?;
    bulkhead_sys::process::lock_file(&lock, true).map_err(|e| format!("lock: {e}"))?;
    if ready() {
        return Ok(());
    }
    let tmp = root.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    let mirror = std::env::var("BULKHEAD_TEST_MIRROR").unwrap_or_else(|_| DEFAULT_MIRROR.into());
    eprintln!("building the systemd test root once: debootstrap --variant=minbase --include={INCLUDE} {SUITE} {ROOT}");
    let out = Command::new("debootstrap")
        .args(["--variant=minbase", &format!("--include={INCLUDE}"), SUITE])
        .arg(&tmp)
        .arg(&mirror)
        .output()
        .map_err(|e| format!("debootstrap: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(format!(
            "debootstrap failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    // Debian starts the cluster at boot ("auto"); here only the test that wants it does.
    let _ = std::fs::write(tmp.join(PG_START_CONF.0), PG_START_CONF.1);
    if !root_complete(&tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(format!(
            "debootstrap --include={INCLUDE} made a root without all of it (no PostgreSQL 15/main cluster?)"
        ));
    }
    // An older root (without what INCLUDE added since) is replaced, not patched.
    let old = root.with_extension("old");
    if root.exists() {
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(root, &old).map_err(|e| format!("rename {ROOT}: {e}"))?;
    }
    std::fs::rename(&tmp, root).map_err(|e| format!("rename to {ROOT}: {e}"))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

pub struct Container {
    nspawn: Child,
    /// The container's systemd, as this host sees it.
    pub init: i32,
    cgroups: Vec<PathBuf>,
    run_dir_was_there: bool,
    pub log: PathBuf,
}

/// The checks every boot makes first: root, the programs, the cached root.
fn prerequisites() -> Result<(), String> {
    if !bulkhead_testkit::prereq::is_root() {
        return Err("the systemd tests need root (systemd-nspawn)".into());
    }
    for p in ["systemd-nspawn", "nsenter", "mount", "umount"] {
        if !have(p) {
            return Err(format!("{p} is not installed (scripts/setup installs it)"));
        }
    }
    if !root_ready() && !have("debootstrap") {
        return Err("debootstrap is not installed (scripts/setup installs it)".into());
    }
    ensure_root().map_err(|e| format!("cannot build the Debian root: {e}"))
}

/// The cached Debian root (built on first use), for tests that only read it, e.g. through
/// `spawn -x`; `None` where a prerequisite is missing (skipped outside CI).
pub fn debian_root() -> Option<&'static str> {
    if let Err(e) = prerequisites() {
        missing(&e);
        return None;
    }
    Some(ROOT)
}

/// A root that keeps what a boot wrote for the next boot: an overlay of a scratch upper
/// directory over the cached root, mounted by this process at `dir/root`. Drop unmounts it
/// and removes the scratch directory (the cached root is never written).
pub struct PersistentRoot {
    dir: PathBuf,
    pub merged: PathBuf,
    mounted: bool,
}

impl PersistentRoot {
    /// Mount a fresh one, or say why not (`None`: skipped outside CI).
    pub fn new() -> Option<PersistentRoot> {
        if let Err(e) = prerequisites() {
            missing(&e);
            return None;
        }
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = PathBuf::from(format!(
            "/var/tmp/bulkhead-persistent-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let mut r = PersistentRoot {
            merged: dir.join("root"),
            dir,
            mounted: false,
        };
        for d in ["upper", "work", "root"] {
            std::fs::create_dir_all(r.dir.join(d)).unwrap();
        }
        let opts = format!(
            "lowerdir={ROOT},upperdir={},workdir={}",
            r.dir.join("upper").display(),
            r.dir.join("work").display()
        );
        let o = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(&r.merged)
            .output()
            .expect("mount");
        assert!(
            o.status.success(),
            "mount overlay: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        r.mounted = true;
        Some(r)
    }
}

impl Drop for PersistentRoot {
    fn drop(&mut self) {
        if self.mounted {
            let o = Command::new("umount").arg(&self.merged).output();
            if !o.is_ok_and(|o| o.status.success()) {
                // Still busy (a process that outlived the container): detach it, so it goes
                // when the last user does.
                let _ = Command::new("umount").arg("-l").arg(&self.merged).output();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Container {
    /// Boot a container on a throw-away overlay of the cached root, with this build's
    /// bulkhead at /usr/local/bin/bulkhead, or say why not (`None`: skipped outside CI).
    pub fn boot() -> Option<Container> {
        if let Err(e) = prerequisites() {
            missing(&e);
            return None;
        }
        Some(Container::start(None))
    }

    /// Boot the system in a [`PersistentRoot`] (nothing bound in: what the test installs is
    /// what runs). Powering off (Drop) and booting it again is a reboot.
    pub fn boot_from(root: &PersistentRoot) -> Container {
        Container::start(Some(&root.merged))
    }

    fn start(persistent: Option<&Path>) -> Container {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // "ct": the test kit's cgroup roots are bulkhead-test-PID-N too, with a counter of
        // their own; a container beside a slices test must not take the same name.
        let name = format!("bulkhead-test-{}-ct{n}", std::process::id());
        let run_dir_was_there = Path::new("/run/systemd/nspawn").exists();
        let mut cgroups = Vec::new();
        for (h, _) in bulkhead_testkit::cgroup::systemd_hierarchies() {
            let d = h.join(&name);
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
            cgroups.push(d);
        }
        let log = std::env::temp_dir().join(format!("{name}.log"));
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new("systemd-nspawn");
        cmd.args([
            "--boot",
            "--register=no",
            "--keep-unit",
            "--private-network",
            "--console=pipe",
            "--quiet",
        ])
        .arg(format!("--machine={name}"));
        match persistent {
            Some(dir) => {
                cmd.arg(format!("--directory={}", dir.display()));
            }
            None => {
                cmd.args(["--volatile=overlay", &format!("--directory={ROOT}")])
                    .arg(format!(
                        "--bind-ro={}:/usr/local/bin/bulkhead",
                        bulkhead_testkit::bins::bulkhead().display()
                    ));
            }
        }
        cmd.stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf);
        let procs: Vec<PathBuf> = cgroups.iter().map(|d| d.join("cgroup.procs")).collect();
        let nspawn =
            bulkhead_testkit::groups::spawn_joined(&mut cmd, &procs).expect("start systemd-nspawn");
        let mut c = Container {
            init: 0,
            nspawn,
            cgroups,
            run_dir_was_there,
            log,
        };
        // The container's PID 1 is nspawn's child whose PID in its own namespace is 1 (nspawn
        // forks a short-lived helper first).
        let deadline = Instant::now() + Duration::from_secs(30);
        let children = format!("/proc/{0}/task/{0}/children", c.nspawn.id());
        while c.init == 0 {
            if let Ok(t) = std::fs::read_to_string(&children) {
                c.init = t
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .find(|p| {
                        std::fs::read_to_string(format!("/proc/{p}/status")).is_ok_and(|s| {
                            s.lines().any(|l| {
                                l.starts_with("NSpid:")
                                    && l.split_whitespace().count() == 3
                                    && l.ends_with("\t1")
                            })
                        })
                    })
                    .unwrap_or(0);
            }
            if let Ok(Some(st)) = c.nspawn.try_wait() {
                panic!("systemd-nspawn exited ({st}): {}", c.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "no container init after 30s: {}",
                c.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // systemctl says "offline" until systemd listens; then --wait waits for the boot.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let out = c.sh("timeout 90 systemctl is-system-running --wait");
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if state == "running" || state == "degraded" {
                break;
            }
            if Instant::now() > deadline
                || !matches!(state.as_str(), "offline" | "" | "initializing" | "starting")
            {
                let failed = c.sh("systemctl --failed --no-pager");
                panic!(
                    "the container's systemd is '{state}':\n{}\n{}",
                    String::from_utf8_lossy(&failed.stdout),
                    c.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The container's view of a path, from the host.
    pub fn path(&self, p: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.init)).join(p.trim_start_matches('/'))
    }

    pub fn write(&self, p: &str, text: &str) {
        let path = self.path(p);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// A command inside the container: every namespace of its PID 1, a clean environment,
    /// and at most two minutes (a hung command fails the test instead of hanging it).
    pub fn cmd(&self, argv: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg("-t")
            .arg(self.init.to_string())
            .args([
                "-a",
                "env",
                "-i",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME=/root",
                "LANG=C.UTF-8",
                "timeout",
                "120",
            ])
            .args(argv)
            .current_dir("/");
        c
    }

    pub fn sh(&self, script: &str) -> Output {
        self.cmd(&["sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("nsenter")
    }

    /// `bulkhead ARGS` inside the container.
    pub fn bulkhead(&self, args: &[&str]) -> Output {
        let mut argv = vec!["bulkhead"];
        argv.extend_from_slice(args);
        self.cmd(&argv)
            .stdin(Stdio::null())
            .output()
            .expect("nsenter")
    }

    /// `systemctl show UNIT -p P` -> the value.
    pub fn show(&self, unit: &str, prop: &str) -> String {
        let o = self
            .cmd(&["systemctl", "show", unit, "-p", prop, "--value"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // An orderly halt first (nspawn turns SIGTERM into the container's poweroff).
        // kill(2) on our own child.
        let _ = bulkhead::sys::process::kill(self.nspawn.id() as i32, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
        // Whatever is left in the container's cgroups (nothing, normally) dies with them.
        if let Err(e) = bulkhead::cgroup::fs::remove_trees(&self.cgroups) {
            eprintln!("container cleanup: {e}");
        }
        if !self.run_dir_was_there {
            // nspawn's empty bookkeeping directories; still in use by another container
            // of a parallel test, they are not empty and stay.
            for d in [
                "/run/systemd/nspawn/propagate",
                "/run/systemd/nspawn/locks",
                "/run/systemd/nspawn",
            ] {
                let _ = std::fs::remove_dir(d);
            }
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
