//! `bulkhead spawn --boot`: the cached Debian 12 root's systemd (252) booted as PID 1 in a
//! sandbox on this host's cgroups, to power-off and to multi-user, stopped by SIGTERM to
//! bulkhead, its READY=1 reported; the container's own cgroups are there while it runs (with the units systemd
//! made below them) and gone after. A missing root fails in CI (`common::container`).

use crate::common::container::debian_root;
use crate::common::{bin, stderr, stdout, TestRoot};
use bulkhead_testkit::assert_has;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The container's cgroups for bulkhead's `pid`: in the name=systemd and cgroup2 hierarchies,
/// below this process's own cgroup (the child bulkhead inherits it).
fn container_cgroups(pid: u32) -> Vec<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mut out = Vec::new();
    for (point, key) in bulkhead_testkit::cgroup::systemd_hierarchies() {
        let path = own
            .lines()
            .find_map(|c| c.split_once(key).map(|(_, p)| p))
            .unwrap_or("/");
        out.push(PathBuf::from(format!(
            "{}{}/bulkhead-boot-{pid}",
            point.display(),
            path.trim_end_matches('/')
        )));
    }
    assert!(!out.is_empty(), "no name=systemd or cgroup2 mount here");
    out
}

/// `spawn --boot -D root -x` with `args` for the init, its output into a file.
fn boot(root: &str, log: &std::path::Path, args: &[&str]) -> Booted {
    boot_with(Command::new(bin()), &[], &[], root, log, args)
}

/// [`boot`] with the command `c` (e.g. a test root's), bulkhead's options `global` and
/// spawn's `opts`.
fn boot_with(
    mut c: Command,
    global: &[&str],
    opts: &[&str],
    root: &str,
    log: &std::path::Path,
    args: &[&str],
) -> Booted {
    let f = std::fs::File::create(log).unwrap();
    c.args(global);
    c.arg("spawn");
    c.args(opts);
    c.args(["--boot", "-D", root, "-x", "--timeout", "300s", "--"]);
    c.args(args);
    c.stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .map(Booted)
        .expect("run bulkhead")
}

