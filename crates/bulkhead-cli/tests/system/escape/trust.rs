//! Escape tests, issue 40 #12 and #13: what root reads and prints on another user's word.
//! - #12: only `place` refused a plan file others could write; `serve` ran a world-writable
//!   plan's command as root, and `apply` acted on it. Every root command now loads the plan
//!   through one trusted loader (root's file, writable by no one else, read through the
//!   descriptor that was checked).
//! - #13: `place` printed a user's command line raw: a newline in argv forged
//!   `bulkhead: error: ...` lines in root's terminal and logs. Control characters are escaped.

use crate::common::{stderr, stdout, TestRoot};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};

fn say(what: &str, result: &str) {
    println!("escape[trust]: tried {what} -> {result}");
}

fn bulkhead(t: &TestRoot, args: &[&str]) -> Output {
    // `timeout`: a command that accepts the plan keeps running (serve); its deadline ends it.
    bulkhead_testkit::bins::clean("timeout")
        .arg("30")
        .arg(bulkhead_testkit::bins::bulkhead())
        .env("BULKHEAD_CGROUP_ROOT", &t.cgroup)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run bulkhead")
}

#[test]
fn a_plan_others_can_write_is_refused_by_every_root_command() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    let marker =
        std::path::PathBuf::from(format!("/var/tmp/bh-trust-pwned-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    // A port free now (a valid plan: the build before the fix accepted it).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let plan = t.plan(&format!(
        "[slice.db]\n[slice.db-server]\nCPUWeight = 1000\n\
         [socket.pwn]\nlisten = [\"127.0.0.1:{port}\"]\nmode = \"pass\"\n\
         [socket.pwn.target]\ncommand = [\"/bin/sh\", \"-c\", \"touch {}\"]\n",
        marker.display()
    ));
    std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o666)).unwrap();
    let p = plan.to_str().unwrap();
    for args in [
        vec!["-c", p, "apply"],
        vec!["-c", p, "place", "--once"],
        vec!["-c", p, "serve"],
    ] {
        let o = bulkhead(&t, &args);
        let shown = args[2..].join(" ");
        say(
            &format!("{shown} with a plan of mode 0666"),
            &format!("exit {:?}: {}", o.status.code(), stderr(&o).trim()),
        );
        assert_ne!(o.status.code(), Some(0), "{shown} acted on the plan");
        assert_ne!(
            o.status.code(),
            Some(124),
            "{shown} kept running on the plan"
        );
        assert!(
            stderr(&o).contains("refusing the plan file")
                && stderr(&o).contains("writable by its group or others"),
            "{shown}: {}",
            stderr(&o)
        );
    }
    assert!(
        !t.controller_dir("cpu", "db.slice").exists(),
        "apply made the plan's slices"
    );
    assert!(!marker.exists(), "serve ran the plan's command");
}

#[test]
fn a_users_command_line_forges_no_line_of_roots_output() {
    let Some((_suite, t, p)) = crate::suite::planned(
        "[slice.db]\n[slice.db-helper]\nCPUWeight = 10\n\
         [place.forged]\nslice = \"db-helper\"\nuser = \"nobody\"\ncmdline = \"bh-forge*\"\n",
    ) else {
        return;
    };
    let o = bulkhead(&t, &["-c", p, "apply"]);
    assert!(o.status.success(), "apply: {}", stderr(&o));
    // nobody's process: argv[0] carries a newline and a line that looks like bulkhead's own.
    let mut forger = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args([
            crate::common::serve::PY,
            "-c",
            "import os,sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); \
             os.execv('/bin/sh', ['bh-forge\\nbulkhead: error: forged by nobody\\x1b[2K', '-c', 'read x'])",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = forger.id();
    assert_eq!(bulkhead_testkit::first_line(&mut forger).trim(), "ready");
    // The exec is done once /proc shows the new command line.
    crate::common::wait_for("the forger's exec", || {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"bh-forge"))
    });
    let o = bulkhead(&t, &["-c", p, "place", "--once"]);
    let text = stdout(&o) + &stderr(&o);
    say(
        "place --once on nobody's process with a newline in argv",
        text.trim(),
    );
    drop(forger.stdin.take());
    let _ = forger.wait();
    assert!(o.status.success(), "place: {text}");
    assert!(
        text.contains(&pid.to_string()),
        "the process was placed: {text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("bulkhead: error: forged")),
        "a user's argv forged a line: {text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "an escape sequence reached the terminal: {text:?}"
    );
    assert!(text.contains("\\nbulkhead: error: forged"), "{text}");
}
