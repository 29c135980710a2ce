//! Issue 41 #3: `place` as a service without systemd, as the package ships it: the init
//! script `dist/init.d/bulkhead-place` (apply, then place as a daemon with its pidfile and its
//! log) on this host, whose PID 1 is not systemd. start, status, a rule acting, reload
//! (SIGHUP: the new rule acts, the log says so with a stamp), stop, and `check` saying
//! whether place runs at each step.

use super::{in_slice, marker, renamed_sleeper};
use crate::common::{prerequisites, stdout, wait_for, TestRoot};
use bulkhead::plan::EMBEDDED_DEFAULT;
use bulkhead_testkit::assert_has;
use std::process::{Command, Output};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../dist/init.d/bulkhead-place"
);

/// The init script with `cmd`, for this test's plan, pidfile, log and cgroup root.
fn script(t: &TestRoot, plan: &str, dir: &std::path::Path, cmd: &str) -> Output {
    Command::new(SCRIPT)
        .arg(cmd)
        .env("BULKHEAD", bulkhead_testkit::bins::bulkhead())
        .env("PLAN", plan)
        .env("PIDFILE", dir.join("place.pid"))
        .env("LOGFILE", dir.join("place.log"))
        .env("PLACE_OPTS", "--interval 50ms")
        .env("BULKHEAD_CGROUP_ROOT", &t.cgroup)
        .output()
        .expect("run the init script")
}

#[test]
fn the_init_script_applies_runs_reloads_and_stops_place() {
    let _suite = crate::suite::shared();
    if !prerequisites()
        || !bulkhead_testkit::prereq::require(
            (!bulkhead_testkit::prereq::on_path("start-stop-daemon"))
                .then_some("start-stop-daemon (Debian package dpkg)"),
        )
    {
        return;
    }
    let (a, b) = (marker("init-a"), marker("init-b"));
    let rule = |m: &str| {
        format!("{EMBEDDED_DEFAULT}\n[place.t]\nslice = \"db-helper\"\ncmdline = \"{m} *\"\n")
    };
    let t = TestRoot::new();
    let plan = t.plan(&rule(&a));
    let p = plan.to_str().unwrap();
    let dir = bulkhead_testkit::fs::TempDir::new("init-script");
    let log = dir.path().join("place.log");
    let helper = "db.slice/db-helper.slice";
    let check = || stdout(&t.run(&["-c", p, "check"]));

    // Before: the slices do not exist, place does not run.
    let o = script(&t, p, dir.path(), "status");
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
    // start: apply (the slices), then place in the background.
    let o = script(&t, p, dir.path(), "start");
    assert!(
        o.status.success(),
        "{}{}",
        stdout(&o),
        crate::common::stderr(&o)
    );
    assert!(
        t.controller_dir("cpu", helper).is_dir(),
        "apply did not run"
    );
    let pid: i32 = std::fs::read_to_string(dir.path().join("place.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let o = script(&t, p, dir.path(), "status");
    assert_has(&stdout(&o), &format!("running (PID {pid})"));
    let first = renamed_sleeper(&a, false);
    wait_for("the rule's process in db-helper", || {
        in_slice(first.id() as i32, &t, helper)
    });
    wait_for("check to see place running", || {
        check().contains(&format!("bulkhead place runs (PID {pid}) with this plan"))
    });
    // reload: the new rule acts; the log says so, stamped.
    std::fs::write(&plan, rule(&b)).unwrap();
    assert!(check().contains("runs an older version"));
    let o = script(&t, p, dir.path(), "reload");
    assert!(o.status.success(), "{}", stdout(&o));
    let second = renamed_sleeper(&b, false);
    wait_for("the new rule's process in db-helper", || {
        in_slice(second.id() as i32, &t, helper)
    });
    let text = std::fs::read_to_string(&log).unwrap();
    let hup = text
        .lines()
        .find(|l| l.contains("SIGHUP"))
        .unwrap_or_else(|| panic!("no SIGHUP line in the log:\n{text}"));
    assert!(
        hup.starts_with("20") && hup.contains("Z bulkhead: place: SIGHUP: the plan was read again"),
        "{hup}"
    );
    let placed = text
        .lines()
        .find(|l| l.contains(&format!("placed {}", first.id())))
        .unwrap_or_else(|| panic!("no line for {}:\n{text}", first.id()));
    assert!(
        placed.starts_with("20") && placed.contains("Z placed "),
        "{placed}"
    );
    // stop: place ends, check says it does not run.
    let o = script(&t, p, dir.path(), "stop");
    assert!(o.status.success(), "{}", stdout(&o));
    // (Its parent is PID 1 since start-stop-daemon left it: reaped there.)
    wait_for("place to end", || !bulkhead_sys::process::alive(pid as u32));
    let o = t.run(&["-c", p, "check"]);
    assert_has(&stdout(&o), "bulkhead place is not running (no state file)");
    assert!(o.status.code().unwrap_or(0) >= 1, "{}", stdout(&o));
    drop((first, second));
    let _ = t.run(&["-c", p, "destroy", "--kill"]);
}
