//! The systemd backend against a real systemd whose controllers are enforced (the vmhost
//! guests with systemd; on other hosts these checks say so and return): `--backend auto`
//! picks systemd, transient and `--persist` slices as systemd sees them, `run` as a service
//! and as a scope, `move`, and `export systemd` files loaded by systemd itself.

use super::host::Host;
use crate::common::{stderr, stdout};
use std::process::Command;

fn systemctl(args: &[&str]) -> String {
    let o = Command::new("systemctl")
        .args(args)
        .output()
        .expect("systemctl");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `systemctl show -p PROP --value UNIT`.
fn show(unit: &str, prop: &str) -> String {
    systemctl(&["show", "-p", prop, "--value", unit])
}

/// A Host with systemd as PID 1, or None after saying so.
fn systemd_host(check: &str) -> Option<Host> {
    let h = Host::new()?;
    if !h.systemd {
        h.report(check, "not checked: PID 1 is not systemd");
        return None;
    }
    Some(h)
}

#[test]
fn auto_picks_systemd_and_slices_are_systemds() {
    let _s = super::serial();
    let Some(h) = systemd_host("systemd backend") else {
        return;
    };
    h.write_plan(&[("db", "CPUWeight = 300\nMemoryMax = \"256M\"\nTasksMax = 64")]);
    let dry = h.cmd().args(["apply", "--dry-run"]).output().unwrap();
    h.apply(&[("db", "CPUWeight = 300\nMemoryMax = \"256M\"\nTasksMax = 64")]);
    let unit = format!("{}.slice", h.slice("db"));
    let (w, m, t) = (
        show(&unit, "CPUWeight"),
        show(&unit, "MemoryMax"),
        show(&unit, "TasksMax"),
    );
    let state = show(&unit, "ActiveState");
    let transient = show(&unit, "Transient");
    h.report(
        "systemd backend",
        &format!("auto -> {}; {unit}: {state}, Transient={transient}, CPUWeight={w} MemoryMax={m} TasksMax={t}", 
            stdout(&dry).lines().chain(stderr(&dry).lines()).find(|l| l.contains("backend")).unwrap_or("?").trim()),
    );
    assert!(
        stdout(&dry).contains("systemd backend") || stderr(&dry).contains("systemd backend"),
        "apply --dry-run did not name the systemd backend:\n{}{}",
        stdout(&dry),
        stderr(&dry)
    );
    assert_eq!(state, "active");
    assert_eq!(transient, "yes");
    assert_eq!(
        (w.as_str(), m.as_str(), t.as_str()),
        ("300", "268435456", "64")
    );
}

#[test]
fn persist_writes_units_that_systemd_loads() {
    let _s = super::serial();
    let Some(h) = systemd_host("apply --persist") else {
        return;
    };
    h.write_plan(&[("kept", "CPUWeight = 250")]);
    let unit = format!("{}.slice", h.slice("kept"));
    let o = h.bulkhead(&["apply", "--persist"]);
    assert!(o.status.success(), "{}", stderr(&o));
    systemctl(&["daemon-reload"]);
    let path = show(&unit, "FragmentPath");
    let weight = show(&unit, "CPUWeight");
    h.report(
        "apply --persist",
        &format!("{unit} -> {path}, CPUWeight={weight} after daemon-reload"),
    );
    assert!(
        path.starts_with("/etc/systemd/system/"),
        "FragmentPath {path}"
    );
    assert_eq!(weight, "250");
    let o = h.bulkhead(&["destroy"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!std::path::Path::new(&path).exists(), "destroy left {path}");
}

#[test]
fn run_as_service_and_scope_and_move() {
    let _s = super::serial();
    let Some(h) = systemd_host("run/move") else {
        return;
    };
    h.apply(&[("work", "CPUWeight = 50")]);
    let slice = h.slice("work");
    let service = h
        .cmd()
        .args(["run", "--slice", &slice, "--", "cat", "/proc/self/cgroup"])
        .output()
        .unwrap();
    let scope = h
        .cmd()
        .args([
            "run",
            "--scope",
            "--slice",
            &slice,
            "--",
            "cat",
            "/proc/self/cgroup",
        ])
        .output()
        .unwrap();
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let moved = h.bulkhead(&["move", "--slice", &slice, &sleeper.id().to_string()]);
    let cg = std::fs::read_to_string(format!("/proc/{}/cgroup", sleeper.id())).unwrap_or_default();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let last = |s: String| s.lines().last().unwrap_or("").to_string();
    let (sv, sc, mv) = (last(stdout(&service)), last(stdout(&scope)), last(cg));
    h.report(
        "run/move",
        &format!("service: {sv}; --scope: {sc}; move: {mv}"),
    );
    let inside = format!("/{slice}.slice/");
    assert!(service.status.success(), "{}", stderr(&service));
    assert!(
        sv.contains(&inside) && sv.ends_with(".service"),
        "run: {sv}"
    );
    assert!(scope.status.success(), "{}", stderr(&scope));
    assert!(
        sc.contains(&inside) && sc.ends_with(".scope"),
        "run --scope: {sc}"
    );
    assert!(moved.status.success(), "{}", stderr(&moved));
    assert!(mv.contains(&inside) && mv.ends_with(".scope"), "move: {mv}");
}

#[test]
fn exported_units_are_loaded_and_enforced_by_systemd() {
    let _s = super::serial();
    let Some(h) = systemd_host("export systemd") else {
        return;
    };
    // Written, not applied: systemd alone makes the slice from the exported files.
    let plan = h.tmp().join("export.toml");
    let name = format!("{}e", h.parent);
    bulkhead_testkit::write(
        &plan,
        format!("[slice.{name}]\nCPUWeight = 222\nTasksMax = 33\n"),
    );
    let dir = "/run/systemd/system";
    bulkhead_testkit::ok(Command::new(crate::common::bin()).args([
        "-c",
        plan.to_str().unwrap(),
        "export",
        "systemd",
        dir,
    ]));
    let unit = format!("{name}.slice");
    let file = std::path::Path::new(dir).join(&unit);
    systemctl(&["daemon-reload"]);
    systemctl(&["start", &unit]);
    let (w, t, cg) = (
        show(&unit, "CPUWeight"),
        show(&unit, "TasksMax"),
        show(&unit, "ControlGroup"),
    );
    let pids_max = h
        .layout
        .hierarchy("pids")
        .map(|p| p.mount.join(cg.trim_start_matches('/')).join("pids.max"))
        .and_then(|f| std::fs::read_to_string(f).ok())
        .unwrap_or_default();
    systemctl(&["stop", &unit]);
    let _ = std::fs::remove_file(&file);
    systemctl(&["daemon-reload"]);
    h.report(
        "export systemd",
        &format!(
            "{unit} loaded by systemd: CPUWeight={w} TasksMax={t}, {cg}/pids.max={}",
            pids_max.trim()
        ),
    );
    assert_eq!((w.as_str(), t.as_str()), ("222", "33"));
    assert_eq!(pids_max.trim(), "33");
}