/// The log without the console's colours.
pub(crate) fn text(log: &std::path::Path) -> String {
    let raw = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = String::new();
    let mut esc = false;
    for ch in raw.chars() {
        match (esc, ch) {
            (false, '\x1b') => esc = true,
            (true, 'm') => esc = false,
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}

/// Wait for the child, at most `limit`; killed (and the test failed) after it.
fn wait(Booted(c): &mut Booted, limit: Duration, log: &std::path::Path) -> i32 {
    let end = Instant::now() + limit;
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        if Instant::now() > end {
            let _ = c.kill();
            let _ = c.wait();
            panic!("bulkhead did not exit within {limit:?}:\n{}", text(log));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running `spawn --boot`, stopped (SIGTERM, then SIGKILL) when dropped, so a failed
/// assertion leaves no container behind.
pub(crate) struct Booted(pub(crate) Child);
impl Drop for Booted {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_some() {
            return;
        }
        // SAFETY: kill with integer arguments, to the child this test started.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(30);
        while self.0.try_wait().ok().flatten().is_none() {
            if Instant::now() > end {
                let _ = self.0.kill();
                let _ = self.0.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

struct Log(PathBuf);
impl Log {
    fn new(name: &str) -> Log {
        Log(PathBuf::from(format!(
            "/var/tmp/bulkhead-boot-test-{}-{name}.log",
            std::process::id()
        )))
    }
}
impl Drop for Log {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn boots_debian_to_power_off_and_removes_its_cgroups() {
    let _suite = crate::suite::shared();
    let Some(root) = debian_root() else {
        return;
    };
    let log = Log::new("poweroff");
    let mut c = boot(root, &log.0, &["systemd.unit=poweroff.target"]);
    let pid = c.0.id();
    let code = wait(&mut c, Duration::from_secs(120), &log.0);
    let out = text(&log.0);
    assert_eq!(code, 0, "{out}");
    // systemd's own console lines, through /dev/console to the caller's stderr.
    for line in [
        "running in system mode",
        "Welcome to Debian GNU/Linux 12 (bookworm)!",
        "Reached target shutdown.target",
        "Reached target poweroff.target",
        "Powering off.",
        "Exiting container.",
    ] {
        assert!(out.contains(line), "no '{line}' in:\n{out}");
    }
    // It ran in a cgroup setup it could use: no mount of its own refused.
    assert!(!out.contains("Failed to mount"), "{out}");
    // Startup never finished (it went straight to power-off): no READY=1, no ready line.
    assert!(!out.contains("bulkhead: ready after"), "{out}");
    for d in container_cgroups(pid) {
        assert!(
            !d.exists(),
            "{} is left after the container exited",
            d.display()
        );
    }
}

/// Wait for bulkhead's ready line; the log so far.
pub(crate) fn wait_ready(Booted(c): &mut Booted, end: Instant, log: &std::path::Path) -> String {
    while !text(log).contains("bulkhead: ready after ") {
        if c.try_wait().unwrap().is_some() || Instant::now() > end {
            let _ = c.kill();
            let _ = c.wait();
            panic!("no ready line:\n{}", text(log));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    text(log)
}

/// SIGTERM to bulkhead (the child this test started); its exit code.
pub(crate) fn stop(c: &mut Booted, log: &std::path::Path) -> i32 {
    // SAFETY: kill with integer arguments, to the child this test started.
    assert_eq!(unsafe { libc::kill(c.0.id() as i32, libc::SIGTERM) }, 0);
    wait(c, Duration::from_secs(60), log)
}

#[test]
fn boots_to_multi_user_and_stops_cleanly_on_sigterm() {
    let _suite = crate::suite::shared();
    let Some(root) = debian_root() else {
        return;
    };
    let log = Log::new("multi-user");
    let mut c = boot(root, &log.0, &[]);
    let pid = c.0.id();
    let end = Instant::now() + Duration::from_secs(120);
    // Readiness: systemd's READY=1 through NOTIFY_SOCKET=/run/host/notify, once startup
    // has finished (after multi-user.target), reported by bulkhead.
    let up = wait_ready(&mut c, end, &log.0);
    let (before, _) = up.split_once("bulkhead: ready after ").unwrap();
    assert!(before.contains("Reached target multi-user.target"), "{up}");
    // The container's own cgroups (`payload` below bulkhead's), with the units systemd made
    // below them (it writes there, and only there).
    let dirs = container_cgroups(pid);
    for d in &dirs {
        let own = d.join("payload");
        assert!(
            own.join("init.scope").is_dir() && own.join("system.slice").is_dir(),
            "{}: no init.scope or system.slice",
            own.display()
        );
    }
    let t = Instant::now();
    let code = stop(&mut c, &log.0);
    let out = text(&log.0);
    assert_eq!(code, 0, "{out}");
    // SIGRTMIN+3 is systemd's halt: the units are stopped, then the container exits.
    assert!(
        out.contains("Reached target shutdown.target") && out.contains("Exiting container."),
        "{out}"
    );
    eprintln!(
        "stopped {:.0} ms after SIGTERM",
        t.elapsed().as_secs_f64() * 1e3
    );
    for d in &dirs {
        assert!(
            !d.exists(),
            "{} is left after the container exited",
            d.display()
        );
    }
}

/// `spawn --boot -D root -x -n` with `more`: its output, which must be a success.
fn dry_run(root: &str, more: &[&str]) -> String {
    let o = bulkhead_testkit::ok(
        Command::new(bin())
            .args(["spawn", "--boot", "-D", root, "-x", "-n"])
            .args(more),
    );
    stdout(&o)
}

#[test]
fn dry_run_shows_the_boot_and_a_root_without_init_is_refused() {
    let _suite = crate::suite::shared();
    let Some(root) = debian_root() else {
        return;
    };
    let out = dry_run(root, &["--", "systemd.unit=poweroff.target"]);
    for want in [
        "mkdir /sys/fs/cgroup/",
        "unshare(CLONE_NEWCGROUP)",
        "/sys/fs/cgroup/systemd type cgroup flags nosuid,nodev,noexec name=systemd",
        "/run (created as a directory if missing) type tmpfs flags nosuid,nodev mode=0755",
        "execve /sbin/init systemd.unit=poweroff.target",
        "SIGRTMIN+3",
        "killed 90 s later if it has not exited (--stop-timeout)",
        " container=bulkhead ",
        " NOTIFY_SOCKET=/run/host/notify ",
        " container_uuid=",
        "on /run/bulkhead/sandbox/.overlay/run/host/notify",
    ] {
        assert!(out.contains(want), "no '{want}' in:\n{out}");
    }
    assert!(!out.contains("CLONE_NEWCGROUP|"), "{out}");
    // With --slice on cgroup2 (this host's unified mount): the supervisor steps.
    let out = dry_run(root, &["--slice", "db-helper"]);
    for want in [
        "mkdir OWN/supervisor; bulkhead's PID into OWN/supervisor/cgroup.procs",
        "+CONTROLLER into OWN/cgroup.subtree_control",
        "rmdir OWN/supervisor",
    ] {
        assert!(out.contains(want), "no '{want}' in:\n{out}");
    }
    // A root without an init: said so, with what was looked for.
    let empty = PathBuf::from(format!(
        "/var/tmp/bulkhead-boot-empty-{}",
        std::process::id()
    ));
    for d in ["proc", "sys", "dev", "tmp", "run"] {
        std::fs::create_dir_all(empty.join(d)).unwrap();
    }
    let o = Command::new(bin())
        .args(["spawn", "--boot", "-D", empty.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&empty);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains("no init to boot") && err.contains("/sbin/init"),
        "{err}"
    );
}

#[test]
fn boots_in_a_slice() {
    let _suite = crate::suite::shared();
    let Some(root) = debian_root() else {
        return;
    };
    let t = TestRoot::new();
    let plan = t.plan("[slice.db-helper]\nTasksMax = 200\n");
    let p = plan.to_str().unwrap();
    let o = t.cmd().args(["-c", p, "apply"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let log = Log::new("slice");
    let mut c = boot_with(
        t.cmd(),
        &["-c", p],
        &["--slice", "db-helper"],
        root,
        &log.0,
        &[],
    );
    let pid = c.0.id();
    let up = wait_ready(&mut c, Instant::now() + Duration::from_secs(120), &log.0);
    // The whole system runs in the slice: bulkhead, systemd and the services it started
    // (the pids hierarchy is read-only inside, so they all stay in the slice's cgroup).
    let procs =
        std::fs::read_to_string(t.dir("pids", "db.slice/db-helper.slice/cgroup.procs")).unwrap();
    assert!(procs.lines().count() >= 5, "{procs}\n{up}");
    assert!(
        procs.lines().any(|l| l.trim() == pid.to_string()),
        "{procs}"
    );
    let code = stop(&mut c, &log.0);
    assert_eq!(code, 0, "{}", text(&log.0));
    assert_has(&text(&log.0), "Exiting container.");
    let procs =
        std::fs::read_to_string(t.dir("pids", "db.slice/db-helper.slice/cgroup.procs")).unwrap();
    assert!(procs.trim().is_empty(), "left in the slice: {procs}");
}

/// With `--slice` on the cgroupfs backend the slice's own cgroup holds the slice's
/// processes, so bulkhead does not move itself aside to hand the slice's cgroup2 controllers
/// to the container (nspawn's supervisor/payload split, which the systemd backend's
/// delegated scope gets): every later join of the slice would fail with EBUSY while the
/// container runs, and for good if bulkhead were killed. This host's cgroup2 mount has the
/// `hugetlb` controller: the slice keeps its processes' place, its `cgroup.subtree_control`
/// stays empty, `-v` says why, and another process can still join the slice during the boot.
/// (The systemd path was run by hand in the pure v2 guest: docs/OPERATIONS.md.)
#[test]
fn a_cgroupfs_slice_is_not_rearranged_for_a_booted_container() {
    let _suite = crate::suite::shared();
    let Some(root) = debian_root() else {
        return;
    };
    let t = TestRoot::new();
    if t.layout.unified.is_none() {
        panic!("no cgroup2 hierarchy on this host: the test needs one with a controller");
    }
    let plan = t.plan("[slice.db-helper]\nTasksMax = 200\nHugetlbMax = { \"2M\" = \"64M\" }\n");
    let p = plan.to_str().unwrap();
    let o = t.cmd().args(["-c", p, "apply"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let own = t.dir("unified", "db.slice/db-helper.slice");
    let have = std::fs::read_to_string(own.join("cgroup.controllers")).unwrap();
    assert!(have.split_whitespace().any(|c| c == "hugetlb"), "{have}");
    let log = Log::new("slice-v2");
    let mut c = boot_with(
        t.cmd(),
        &["-c", p],
        &["-v", "--slice", "db-helper"],
        root,
        &log.0,
        &[],
    );
    let pid = c.0.id();
    let up = wait_ready(&mut c, Instant::now() + Duration::from_secs(120), &log.0);
    assert!(
        up.contains("the cgroupfs backend places processes in the slice's own cgroup"),
        "{up}"
    );
    assert!(!own.join("supervisor").exists(), "{up}");
    let sub = std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap();
    assert!(
        sub.trim().is_empty(),
        "the slice was given away: {sub}\n{up}"
    );
    let procs = std::fs::read_to_string(own.join("cgroup.procs")).unwrap();
    assert!(procs.lines().any(|l| l == pid.to_string()), "{procs}\n{up}");
    // Another process joins the slice while the container runs.
    let o = t
        .cmd()
        .args(["-c", p, "run", "--slice", "db-helper", "--", "true"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "a join during the boot failed: {}",
        stderr(&o)
    );
    let code = stop(&mut c, &log.0);
    assert_eq!(code, 0, "{}", text(&log.0));
    assert!(!own.join(format!("bulkhead-boot-{pid}")).exists());
    let procs = std::fs::read_to_string(own.join("cgroup.procs")).unwrap();
    assert!(procs.trim().is_empty(), "left in the slice: {procs}");
}

#[test]
fn boots_with_private_users() {
    let _suite = crate::suite::shared();
    let Some(root) = debian_root() else {
        return;
    };
    let log = Log::new("userns");
    let mut c = boot_with(
        Command::new(bin()),
        &[],
        &["--private-users"],
        root,
        &log.0,
        &[],
    );
    let pid = c.0.id();
    let up = wait_ready(&mut c, Instant::now() + Duration::from_secs(120), &log.0);
    use std::os::unix::fs::MetadataExt;
    for top in container_cgroups(pid) {
        // The container's cgroup is delegated to the namespace's root, an unprivileged ID on
        // the host; its systemd runs as that ID and made its units' cgroups there. The one
        // above it, with the limits, stays root's.
        assert_eq!(
            std::fs::metadata(&top).unwrap().uid(),
            0,
            "{}",
            top.display()
        );
        let d = top.join("payload");
        let owner = std::fs::metadata(&d).unwrap().uid();
        assert!(owner >= 0x80000, "{}: owned by {owner}", d.display());
        let init = std::fs::read_to_string(d.join("init.scope/cgroup.procs")).unwrap();
        let init = init.lines().next().unwrap_or_else(|| panic!("{up}"));
        let status = std::fs::read_to_string(format!("/proc/{init}/status")).unwrap();
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .unwrap();
        assert_eq!(uid, owner.to_string(), "{status}");
        assert!(d.join("system.slice").is_dir(), "{up}");
    }
    let code = stop(&mut c, &log.0);
    let out = text(&log.0);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Exiting container."), "{out}");
    for d in container_cgroups(pid) {
        assert!(
            !d.exists(),
            "{} is left after the container exited",
            d.display()
        );
    }
}

/// The init of a busybox root: what a booted init sees of its container, printed.
const PROBE_INIT: &str = r#"#!/bin/sh
echo "env: container=$container notify=$NOTIFY_SOCKET uuid=$container_uuid"
echo "args: $*"
grep -E '^(0::|[0-9]+:name=systemd:)' /proc/self/cgroup | sed 's/^/cgroup: /'
mkdir /sys/fs/cgroup/systemd/mine && echo "made systemd/mine"
mkdir /sys/fs/cgroup/unified/mine && echo "made unified/mine"
echo 0 > /sys/fs/cgroup/systemd/mine/cgroup.procs && echo "joined systemd/mine"
for c in memory pids cpu; do
  [ -d /sys/fs/cgroup/$c ] || continue
  mkdir /sys/fs/cgroup/$c/x 2>/dev/null && echo "ESCAPE: made $c/x"
done
mkdir /sys/fs/cgroup/y 2>/dev/null && echo "ESCAPE: made a directory in the cgroup tmpfs"
test -S /run/host/notify && echo "notify socket there"
exit 7
"#;

#[test]
fn the_init_writes_only_its_own_cgroups() {
    let _suite = crate::suite::shared();
    if !crate::common::prerequisites() {
        return;
    }
    let dir = PathBuf::from(format!(
        "/var/tmp/bulkhead-boot-probe-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    crate::common::rootfs::busybox_root(&dir);
    let init = dir.join("bin/init");
    let _ = std::fs::remove_file(&init);
    std::fs::write(&init, PROBE_INIT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = Command::new(bin())
        .args(["spawn", "--boot", "-D", dir.to_str().unwrap(), "-x"])
        .args(["--", "systemd.unit=x.target"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = c.id();
    let o = c.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(7), "{out}");
    assert!(
        out.contains("env: container=bulkhead notify=/run/host/notify uuid="),
        "{out}"
    );
    assert!(out.contains("args: systemd.unit=x.target"), "{out}");
    // Its own cgroups are the roots of what it sees, and it may write there...
    let cg: Vec<&str> = out.lines().filter(|l| l.starts_with("cgroup: ")).collect();
    assert!(
        !cg.is_empty() && cg.iter().all(|l| l.ends_with(":/")),
        "{out}"
    );
    for want in [
        "made systemd/mine",
        "made unified/mine",
        "joined systemd/mine",
    ] {
        assert!(out.contains(want), "no '{want}' in:\n{out}");
    }
    assert!(out.contains("notify socket there"), "{out}");
    // ... and nowhere else: controllers and the tmpfs that holds them are read-only.
    assert!(!out.contains("ESCAPE"), "{out}");
    for d in container_cgroups(pid) {
        assert!(
            !d.exists(),
            "{} is left after the container exited",
            d.display()
        );
    }
}
