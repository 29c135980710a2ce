//! Escape tests: input. The review's reproductions (issue 14 item 13): a plan with
//! `CPUQuotaPeriodSec = "99999999999999999999d"`, a socket with an `idle_timeout` that long
//! and `spawn --timeout 99999999999999999999d` aborted bulkhead (exit 134, SIGABRT) in
//! duration parsing; and other values the property suites (scripts/props) found or try. Each
//! runs the real binary and must end with the ordinary bad-input exit (2), not a signal, with
//! a diagnostic that names the file:line and the key.

use crate::common::{self, stderr};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const HUGE: &str = "99999999999999999999d";

fn command() -> Command {
    let mut c = Command::new(crate::common::bin());
    c.env_remove("BULKHEAD_CONFIG").stdin(Stdio::null());
    c
}

/// Run with a deadline (a hostile value must not hang bulkhead either).
fn run(mut c: Command) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bulkhead");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("bulkhead still running after 30 s: {c:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// A plan file of its own for one test, in a directory of its own ([`remove_plan`] removes both).
fn plan_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "bulkhead-escape-input-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).expect("write the plan");
    p
}

fn remove_plan(p: &Path) {
    let _ = std::fs::remove_file(p);
    if let Some(dir) = p.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Exit 2 (bad input), no signal, and stderr says each of `wants`.
fn refused(what: &str, o: &Output, wants: &[&str]) {
    let err = stderr(o);
    let result = match (o.status.code(), o.status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "?".into(),
    };
    let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    println!("escape[input]: tried {what} -> {result}: {first}");
    assert_eq!(o.status.signal(), None, "{what}: killed by a signal\n{err}");
    assert_eq!(
        o.status.code(),
        Some(2),
        "{what}: not the bad-input exit\n{err}"
    );
    assert!(!err.contains("panicked"), "{what}: a panic\n{err}");
    for w in wants {
        assert!(err.contains(w), "{what}: stderr does not say {w:?}:\n{err}");
    }
}

/// `plan show` reads, checks and resolves a plan and touches no cgroup.
fn plan_show(name: &str, text: &str, wants: &[&str]) {
    let p = plan_file(name, text);
    let mut c = command();
    c.arg("-c").arg(&p).args(["plan", "show"]);
    let o = run(c);
    remove_plan(&p);
    let mut wants = wants.to_vec();
    let at = p.display().to_string();
    wants.push(&at);
    refused(&format!("plan show of {name}"), &o, &wants);
}

#[test]
fn quota_period_of_a_huge_span() {
    let _suite = crate::suite::shared();
    let text = format!("[slice.db]\nCPUQuota = \"50%\"\nCPUQuotaPeriodSec = \"{HUGE}\"\n");
    plan_show(
        "quota-period",
        &text,
        &[":3:1", "CPUQuotaPeriodSec", "100 years"],
    );
    // And through apply --dry-run, the way the review ran it, under a test cgroup root.
    if common::prerequisites() {
        let t = common::TestRoot::new();
        let p = t.plan(&text);
        let o = t.run(&["-c", p.to_str().expect("utf-8 path"), "apply", "--dry-run"]);
        refused(
            "apply --dry-run with CPUQuotaPeriodSec = 99999999999999999999d",
            &o,
            &[":3:1", "CPUQuotaPeriodSec"],
        );
        assert!(t.cgroups().is_empty(), "a refused plan created cgroups");
    }
}

#[test]
fn socket_idle_timeout_of_a_huge_span() {
    let _suite = crate::suite::shared();
    let text = format!(
        "[socket.app]\nlisten = [\"127.0.0.1:18080\"]\nbackend = \"127.0.0.1:18000\"\nidle_timeout = \"{HUGE}\"\n[socket.app.target]\ncommand = [\"/bin/true\"]\n"
    );
    plan_show(
        "idle-timeout",
        &text,
        &[":4:1", "[socket.app] idle_timeout", "100 years"],
    );
    // serve reads the same plan before it listens on anything.
    let p = plan_file("idle-timeout-serve", &text);
    let mut c = command();
    c.arg("-c").arg(&p).arg("serve");
    let o = run(c);
    remove_plan(&p);
    refused(
        "serve with idle_timeout = 99999999999999999999d",
        &o,
        &[":4:1", "idle_timeout"],
    );
}

#[test]
fn spawn_timeout_of_a_huge_span() {
    let _suite = crate::suite::shared();
    for opt in ["--timeout", "--stop-timeout"] {
        let mut c = command();
        c.args(["spawn", "-D", "/", opt, HUGE, "--", "/bin/true"]);
        let o = run(c);
        refused(&format!("spawn {opt} {HUGE}"), &o, &[opt, "100 years"]);
    }
}

/// Values the property suites found (each crashed or overflowed before its fix) or try.
#[test]
fn other_hostile_values() {
    let _suite = crate::suite::shared();
    let cases: &[(&str, &str, &[&str])] = &[
        ("quota", "[slice.db]\nCPUQuota = \"1e11%\"\n", &[":2:1", "CPUQuota"]),
        ("cpus", "[slice.db]\nAllowedCPUs = \"0-4294967295\"\n", &[":2:1", "AllowedCPUs"]),
        (
            "cpu-list",
            "[slice.db]\nAllowedCPUs = \"0-65535,65536-131071,131072-196607\"\n",
            &[":2:1", "AllowedCPUs"],
        ),
        (
            "hugetlb",
            "[slice.db]\nHugetlbMax = { \"99999999999999999G\" = \"1G\" }\n",
            &[":2:1", "HugetlbMax"],
        ),
        ("memory", "[slice.db]\nMemoryMax = \"99999999999999999999E\"\n", &[":2:1", "MemoryMax"]),
        (
            "tasks",
            "[slice.db]\nTasksMax = 999999999999999999999999999999999999999999\n",
            &[":2:1", "TasksMax"],
        ),
        ("weight-nan", "[slice.db]\nCPUWeight = nan\n", &[":2:1", "CPUWeight"]),
        (
            "pool",
            "[hugepages]\npools = { \"2M\" = \"15.999999999999998E\" }\n",
            &[":2:", "[hugepages] pools"],
        ),
        (
            "guard",
            "[slice.a]\n[slice.b]\n[guard]\nprotect = \"a\"\nsideloads = [\"b\"]\nperiod = \"99999999999999999999d\"\n",
            &[":6:1", "[guard] period"],
        ),
        ("syntax", "[slice.db]\nCPUWeight = 1\n[slice.\"db\"]\n", &[":3:", "duplicate key"]),
    ];
    for (name, text, wants) in cases {
        plan_show(name, text, wants);
    }
    for (opt, value) in [
        ("--memory", "99999999999999999999E"),
        ("--cpus", "4294967295"),
    ] {
        let mut c = command();
        c.args(["plan", "show", opt, value]);
        let o = run(c);
        refused(&format!("plan show {opt} {value}"), &o, &[opt]);
    }
}
