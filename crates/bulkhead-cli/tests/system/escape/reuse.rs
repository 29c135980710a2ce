//! Escape test, issue 40 #7: `place` wrote a PID number it had decided on earlier. A user's
//! process that a rule matches exits between the decision and the write, root's next process
//! gets its PID, and root's process is moved into the user's (lower) slice: the database
//! server starved by a user. Now `place` holds the matched process by a pidfd from the read
//! to the write, checks after the write that it is still the same, and puts a process that
//! took the number back where its parent is.
//!
//! The window is held open from outside, so that the test never depends on luck: strace
//! delays `place`'s first write into the helper slice's `cgroup.procs` by three seconds; in
//! that time the user's process is killed and root's next process is given its PID
//! (`/proc/sys/kernel/ns_last_pid`, as CRIU restores PIDs).

use crate::common::TestRoot;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn say(what: &str, result: &str) {
    println!("escape[reuse]: tried {what} -> {result}");
}

/// Killed and reaped when dropped.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `place` under strace: both killed when dropped, the placer first (a killed strace would
/// leave it running, detached).
struct Placer(Child);

impl Drop for Placer {
    fn drop(&mut self) {
        if let Some(pl) = traced(self.0.id()) {
            let _ = bulkhead_sys::process::kill(pl as i32, libc::SIGKILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a thread of `pid` is stopped entering write(2) on a descriptor of `target`.
fn in_write_to(pid: u32, target: &[PathBuf]) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        let text = std::fs::read_to_string(t.path().join("syscall")).unwrap_or_default();
        let mut f = text.split_whitespace();
        let (Some(nr), Some(fd)) = (f.next(), f.next()) else {
            return false;
        };
        let fd = i64::from_str_radix(fd.trim_start_matches("0x"), 16).unwrap_or(-1);
        nr == libc::SYS_write.to_string()
            && std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).is_ok_and(|p| target.contains(&p))
    })
}

/// The first child of `parent` (the process strace runs, a shell's child).
fn traced(parent: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn wait_until(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// A root process with PID `pid`, the child of a shell in db-server (so that whatever puts it
/// back where its parent is writes only into the test's own cgroups): the shell, the PID.
/// The test is alone (nothing else of it forks); another process of the host may take the
/// number first, so it tries again.
fn root_process_with_pid(t: &TestRoot, plan: &str, pid: u32) -> Option<Kid> {
    for _ in 0..200 {
        let sh = Kid(t
            .cmd()
            .args(["-c", plan, "run", "--slice", "db-server", "--", "sh", "-c"])
            // The shell's next PID is `pid`: its builtin echo sets it, then it forks.
            .arg(format!(
                "echo {} > /proc/sys/kernel/ns_last_pid; sleep 600 & wait",
                pid - 1
            ))
            .stdin(Stdio::null())
            .spawn()
            .ok()?);
        let mut child = None;
        wait_until("the shell's child", Duration::from_secs(30), || {
            child = traced(sh.0.id());
            child.is_some()
        });
        if child == Some(pid) {
            return Some(sh);
        }
        let _ = bulkhead_sys::process::kill(child? as i32, libc::SIGKILL);
    }
    None
}

#[test]
fn a_pid_reused_during_the_move_is_not_moved() {
    let Some(_suite) = crate::suite::cgroups_alone() else {
        return;
    };
    if !bulkhead_testkit::prereq::require(
        (!bulkhead_testkit::prereq::on_path("strace")).then_some("strace (Debian package strace)"),
    ) {
        return;
    }
    let t = TestRoot::new();
    let marker = format!("bh-reuse-{}", std::process::id());
    let plan = t.plan(&format!(
        "[slice.db-server]\nCPUWeight = 1000\n[slice.db-helper]\nCPUWeight = 10\n\
         [place.attack]\nslice = \"db-helper\"\nuser = \"nobody\"\ncmdline = \"{marker} *\"\n"
    ));
    let p = plan.to_str().unwrap();
    t.ok(&["-c", p, "apply"]);
    let procs: Vec<PathBuf> = t
        .cgroups()
        .into_iter()
        .filter(|d| d.ends_with("db-helper.slice"))
        .map(|d| d.join("cgroup.procs"))
        .collect();
    assert!(!procs.is_empty());
    let scratch = bulkhead_testkit::fs::TempDir::new("reuse");
    let log = scratch.path().join("place.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut strace = Command::new("strace");
    strace.args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=write"]);
    strace.args(["-e", "inject=write:delay_enter=3000000:when=1"]);
    for p in &procs {
        strace.arg("-P").arg(p);
    }
    let placer = Placer(
        strace
            .arg(bulkhead_testkit::bins::bulkhead())
            .env("BULKHEAD_CGROUP_ROOT", &t.cgroup)
            .args(["-c", p, "place", "--interval", "50ms"])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap(),
    );
    // The user's process the rule matches.
    let mut attacker = Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "bash",
            "-c",
        ])
        .arg(format!("exec -a '{marker} x' sleep 600"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let victim_pid = attacker.id();
    // `place` is about to write its PID into the helper slice: the write is held.
    wait_until(
        "place's write into db-helper",
        Duration::from_secs(30),
        || traced(placer.0.id()).is_some_and(|pl| in_write_to(pl, &procs)),
    );
    attacker.kill().unwrap();
    attacker.wait().unwrap();
    let Some(victim) = root_process_with_pid(&t, p, victim_pid) else {
        panic!("PID {victim_pid} was not given again in 200 tries (a busy host?)");
    };
    say(
        &format!("nobody's matched process {victim_pid} exited during the move; root's sleep got its PID"),
        "",
    );
    // The write goes on after the delay: `place` says what happened to that PID.
    wait_until(
        "place's line about the PID",
        Duration::from_secs(30),
        || std::fs::read_to_string(&log).is_ok_and(|l| l.contains(&victim_pid.to_string())),
    );
    let cgroups = std::fs::read_to_string(format!("/proc/{victim_pid}/cgroup")).unwrap();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    say("root's process afterwards", cgroups.trim());
    println!("{text}");
    if let Some(sleep) = traced(victim.0.id()) {
        let _ = bulkhead_sys::process::kill(sleep as i32, libc::SIGKILL);
    }
    drop(victim);
    drop(placer);
    let _ = t.run(&["-c", p, "destroy", "--kill"]);
    assert!(
        !cgroups.contains("db-helper.slice"),
        "root's process was moved into nobody's slice:\n{cgroups}\n{text}"
    );
    assert!(cgroups.contains("db-server.slice"), "{cgroups}");
}
