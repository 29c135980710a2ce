//! `bulkhead spawn --boot`: the cached Debian 12 root's systemd (252) booted as PID 1 in a
//! sandbox on this host's cgroups, to power-off and to multi-user, stopped by SIGTERM to
//! bulkhead, its READY=1 reported; the container's own cgroups are there while it runs (with the units systemd
//! made below them) and gone after. A missing root fails in CI (`common::container`).

use crate::common::container::debian_root;
use crate::common::{bin, stderr, stdout};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The container's cgroups for bulkhead's `pid`: in the name=systemd and cgroup2 hierarchies,
/// below this process's own cgroup (the child bulkhead inherits it).
fn container_cgroups(pid: u32) -> Vec<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut out = Vec::new();
    for l in info.lines() {
        let Some((left, right)) = l.split_once(" - ") else {
            continue;
        };
        let point = left.split_whitespace().nth(4).unwrap();
        let mut r = right.split_whitespace();
        let fstype = r.next().unwrap();
        let opts = r.nth(1).unwrap_or_default();
        let key = if fstype == "cgroup2" {
            "0::"
        } else if fstype == "cgroup" && opts.split(',').any(|o| o == "name=systemd") {
            ":name=systemd:"
        } else {
            continue;
        };
        let path = own
            .lines()
            .find_map(|c| c.split_once(key).map(|(_, p)| p))
            .unwrap_or("/");
        out.push(PathBuf::from(format!(
            "{point}{}/bulkhead-boot-{pid}",
            path.trim_end_matches('/')
        )));
    }
    assert!(!out.is_empty(), "no name=systemd or cgroup2 mount here");
    out
}

/// `spawn --boot -D root -x` with `args` for the init, its output into a file.
fn boot(root: &str, log: &std::path::Path, args: &[&str]) -> Child {
    let f = std::fs::File::create(log).unwrap();
    let mut c = Command::new(bin());
    c.args([
        "spawn",
        "--boot",
        "-D",
        root,
        "-x",
        "--timeout",
        "300s",
        "--",
    ]);
    c.args(args);
    c.stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .expect("run bulkhead")
}

/// The log without the console's colours.
fn text(log: &std::path::Path) -> String {
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
fn wait(c: &mut Child, limit: Duration, log: &std::path::Path) -> i32 {
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
    let pid = c.id();
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

#[test]
fn boots_to_multi_user_and_stops_cleanly_on_sigterm() {
    let _suite = crate::suite::shared();
    let Some(root) = debian_root() else {
        return;
    };
    let log = Log::new("multi-user");
    let mut c = boot(root, &log.0, &[]);
    let pid = c.id();
    let end = Instant::now() + Duration::from_secs(120);
    // Readiness: systemd's READY=1 through NOTIFY_SOCKET=/run/host/notify, once startup
    // has finished (after multi-user.target), reported by bulkhead.
    while !text(&log.0).contains("bulkhead: ready after ") {
        if c.try_wait().unwrap().is_some() || Instant::now() > end {
            let _ = c.kill();
            let _ = c.wait();
            panic!("no ready line:\n{}", text(&log.0));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let up = text(&log.0);
    let (before, _) = up.split_once("bulkhead: ready after ").unwrap();
    assert!(before.contains("Reached target multi-user.target"), "{up}");
    // The container's own cgroups, with the units systemd made below them (it writes there,
    // and only there).
    let dirs = container_cgroups(pid);
    for d in &dirs {
        assert!(
            d.join("init.scope").is_dir() && d.join("system.slice").is_dir(),
            "{}: no init.scope or system.slice",
            d.display()
        );
    }
    let t = Instant::now();
    // SAFETY: kill with integer arguments, to the child this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let code = wait(&mut c, Duration::from_secs(60), &log.0);
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

#[test]
fn dry_run_shows_the_boot_and_a_root_without_init_is_refused() {
    let _suite = crate::suite::shared();
    let Some(root) = debian_root() else {
        return;
    };
    let o = Command::new(bin())
        .args([
            "spawn",
            "--boot",
            "-D",
            root,
            "-x",
            "-n",
            "--",
            "systemd.unit=poweroff.target",
        ])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    for want in [
        "mkdir /sys/fs/cgroup/",
        "unshare(CLONE_NEWCGROUP)",
        "/sys/fs/cgroup/systemd type cgroup flags nosuid,nodev,noexec name=systemd",
        "/run (created as a directory if missing) type tmpfs flags nosuid,nodev mode=0755",
        "execve /sbin/init systemd.unit=poweroff.target",
        "SIGRTMIN+3",
        " container=bulkhead ",
        " NOTIFY_SOCKET=/run/host/notify ",
        " container_uuid=",
        "on /run/bulkhead/sandbox/.overlay/run/host/notify",
    ] {
        assert!(out.contains(want), "no '{want}' in:\n{out}");
    }
    assert!(!out.contains("CLONE_NEWCGROUP|"), "{out}");
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
