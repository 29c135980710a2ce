//! The systemd backend against a real systemd: a Debian bookworm container booted with
//! systemd-nspawn (see common/container.rs). Inside it the cgroup controllers are read-only,
//! so systemd records properties without enforcing them: these tests check the API contract
//! (units, properties, exit codes, files); enforcement is the cgroupfs tests' job.

use crate::common;
use bulkhead_testkit::assert_has;

use crate::common::container::{err, out, Container};

const PLAN_CHANGED: &str = r#"
[slice.db]
Description = "Database host workloads"

[slice.db-server]
CPUWeight = 1000
IOWeight = 1000
MemorySwapMax = 0

[slice.db-helper]
CPUWeight = 20
IOWeight = 10
MemoryHigh = { value = "4%", min = "1200M" }
MemoryMax = { value = "5%", min = "1400M" }

[slice.good]
CPUWeight = 50

# A site drop-in makes systemd fail this slice's start job (the test writes it).
[slice.worse]
CPUWeight = 60
"#;

fn units(c: &Container, pattern: &str) -> String {
    out(&c.sh(&format!(
        "systemctl list-units --all --plain --no-legend '{pattern}'"
    )))
}

#[test]
fn transient_slices_idempotent_rolled_back_and_refused() {
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };

    // A dry run prints the D-Bus calls and changes nothing.
    let o = c.bulkhead(&["apply", "--dry-run"]);
    assert!(o.status.success(), "{}", err(&o));
    let text = out(&o);
    assert!(
        text.contains("dbus StartTransientUnit(\"db-helper.slice\", \"fail\", ["),
        "{text}"
    );
    assert!(
        text.contains("t MemoryHigh = 1258291200  # MemoryHigh=1200M"),
        "{text}"
    );
    assert!(
        units(&c, "db*.slice").trim().is_empty(),
        "a dry run created units"
    );
    let o = c.bulkhead(&["apply", "--dry-run", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["backend"], "systemd");
    assert_eq!(v["changes"][0]["op"], "systemd");
    assert_eq!(v["changes"][0]["call"], "start_transient_unit");

    let o = c.bulkhead(&["apply"]);
    assert!(o.status.success(), "{}", err(&o));
    for (unit, prop, want) in [
        ("db-helper.slice", "CPUWeight", "idle"),
        ("db-helper.slice", "IOWeight", "10"),
        // The default plan's floors: 4% of this host's RAM, but at least 1200M.
        ("db-helper.slice", "MemoryHigh", "1258291200"),
        ("db-helper.slice", "MemoryMax", "1468006400"),
        ("db-helper.slice", "Transient", "yes"),
        ("db-helper.slice", "ActiveState", "active"),
        ("db-helper.slice", "MemoryAccounting", "yes"),
        ("db-server.slice", "CPUWeight", "1000"),
        ("db-server.slice", "IOWeight", "1000"),
        ("db-server.slice", "MemorySwapMax", "0"),
        ("db.slice", "Description", "Database host workloads"),
    ] {
        assert_eq!(c.show(unit, prop), want, "{unit} {prop}");
    }
    let o = c.bulkhead(&["status"]);
    assert!(
        out(&o).starts_with("backend: systemd (systemd 252"),
        "{}",
        out(&o)
    );
    assert_has(&out(&o), "db-helper.slice");
    let o = c.bulkhead(&["apply"]);
    assert!(o.status.success());
    assert_has(&out(&o), "nothing to change: 4 slice(s)");
    check_under_systemd(&c);

    // A slice systemd cannot start (a site's drop-in asserts a file that is not there; the
    // plan itself cannot know): the error names the unit and the journal, and everything is
    // put back (db-helper's CPUWeight, the new 'good' slice).
    c.sh("mkdir -p /etc/systemd/system/worse.slice.d");
    c.write(
        "/etc/systemd/system/worse.slice.d/site.conf",
        "[Unit]\nAssertPathExists=/nonexistent-site-marker\n",
    );
    c.sh("systemctl daemon-reload");
    c.write("/tmp/changed.toml", PLAN_CHANGED);
    let o = c.bulkhead(&["-c", "/tmp/changed.toml", "apply"]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let e = err(&o);
    assert!(e.contains("systemd could not start worse.slice"), "{e}");
    assert!(e.contains("journalctl -u worse.slice"), "{e}");
    assert!(e.contains("were undone"), "{e}");
    c.sh("rm -r /etc/systemd/system/worse.slice.d && systemctl daemon-reload");
    assert_eq!(
        c.show("db-helper.slice", "CPUWeight"),
        "idle",
        "the change was undone"
    );
    assert!(
        units(&c, "good.slice").trim().is_empty(),
        "good.slice was left behind"
    );
    assert!(units(&c, "worse.slice").trim().is_empty());

    // systemd's own slice, and a slice that a unit file of someone else's defines.
    c.write("/tmp/system.toml", "[slice.system]\nCPUWeight = 50\n");
    let o = c.bulkhead(&["-c", "/tmp/system.toml", "apply"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert_has(&err(&o), "slice 'system' exists in systemd as system.slice");
    assert_eq!(c.show("system.slice", "CPUWeight"), "[not set]");
    c.write("/etc/systemd/system/theirs.slice", "[Slice]\nCPUWeight=7\n");
    c.sh("systemctl daemon-reload && systemctl start theirs.slice");
    c.write("/tmp/theirs.toml", "[slice.theirs]\nCPUWeight = 50\n");
    for persist in [false, true] {
        let mut args = vec!["-c", "/tmp/theirs.toml", "apply"];
        if persist {
            args.push("--persist");
        }
        let o = c.bulkhead(&args);
        assert_eq!(o.status.code(), Some(2), "{}", err(&o));
        assert_has(&err(&o), "loaded from /etc/systemd/system/theirs.slice");
    }
    assert_eq!(c.show("theirs.slice", "CPUWeight"), "7");

    // Not root: bulkhead says so first (issue 28), before systemd would refuse.
    let o = c.sh(
        "setpriv --reuid=65534 --regid=65534 --clear-groups bulkhead -c /tmp/changed.toml apply",
    );
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert_has(&err(&o), "bulkhead apply must run as root");
    let o = c.sh(
        "setpriv --reuid=65534 --regid=65534 --clear-groups bulkhead run --slice db-helper true",
    );
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert_has(&err(&o), "bulkhead run must run as root");
    // Reading needs no root over D-Bus: nobody sees the slices, verified by their records.
    let o =
        c.sh("setpriv --reuid=65534 --regid=65534 --clear-groups bulkhead status --interval 0.1");
    assert!(o.status.success(), "{}", err(&o));
    assert_has(&out(&o), "db-helper.slice");
    assert!(!out(&o).contains("no slices"), "{}", out(&o));
    assert!(!out(&o).contains("not verified"), "{}", out(&o));

    // D-Bus unreachable: --backend systemd says so and changes nothing; auto falls back to
    // cgroupfs (and warns that PID 1 is systemd).
    c.sh("systemctl stop dbus.socket dbus.service");
    let o = c.bulkhead(&["--backend", "systemd", "destroy"]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert_has(&err(&o), "cannot reach systemd over D-Bus");
    assert_has(&err(&o), "systemctl start dbus");
    let o = c.bulkhead(&["status"]);
    assert!(out(&o).starts_with("backend: cgroupfs"), "{}", out(&o));
    assert_eq!(c.show("db-helper.slice", "ActiveState"), "active");
    c.sh("systemctl start dbus.socket dbus.service");

    let o = c.bulkhead(&["destroy"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        units(&c, "db*.slice").trim().is_empty(),
        "{}",
        units(&c, "db*.slice")
    );
    assert!(c
        .path("/run/bulkhead/systemd")
        .read_dir()
        .unwrap()
        .next()
        .is_none());
}

#[test]
fn run_and_move_through_systemd() {
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };
    let o = c.bulkhead(&["-q", "apply"]);
    assert!(o.status.success(), "{}", err(&o));

    // A transient service in the slice; its exit code is bulkhead's.
    let o = c.bulkhead(&[
        "run",
        "--slice",
        "db-helper",
        "--env",
        "GREETING=hi",
        "--cwd",
        "/tmp",
        "--",
        "sh",
        "-c",
        "echo $GREETING from $(pwd); grep '^0::' /proc/self/cgroup; echo oops >&2; exit 7",
    ]);
    assert_eq!(o.status.code(), Some(7), "{}", err(&o));
    let text = out(&o);
    assert!(text.starts_with("hi from /tmp\n"), "{text}");
    assert!(
        text.contains("0::/db.slice/db-helper.slice/bulkhead-run-"),
        "{text}"
    );
    assert!(text.contains(".service\n"), "{text}");
    assert_has(&err(&o), "oops");

    // Standard input is the caller's; a literal $ stays literal; signals give 128+N.
    let o = c.sh("echo piped | bulkhead run --slice db-helper -- sh -c 'cat; echo \"$0\"' '$HOME'");
    assert_eq!(out(&o), "piped\n$HOME\n", "{}", err(&o));
    let o = c.bulkhead(&[
        "run",
        "--slice",
        "db-helper",
        "--",
        "sh",
        "-c",
        "kill -9 $$",
    ]);
    assert_eq!(o.status.code(), Some(137), "{}", err(&o));
    let o = c.bulkhead(&[
        "run",
        "--slice",
        "db-helper",
        "--uid",
        "nobody",
        "--",
        "id",
        "-u",
    ]);
    assert_eq!(out(&o), "65534\n", "{}", err(&o));
    let o = c.bulkhead(&["run", "--slice", "db-helper", "--", "/no/such/command"]);
    assert_eq!(o.status.code(), Some(127));
    let o = c.bulkhead(&["run", "--slice", "nope", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert_has(&err(&o), "unknown slice 'nope'");
    // Nothing stays behind after the runs.
    assert!(
        units(&c, "bulkhead-run-*").trim().is_empty(),
        "{}",
        units(&c, "bulkhead-run-*")
    );

    // --pty: the command's standard input is a terminal.
    let o = c.bulkhead(&[
        "run",
        "--pty",
        "--slice",
        "db-helper",
        "--",
        "sh",
        "-c",
        "test -t 0 && tty; exit 4",
    ]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(out(&o).starts_with("/dev/pts/"), "{:?}", out(&o));

    // --scope: bulkhead moves itself into a scope and execs.
    let o = c.bulkhead(&[
        "run",
        "--scope",
        "--slice",
        "db-server",
        "--",
        "sh",
        "-c",
        "grep '^0::' /proc/self/cgroup; exit 3",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(
        out(&o).starts_with("0::/db.slice/db-server.slice/bulkhead-run-"),
        "{}",
        out(&o)
    );
    assert!(out(&o).trim_end().ends_with(".scope"), "{}", out(&o));

    // move: the first process creates the delegated scope, the next is attached to it.
    let mut pids = Vec::new();
    for n in 0..2 {
        c.sh(&format!("systemd-run --unit victim{n} -q sleep 1000"));
        pids.push(c.show(&format!("victim{n}.service"), "MainPID"));
    }
    for pid in &pids {
        let o = c.bulkhead(&["move", "--slice", "db-helper", pid]);
        assert!(o.status.success(), "{}", err(&o));
        let cg = out(&c.sh(&format!("cat /proc/{pid}/cgroup")));
        assert!(
            cg.contains("0::/db.slice/db-helper.slice/bulkhead-move-db-helper.scope\n"),
            "{cg}"
        );
    }
    let o = c.bulkhead(&["move", "--slice", "db-helper", "1", "99999999"]);
    assert_eq!(o.status.code(), Some(1));
    assert_has(
        &err(&o),
        "could not move 1: systemd refused AttachProcessesToUnit",
    );
    assert_has(&err(&o), "could not move 99999999: no such process");

    // destroy refuses while processes are in the slices, then --kill stops them.
    let o = c.bulkhead(&["destroy"]);
    assert_eq!(o.status.code(), Some(2));
    assert_has(&err(&o), "slices still have processes");
    let o = c.bulkhead(&["destroy", "--kill"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        units(&c, "db*.slice").trim().is_empty(),
        "{}",
        units(&c, "db*.slice")
    );
    assert!(
        units(&c, "bulkhead-*").trim().is_empty(),
        "{}",
        units(&c, "bulkhead-*")
    );
}

#[test]
fn persistent_units_survive_a_reload() {
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };
    let o = c.bulkhead(&["apply", "--persist", "--dry-run"]);
    assert_has(&out(&o), "write /etc/systemd/system/db-helper.slice:");
    assert_has(&out(&o), "dbus Reload()");
    assert!(!c.path("/etc/systemd/system/db-helper.slice").exists());

    let o = c.bulkhead(&["-q", "apply", "--persist"]);
    assert!(o.status.success(), "{}", err(&o));
    let file = std::fs::read_to_string(c.path("/etc/systemd/system/db-helper.slice")).unwrap();
    assert!(
        file.contains("\n[Slice]\nCPUWeight=idle\nMemoryHigh=4%\nMemoryMax=5%\nIOWeight=10\n"),
        "{file}"
    );
    assert_eq!(
        c.show("db-helper.slice", "FragmentPath"),
        "/etc/systemd/system/db-helper.slice"
    );
    assert_eq!(
        c.show("db-helper.slice", "DropInPaths"),
        "/etc/systemd/system/db-helper.slice.d/50-bulkhead-floor.conf"
    );
    c.sh("systemctl daemon-reload");
    for (prop, want) in [
        ("CPUWeight", "idle"),
        ("MemoryHigh", "1258291200"),
        ("ActiveState", "active"),
        ("Transient", "no"),
    ] {
        assert_eq!(
            c.show("db-helper.slice", prop),
            want,
            "{prop} after daemon-reload"
        );
    }
    let o = c.bulkhead(&["apply", "--persist"]);
    assert_has(&out(&o), "nothing to change");
    // Transient and persistent do not mix.
    let o = c.bulkhead(&["apply"]);
    assert_eq!(o.status.code(), Some(2));
    assert_has(&err(&o), "made persistent by an earlier `apply --persist`");

    // A changed plan rewrites the file and systemd takes the new value.
    c.write(
        "/tmp/p.toml",
        &PLAN_CHANGED[..PLAN_CHANGED.find("[slice.good]").unwrap()],
    );
    let o = c.bulkhead(&["-q", "-c", "/tmp/p.toml", "apply", "--persist"]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(c.show("db-helper.slice", "CPUWeight"), "20");

    let o = c.bulkhead(&["-q", "-c", "/tmp/p.toml", "destroy"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(!c.path("/etc/systemd/system/db-helper.slice").exists());
    assert!(!c.path("/etc/systemd/system/db-helper.slice.d").exists());
    c.sh("systemctl daemon-reload");
    // systemd still knows the name (a slice loads without a file), but not from bulkhead's.
    assert_eq!(c.show("db-helper.slice", "FragmentPath"), "");
    assert_eq!(c.show("db-helper.slice", "ActiveState"), "inactive");
}

#[test]
fn exported_files_verify_and_import_back() {
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };
    c.write(
        "/tmp/rich.toml",
        r#"
[slice.db]
Description = "Database host workloads"

[slice.db-helper]
CPUWeight = "idle"
CPUQuota = "150%"
CPUQuotaPeriodSec = "50ms"
AllowedCPUs = "0"
MemoryHigh = { value = "4%", min = "1200M" }
MemoryMax = { value = "5%", min = "1400M" }
IOWeight = 10
IOReadBandwidthMax = "/usr/local/bin/bulkhead 10M"
TasksMax = "10%"
HugetlbMax = { "2M" = "8M" }

[slice.db-server]
CPUWeight = 1000
IOWeight = 1000
MemorySwapMax = 0
MemoryLow = "1G"
"#,
    );
    for (plan, version) in [
        ("", ""),
        ("/tmp/rich.toml", ""),
        ("/tmp/rich.toml", "219"),
        ("/tmp/rich.toml", "240"),
    ] {
        let dir = format!("/tmp/export-{}-{version}", plan.len());
        let mut args = vec![];
        if !plan.is_empty() {
            args.extend(["-c", plan]);
        }
        args.extend(["export", "systemd", dir.as_str()]);
        if !version.is_empty() {
            args.extend(["--systemd-version", version]);
        }
        let o = c.bulkhead(&args);
        assert!(o.status.success(), "{}", err(&o));
        // Every file passes systemd's own check, with no unknown key or section.
        let v = c.sh(&format!("systemd-analyze verify {dir}/*.slice"));
        let said = format!("{}{}", out(&v), err(&v));
        assert!(v.status.success(), "{said}");
        assert!(!said.contains("Unknown"), "{said}");
        if version == "219" {
            let t = std::fs::read_to_string(c.path(&format!("{dir}/db-helper.slice"))).unwrap();
            let slice = t
                .split("[Slice]\n")
                .nth(1)
                .unwrap()
                .split("\n\n")
                .next()
                .unwrap();
            assert!(
                slice.contains("CPUShares=") && !slice.contains("CPUWeight="),
                "{t}"
            );
            assert!(
                t.contains("# MemoryHigh is left out: systemd 219 does not know it"),
                "{t}"
            );
            assert_has(&err(&o), "AllowedCPUs is left out");
        }
        // import(export(plan)) resolves to the same plan.
        let back = format!("{dir}/back.toml");
        let o = c.sh(&format!("bulkhead import {dir}/*.slice -o {back}"));
        assert!(o.status.success(), "{}", err(&o));
        let mut show = vec![];
        if !plan.is_empty() {
            show.extend(["-c", plan]);
        }
        show.extend(["plan", "show", "--json"]);
        let want: serde_json::Value = serde_json::from_slice(&c.bulkhead(&show).stdout).unwrap();
        let got: serde_json::Value =
            serde_json::from_slice(&c.bulkhead(&["-c", &back, "plan", "show", "--json"]).stdout)
                .unwrap();
        assert_eq!(
            want["slices"], got["slices"],
            "{plan} for systemd {version}"
        );
    }
}

/// This host's PID 1 is not systemd: auto picks cgroupfs, and asking for systemd says why not.
#[test]
fn without_systemd() {
    let _suite = crate::suite::shared();
    let bin = bulkhead_testkit::bins::this_build();
    if std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd") {
        eprintln!("SKIPPED: PID 1 is systemd here; this test is about hosts without it");
        return;
    }
    let o = std::process::Command::new(&bin)
        .args(["--backend", "systemd", "apply"])
        .env_remove("BULKHEAD_CONFIG")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_has(&err(&o), "cannot reach systemd over D-Bus");
    let o = std::process::Command::new(&bin)
        .args(["apply", "--persist", "--dry-run"])
        .env("BULKHEAD_CGROUP_ROOT", "/")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_has(&err(&o), "--persist needs the systemd backend");
    let o = std::process::Command::new(&bin)
        .args(["run", "--scope", "--slice", "db-helper", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert_has(&err(&o), "--scope needs the systemd backend");
    let o = std::process::Command::new(&bin)
        .args(["--backend", "systemd", "--cgroup-root", "/x", "status"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_has(&err(&o), "cannot be used with the systemd backend");
}

const GUARD_PLAN: &str = r#"
[slice.db-server]
CPUWeight = 100

[slice.db-helper]
CPUWeight = 100

# No calibration: the test suite runs beside this test and loads the machine, so any
# baseline taken here could already be saturated; a zero baseline makes every stall harm.
[guard]
protect = "db-server"
sideloads = ["db-helper"]
calibration = "0s"
max_frozen = "0s"
"#;

/// Under systemd the guard acts through systemd: runtime unit properties that `systemctl
/// show` reports, which a daemon-reload keeps; a SIGKILLed guard's watchdog sets the plan
/// back through systemd too.
#[test]
fn guard_acts_through_runtime_properties() {
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };
    c.write("/tmp/g.toml", GUARD_PLAN);
    let b = |args: &[&str]| {
        let mut a = vec!["-c", "/tmp/g.toml"];
        a.extend_from_slice(args);
        c.bulkhead(&a)
    };
    let o = b(&["-q", "apply"]);
    assert!(o.status.success(), "{}", err(&o));
    let o = b(&["guard", "--dry-run"]);
    assert!(o.status.success(), "{}", err(&o));
    assert_has(&out(&o), "SetUnitProperties");

    // Two busy loops in each slice, as services systemd starts; then the guard.
    let spin = "while :; do :; done & while :; do :; done";
    for slice in ["db-server", "db-helper"] {
        c.sh(&format!(
            "systemd-run --unit=spin-{slice} --slice={slice}.slice sh -c '{spin}'"
        ));
    }
    // As dist/systemd/bulkhead-guard.service runs it: when the unit stops, systemd kills
    // what is left in it (the watchdog too), so ExecStopPost= releases.
    let o = c.sh("B=$(command -v bulkhead); systemd-run --unit=guard \
         -p \"ExecStopPost=$B -c /tmp/g.toml guard --release -q\" \
         $B -c /tmp/g.toml guard --duration 60s");
    assert!(o.status.success(), "{}", err(&o));
    let cut = |c: &Container| {
        c.show("db-helper.slice", "CPUQuotaPerSecUSec") != "infinity"
            || c.show("db-helper.slice", "CPUWeight") == "idle"
    };
    // Calibration holds the helper at its floor; then the controller's own cut.
    let status = c.path("/run/bulkhead/guard/status.json");
    let acted = |c: &Container| {
        let v: serde_json::Value = std::fs::read(&status)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        v["phase"] == "guarding"
            && v["actions_last_minute"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
            && cut(c)
    };
    let t0 = std::time::Instant::now();
    while !acted(&c) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the guard did not act through systemd: {}",
            out(&c.sh("journalctl -u guard --no-pager | tail -20"))
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    eprintln!(
        "guard cut after {:?}: quota {} weight {}",
        t0.elapsed(),
        c.show("db-helper.slice", "CPUQuotaPerSecUSec"),
        c.show("db-helper.slice", "CPUWeight")
    );
    // Runtime properties survive a daemon-reload (the guard does not have to fight it).
    c.sh("systemctl daemon-reload");
    assert!(cut(&c), "a daemon-reload undid the guard's cut");

    // SIGKILL the guard: its watchdog gives the helper its plan back through systemd.
    c.sh("systemctl kill -s KILL --kill-whom=main guard.service");
    let t0 = std::time::Instant::now();
    while cut(&c) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the plan is not back: quota {} weight {}",
            c.show("db-helper.slice", "CPUQuotaPerSecUSec"),
            c.show("db-helper.slice", "CPUWeight")
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(c.show("db-helper.slice", "CPUWeight"), "100");
    c.sh("systemctl stop spin-db-server spin-db-helper");
}

/// `serve` hands a plain pass-mode target its sockets through `run --listen-fds`. A service
/// cannot be given descriptors (issue 14 item 14): `run` refuses and says what to do, and
/// `--scope` (what `serve` uses with this backend) passes them.
#[test]
fn run_with_listen_fds_through_systemd() {
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };
    let o = c.bulkhead(&["-q", "apply"]);
    assert!(o.status.success(), "{}", err(&o));
    let o = c.sh("exec 3</dev/null; bulkhead run --listen-fds 1 --slice db-helper -- true");
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert_has(&err(&o), "add --scope");
    let o = c.sh(
        "exec 3</dev/null; bulkhead run --scope --listen-fds 1 --slice db-helper -- \
         sh -c 'echo $LISTEN_FDS $LISTEN_PID $$; test -e /proc/self/fd/3 && echo fd3'",
    );
    let text = out(&o);
    let f: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(f.len(), 4, "{text}\n{}", err(&o));
    assert_eq!((f[0], f[3]), ("1", "fd3"), "{text}");
    assert_eq!(f[1], f[2], "LISTEN_PID is not the command's PID: {text}");
}

/// systemd's own unit names: a '-' inside one level is written \x2d (systemd-escape). The
/// container's /lib/systemd/system/*.slice import, and a plan slice with an escaped level is
/// applied, joined and shown under the very unit name systemd uses.
#[test]
fn escaped_unit_names_agree_with_systemd() {
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };
    let o = c.sh("bulkhead import /lib/systemd/system/*.slice");
    assert!(o.status.success(), "{}", err(&o));
    assert_has(&out(&o), "[slice.'system-systemd\\x2dcryptsetup']");
    // systemd-escape agrees on how the level is written.
    let o = c.cmd(&["systemd-escape", "pg-backup"]).output().unwrap();
    assert_eq!(out(&o).trim(), "pg\\x2dbackup");
    c.write(
        "/root/escaped.toml",
        "[slice.db]\n[slice.'db-pg\\x2dbackup']\nCPUWeight = 50\n",
    );
    let o = c.bulkhead(&["-c", "/root/escaped.toml", "apply"]);
    assert!(o.status.success(), "{}", err(&o));
    let unit = "db-pg\\x2dbackup.slice";
    assert_eq!(c.show(unit, "CPUWeight"), "50");
    assert_eq!(
        c.show(unit, "ControlGroup"),
        "/db.slice/db-pg\\x2dbackup.slice"
    );
    let o = c.bulkhead(&[
        "-c",
        "/root/escaped.toml",
        "run",
        "--slice",
        "db-pg\\x2dbackup",
        "--",
        "cat",
        "/proc/self/cgroup",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    assert_has(&out(&o), "/db.slice/db-pg\\x2dbackup.slice/");
    let o = c.bulkhead(&["-c", "/root/escaped.toml", "destroy"]);
    assert!(o.status.success(), "{}", err(&o));
}

/// `spawn --slice` through systemd, as systemd-nspawn places its containers: bulkhead joins a
/// delegated transient scope in the slice, `bulkhead-spawn-PID.scope`, the sandbox starts
/// there, and the scope is gone once the sandbox has exited.
#[test]
fn spawn_in_a_slice_through_a_delegated_scope() {
    let _suite = crate::suite::shared();
    if let Err(e) = common::rootfs::static_busybox() {
        bulkhead_testkit::prereq::missing(&e);
        return;
    }
    let Some(c) = Container::boot() else { return };
    let o = c.bulkhead(&["-q", "apply"]);
    assert!(o.status.success(), "{}", err(&o));
    common::rootfs::busybox_root(&c.path("/srv/sandbox"));
    // The sandbox's processes are looked at from the container (inside the sandbox its own
    // cgroup namespace makes the scope "/"). The sandbox's command runs until the script has
    // looked: it waits for its stdin (a FIFO the script holds open) to close.
    let o = c.sh("mkfifo /tmp/hold
         bulkhead spawn -v --slice db-helper -D /srv/sandbox -- \
           sh -c 'cat /proc/self/cgroup; read _; exit 6' </tmp/hold >/tmp/inside & pid=$!
         exec 3>/tmp/hold
         for i in $(seq 300); do
           init=$(cat /proc/$pid/task/$pid/children 2>/dev/null | tr -d ' ')
           [ -n \"$init\" ] && cmd=$(cat /proc/$init/task/$init/children 2>/dev/null | tr -d ' ')
           [ -n \"$cmd\" ] && break
           sleep 0.1
         done
         echo \"pid $pid\"
         echo \"bulkhead $(grep '^0::' /proc/$pid/cgroup)\"
         echo \"sandbox $(grep '^0::' /proc/$cmd/cgroup)\"
         systemctl show -p Slice -p Delegate -p Description bulkhead-spawn-$pid.scope
         echo \"listed $(systemctl list-units --plain --no-legend 'bulkhead-spawn-*' | awk '{print $1, $3}')\"
         exec 3>&-
         wait $pid; echo \"exit $?\"
         echo \"inside $(grep '^0::' /tmp/inside)\"
         for i in $(seq 300); do
           left=$(systemctl list-units --all --plain --no-legend 'bulkhead-spawn-*')
           [ -z \"$left\" ] && break
           sleep 0.1
         done
         echo \"left [$left]\"");
    let text = out(&o);
    let pid = text
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .unwrap_or_else(|| panic!("{text}\n{}", err(&o)));
    let scope = format!("0::/db.slice/db-helper.slice/bulkhead-spawn-{pid}.scope");
    for (what, line) in [
        ("bulkhead", format!("bulkhead {scope}")),
        ("the sandbox's command", format!("sandbox {scope}")),
        (
            "the listed unit",
            format!("listed bulkhead-spawn-{pid}.scope active"),
        ),
        ("exit code", "exit 6".into()),
        ("the scope's slice", "Slice=db-helper.slice".into()),
        ("delegation", "Delegate=yes".into()),
        (
            "the description",
            "Description=bulkhead spawn: sandbox /srv/sandbox (sh)".into(),
        ),
        ("its own cgroup namespace", "inside 0::/".into()),
        ("nothing left behind", "left []".into()),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{what}: no line {line:?} in\n{text}\n{}",
            err(&o)
        );
    }
    assert_has(&err(&o), "slice db-helper: systemd backend");
}

/// `check` and `status`'s planned limits with the systemd backend, after an apply: the slices
/// are systemd's units as planned (no missing slice, no drift, nothing critical); status
/// lists the planned directives with what the kernel holds, and every one it finds no file
/// for (this container's v1 hierarchies are read-only: systemd makes the slices on cgroup2
/// only) check reports as not in force, so the verdict is degraded, never protected.
fn check_under_systemd(c: &Container) {
    let o = c.bulkhead(&["status", "--json", "--interval", "0.1"]);
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let limits = st["limits"].as_array().unwrap_or_else(|| panic!("{st:#}"));
    let server = limits
        .iter()
        .find(|s| s["slice"] == "db-server")
        .unwrap_or_else(|| panic!("{st:#}"));
    assert!(
        server["directives"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["directive"] == "CPUWeight=1000"),
        "{server:#}"
    );
    let o = c.bulkhead(&["check", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        o.status.code(),
        v["exit_code"].as_i64().map(|c| c as i32),
        "{v:#}"
    );
    assert_eq!(v["backend"], "systemd", "{v:#}");
    let findings = v["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .all(|f| f["level"] != "critical" && f["area"] != "slices"),
        "{v:#}"
    );
    assert!(
        findings
            .iter()
            .any(|f| f["area"] == "drift" && f["level"] == "ok"),
        "{v:#}"
    );
    let mut missing = 0;
    for l in limits {
        for d in l["directives"].as_array().unwrap() {
            if d["kernel"].is_null() {
                missing += 1;
                let want = format!(
                    "[slice.{}]: {} is not in force",
                    l["slice"].as_str().unwrap(),
                    d["directive"].as_str().unwrap()
                );
                assert!(
                    findings
                        .iter()
                        .any(|f| f["message"].as_str().unwrap().starts_with(&want)),
                    "no {want:?} in {v:#}"
                );
            }
        }
    }
    if missing > 0 {
        assert_eq!(v["state"], "degraded", "{v:#}");
    }
}
