//! How `run` places its command, seen by strace: on pure cgroup v2 (cgroupfs backend) by
//! clone3 with CLONE_INTO_CGROUP, so the command is in the slice from its first instruction and
//! bulkhead itself never joins; elsewhere bulkhead joins (writes cgroup.procs) and execs.
//! Under systemd `run --scope` is systemd's to place, and not checked here.

use super::host::Host;
use crate::common::stderr;
use std::process::Command;

#[test]
fn run_places_the_command_by_clone_into_cgroup_on_v2() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    if h.systemd {
        h.report(
            "run placement",
            "not checked: systemd places `run --scope` itself",
        );
        return;
    }
    if Command::new("strace").arg("-V").output().is_err() {
        assert!(
            !bulkhead_testkit::ci(),
            "strace is missing (apt install strace)"
        );
        h.report("run placement", "not checked: no strace");
        return;
    }
    h.apply(&[("placed", "TasksMax = 20")]);
    let trace = h.tmp().join("strace.out");
    let mut c = Command::new("strace");
    c.args(["-f", "-qq", "-e", "trace=clone3,openat,write", "-o"])
        .arg(&trace);
    let run = h.run_in(
        "placed",
        &[
            "sh",
            "-c",
            "grep ^0:: /proc/self/cgroup || echo none; grep ^0:: /proc/$PPID/cgroup || echo none",
        ],
    );
    c.arg(run.get_program()).args(run.get_args());
    for (k, v) in run.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let o = c.output().unwrap();
    let text = std::fs::read_to_string(&trace).unwrap_or_default();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let into = text
        .lines()
        .any(|l| l.contains("clone3(") && l.contains("CLONE_INTO_CGROUP"));
    let joined = text
        .lines()
        .any(|l| l.contains("cgroup.procs") && l.contains("O_WRONLY"));
    let pure_v2 = h.layout.v1.is_empty();
    let mut lines = out.lines();
    let (cmd_cg, parent_cg) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    h.report(
        "run placement",
        &format!(
            "{} (command in {cmd_cg}, its parent in {parent_cg})",
            match (into, joined) {
                (true, false) => "clone3(CLONE_INTO_CGROUP), no cgroup.procs write",
                (false, true) => "joined (cgroup.procs) then exec",
                _ => "unclear",
            }
        ),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let slice_dir = format!("/{}.slice/{}.slice", h.parent, h.slice("placed"));
    if pure_v2 {
        assert!(
            into && !joined,
            "pure v2: want clone3 CLONE_INTO_CGROUP and no join:\n{text}"
        );
        assert!(cmd_cg.ends_with(&slice_dir), "the command is in {cmd_cg}");
        assert!(
            !parent_cg.contains(&slice_dir),
            "bulkhead joined the slice: {parent_cg}"
        );
    } else {
        assert!(
            joined && !into,
            "v1/hybrid: want the join and exec:\n{text}"
        );
    }
}
