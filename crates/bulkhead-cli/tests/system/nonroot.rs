//! bulkhead as a user without root, on slices root applied: the reading commands show what
//! exists and say what they could not verify; the changing commands say "run as root" first
//! and change nothing.

use crate::common::{stderr, stdout, TestRoot};
use bulkhead::plan::EMBEDDED_DEFAULT;
use bulkhead_testkit::assert_has;
use std::os::unix::process::CommandExt;
use std::process::Output;

/// nobody: no groups (std drops them when root sets the UID), no capabilities.
const NOBODY: u32 = 65534;

fn as_nobody(t: &TestRoot, args: &[&str]) -> Output {
    let mut c = t.cmd();
    c.uid(NOBODY).gid(NOBODY).current_dir("/").args(args);
    c.output().expect("run bulkhead as nobody")
}

/// A refusal: the exit status, and "must run as root" as the first (only) error, with the
/// command to run instead.
fn assert_refused(o: &Output, what: &str, code: i32) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{what}: {err}");
    assert!(
        err.starts_with(&format!(
            "bulkhead: error: bulkhead {what} must run as root: "
        )),
        "{err}"
    );
    assert!(err.contains("hint: sudo "), "{err}");
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    assert!(!err.contains("not created by bulkhead"), "{err}");
    assert!(!err.contains("does not exist"), "{err}");
}

#[test]
fn without_root_reads_say_what_they_could_not_verify_and_changes_say_root() {
    let Some((_suite, t, p)) = crate::suite::planned(EMBEDDED_DEFAULT) else {
        return;
    };
    t.ok(&["-c", p, "apply"]);

    // status: the slices root applied, and why their ownership is not verified.
    let o = as_nobody(&t, &["-c", p, "status", "--interval", "0.1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("no slices"), "{out}");
    for s in ["db.slice", "db-server.slice", "db-helper.slice"] {
        assert!(out.contains(s), "{s} missing:\n{out}");
    }
    assert!(
        out.contains("note: ownership not verified: uid 65534 cannot read"),
        "{out}"
    );
    let o = as_nobody(&t, &["-c", p, "status", "--json", "--interval", "0.1"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["slices"].as_array().map(Vec::len), Some(4), "{v}");
    assert!(v["unverified"].as_str().is_some(), "{v}");
    // Root sees the marks: no note.
    let o = t.run(&["-c", p, "status", "--json", "--interval", "0.1"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v.get("unverified").is_none(), "{v}");

    // plan show reads the plan and the host's facts only.
    let o = as_nobody(&t, &["-c", p, "plan", "show"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_has(&stdout(&o), "[slice.db-server]");

    // The changing commands: root first, with the command again under sudo.
    let o = as_nobody(&t, &["-c", p, "run", "--slice", "db-helper", "id"]);
    assert_refused(&o, "run", 125);
    assert!(
        stderr(&o).contains(&format!(
            "sudo {}",
            bulkhead_testkit::bins::this_build().display()
        )),
        "{}",
        stderr(&o)
    );
    for (args, what) in [
        (&["apply"][..], "apply"),
        (&["apply", "--dry-run"], "apply"),
        (&["destroy"], "destroy"),
        (&["destroy", "--dry-run"], "destroy"),
        (&["move", "--slice", "db-helper", "1"], "move"),
        (&["guard"], "guard"),
        (&["hugepages", "reset"], "hugepages reset"),
    ] {
        let mut line = vec!["-c", p];
        line.extend_from_slice(args);
        assert_refused(&as_nobody(&t, &line), what, 4);
    }

    // Root without CAP_SYS_ADMIN (a container may drop it) cannot read the marks either:
    // apply and destroy say that, not "not created by bulkhead".
    if bulkhead_testkit::prereq::require(
        (!bulkhead_testkit::prereq::on_path("setpriv"))
            .then_some("setpriv (util-linux) is missing"),
    ) {
        for verb in ["apply", "destroy"] {
            let o = std::process::Command::new("setpriv")
                .args(["--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--"])
                .arg(bulkhead_testkit::bins::this_build())
                .args(["-c", p, verb])
                .env("BULKHEAD_CGROUP_ROOT", &t.cgroup)
                .output()
                .unwrap();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{verb}: {err}");
            assert!(
                err.contains("cannot tell whether slice 'db") && err.contains("CAP_SYS_ADMIN"),
                "{verb}: {err}"
            );
            assert!(!err.contains("not created by bulkhead"), "{verb}: {err}");
        }
    }

    // Nothing changed: root still finds the plan applied, and removes it.
    let o = t.run(&["-c", p, "apply"]);
    assert_has(&stdout(&o), "nothing to change: 4 slice(s)");
    t.ok(&["-c", p, "destroy"]);
    assert!(t.cgroups().is_empty(), "left behind: {:?}", t.cgroups());
}

/// Issue 41 #6: a pidfile a user cannot read is a service whose placement is unknown, not
/// "OK ... 0 process(es) in db-server".
#[test]
fn check_without_root_says_a_pidfile_it_cannot_read_is_unknown() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    let dir = bulkhead_testkit::fs::TempDir::new("nonroot-pidfile");
    let pidfile = dir.path().join("postmaster.pid");
    std::fs::write(&pidfile, format!("{}\n", std::process::id())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let plan = t.plan(&format!(
        "[slice.db-server]\nCPUWeight = 1000\nservices = [{{ name = \"pg-nonroot\", pidfile = \"{}\" }}]\n[slice.db-helper]\nCPUWeight = 10\n",
        pidfile.display()
    ));
    let p = plan.to_str().unwrap();
    let o = as_nobody(&t, &["-c", p, "check"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        out.contains(&format!(
            "UNKNOWN  access    service pg-nonroot.service: its pidfile {} cannot be used",
            pidfile.display()
        )),
        "{out}"
    );
    assert!(
        !out.contains("service pg-nonroot.service: 0 process(es)"),
        "{out}"
    );
}
