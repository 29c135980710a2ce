//! The slices commands against this machine's real cgroupfs, each test under its own
//! cgroup root (see common/mod.rs), removed even when the test fails.

use crate::common::{read, stderr, stdout, TestRoot};
use bulkhead::plan::EMBEDDED_DEFAULT;
use bulkhead_testkit::assert_has;
use std::process::{Command, Stdio};
use std::time::Duration;

fn v1(t: &TestRoot, ctrl: &str) -> bool {
    t.layout.v1.iter().any(|h| h.has(ctrl))
}

#[test]
fn apply_reapply_dry_run_destroy() {
    let Some((_suite, t, p)) = crate::suite::planned(EMBEDDED_DEFAULT) else {
        return;
    };

    // Dry run: prints writes, creates nothing.
    let o = t.ok(&["-c", p, "apply", "--dry-run"]);
    let out = stdout(&o);
    assert!(out.contains("mkdir "), "{out}");
    assert!(out.contains("dry run:"), "{out}");
    assert!(t.cgroups().is_empty(), "dry run created {:?}", t.cgroups());

    let o = t.ok(&["-c", p, "apply"]);
    assert_has(&stdout(&o), "applied: 4 slice(s)");
    if v1(&t, "cpu") {
        // The default helper is idle (CPUWeight="idle"): cpu.idle, and the kernel's idle
        // weight in cpu.shares.
        assert_eq!(
            read(&t.dir("cpu", "db.slice/db-helper.slice/cpu.idle")),
            "1"
        );
        assert_eq!(
            read(&t.dir("cpu", "db.slice/db-server.slice/cpu.shares")),
            "10240"
        );
    }
    if v1(&t, "memory") {
        assert_eq!(
            read(&t.dir("memory", "db.slice/db-helper.slice/memory.limit_in_bytes")),
            (1400u64 << 20).to_string()
        );
    }

    // The first apply said its notes (this host cannot enforce some of the default plan's
    // directives everywhere), each on its line.
    let first_notes = t.run(&["-c", p, "apply", "--dry-run"]);
    let notes = stderr(&first_notes).lines().count();
    // Idempotent: a second apply writes nothing and says so, and its notes in one line.
    let o = t.ok(&["-c", p, "apply"]);
    assert_has(
        &stdout(&o),
        "nothing to change: 4 slice(s) already match the plan",
    );
    if notes > 1 {
        assert_eq!(stderr(&o).lines().count(), 2, "{}", stderr(&o));
        assert_has(
            &stderr(&o),
            "as before (bulkhead apply -v or --dry-run shows them)",
        );
    }

    // A changed value is the only write.
    let plan2 = t.plan(&EMBEDDED_DEFAULT.replace("CPUWeight = 1000\n", "CPUWeight = 500\n"));
    let o = t.ok(&["-c", plan2.to_str().unwrap(), "apply", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let ops = v["changes"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0]["why"], "CPUWeight=500");

    // destroy: a summary; each removal only with -v (issue 41 #6).
    let o = t.ok(&["-c", p, "destroy"]);
    assert!(t.cgroups().is_empty(), "left behind: {:?}", t.cgroups());
    assert_has(&stdout(&o), "removed: 4 slice(s)");
    assert!(!stdout(&o).contains(&t.cgroup), "{}", stdout(&o));
    t.ok(&["-c", p, "apply", "-q"]);
    let o = t.ok(&["-c", p, "destroy", "-v"]);
    assert_has(&stdout(&o), &t.cgroup);
    assert!(t.cgroups().is_empty(), "left behind: {:?}", t.cgroups());
}

#[test]
fn run_lands_in_every_hierarchy_and_passes_exit_codes() {
    let Some((_suite, t, p)) = crate::suite::planned(EMBEDDED_DEFAULT) else {
        return;
    };
    t.ok(&["-c", p, "apply", "-q"]);

    let o = t.ok(&[
        "-c",
        p,
        "run",
        "--slice",
        "db-helper",
        "--",
        "sh",
        "-c",
        "cat /proc/self/cgroup",
    ]);
    let cg = stdout(&o);
    let want = format!("{}/db.slice/db-helper.slice", t.cgroup);
    for ctrl in ["cpu", "cpuacct", "memory", "blkio", "pids"] {
        if v1(&t, ctrl) {
            assert!(
                cg.lines().any(
                    |l| l.split(':').nth(1).unwrap().split(',').any(|c| c == ctrl)
                        && l.ends_with(&want)
                ),
                "{ctrl} missing in\n{cg}"
            );
        }
    }
    if t.layout.unified.is_some() {
        assert!(
            cg.lines()
                .any(|l| l.starts_with("0::") && l.ends_with(&want)),
            "{cg}"
        );
    }

    // Exit codes and signals pass through.
    let o = t.run(&["run", "--slice", "db-helper", "--", "sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7));
    let o = t.run(&[
        "run",
        "--slice",
        "db-helper",
        "--",
        "sh",
        "-c",
        "kill -TERM $$",
    ]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGTERM),
        "the command's signal is bulkhead's"
    );
    let o = t.run(&["run", "--slice", "db-helper", "--", "/no/such/program"]);
    assert_eq!(o.status.code(), Some(127));
    assert_has(&stderr(&o), "command not found");

    // A signal sent to `bulkhead run` reaches the command (it is the same process).
    let mut cmd = t.cmd();
    cmd.args(["run", "--slice", "db-helper", "--", "sleep", "30"]);
    // A test run started in the background (`cmd &` without job control) ignores SIGINT,
    // and `run` keeps what it inherits, as exec does (nohup relies on it).
    bulkhead_sys::process::default_signal_before_exec(&mut cmd, libc::SIGINT);
    let mut child = cmd.spawn().unwrap();
    // Once it is `sleep` (the helper is idle-scheduled: on a busy machine the exec may
    // take longer than any fixed pause).
    let comm = format!("/proc/{}/comm", child.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
        assert!(
            std::time::Instant::now() < deadline,
            "run never became sleep"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = bulkhead::sys::process::kill(child.id() as i32, libc::SIGINT);
    let st = child.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGINT));

    // uid, gid, cwd, env and env files.
    let envf = t.plan_dir.join("env");
    bulkhead_testkit::write(
        &envf,
        "# comment\nFROM_FILE=\"yes\"\nexport OVERRIDDEN=file\n",
    );
    let o = t.ok(&[
        "run",
        "--slice",
        "db-helper",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--cwd",
        "/tmp",
        "--setenv-file",
        envf.to_str().unwrap(),
        "--env",
        "OVERRIDDEN=flag",
        "--",
        "sh",
        "-c",
        "echo $(id -u):$(id -g):$(pwd):$FROM_FILE:$OVERRIDDEN",
    ]);
    assert_eq!(stdout(&o).trim(), "65534:65534:/tmp:yes:flag");

    t.destroy(p);
}

#[test]
fn move_whole_processes_and_report_failures() {
    let Some((_suite, t, p)) = crate::suite::planned(EMBEDDED_DEFAULT) else {
        return;
    };
    t.ok(&["-c", p, "apply", "-q"]);
    // A process with several threads: all of them must move.
    let mut child = Command::new("sh")
        .args(["-c", "sleep 30 & sleep 30 & wait"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let o = t.run(&[
        "-c",
        p,
        "move",
        "--slice",
        "db-server",
        &pid,
        "999999999",
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a failed PID makes the exit code 1"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["results"][0]["moved"], true);
    assert_eq!(v["results"][1]["moved"], false);
    assert!(v["results"][1]["error"]
        .as_str()
        .unwrap()
        .contains("no such process"));
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let want = format!("{}/db.slice/db-server.slice", t.cgroup);
    assert!(
        cg.lines().filter(|l| l.ends_with(&want)).count() >= 2,
        "{cg}"
    );
    // Every thread of the moved process is in the slice.
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let c = std::fs::read_to_string(task.path().join("cgroup")).unwrap();
        assert!(
            c.contains(&want),
            "thread {:?} not moved: {c}",
            task.file_name()
        );
    }
    // Kernel threads are refused with the reason.
    let o = t.run(&["-c", p, "move", "--slice", "db-server", "2"]);
    assert_has(&stderr(&o), "kernel thread");

    // A second process in the helper slice, to move out again.
    let mut out = Command::new("sleep").arg("30").spawn().unwrap();
    let out_pid = out.id().to_string();
    t.ok(&["-c", p, "move", "--slice", "db-helper", &out_pid]);

    // destroy refuses while processes are inside, with a hint that works (issue 28).
    let o = t.run(&["-c", p, "destroy"]);
    assert_eq!(o.status.code(), Some(2));
    assert_has(&stderr(&o), "still have processes");
    assert_has(
        &stderr(&o),
        "move them out (bulkhead move --slice / PID...)",
    );
    assert!(
        !t.cgroups().is_empty(),
        "refused destroy must remove nothing"
    );
    // `move --slice /` puts a process back at the cgroup root, in every hierarchy.
    let o = t.ok(&["-c", p, "move", "--slice", "/", &out_pid]);
    assert_has(&stdout(&o), "to the cgroup root");
    let cg = std::fs::read_to_string(format!("/proc/{out_pid}/cgroup")).unwrap();
    assert!(!cg.contains("db.slice"), "{cg}");
    assert!(
        cg.lines().filter(|l| l.ends_with(&t.cgroup)).count() >= 2,
        "{cg}"
    );
    // ... and --kill kills the ones still inside, not the one moved out.
    t.ok(&["-c", p, "destroy", "--kill"]);
    let _ = child.wait();
    assert_eq!(out.try_wait().unwrap(), None, "the moved-out process lives");
    let _ = out.kill();
    let _ = out.wait();
    assert!(t.cgroups().is_empty(), "left behind: {:?}", t.cgroups());
}

#[test]
fn a_failed_write_midway_is_rolled_back() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    if !bulkhead::cgroup::Layout::detect()
        .unwrap()
        .v1
        .iter()
        .any(|h| h.has("memory"))
    {
        eprintln!("this rollback test uses the v1 memory controller's EBUSY");
        return;
    }
    let t = TestRoot::new();
    // The default plan with a helper weight (not idle), so the rollback of a weight shows.
    let weighted = crate::common::default_weighted(10);
    let plan = t.plan(&weighted);
    let p = plan.to_str().unwrap();
    t.ok(&["-c", p, "apply", "-q"]);
    // ~64 MiB of anonymous memory in the helper slice (there is no swap to push it to).
    let mut hog = t
        .sh_in(
            "db-helper",
            "x=$(head -c 67108864 /dev/zero | tr '\\0' a); echo ready; sleep 60",
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(bulkhead_testkit::first_line(&mut hog).trim(), "ready");
    let shares = t.dir("cpu", "db.slice/db-helper.slice/cpu.shares");
    assert_eq!(read(&shares), "102");
    // CPUWeight changes first (cpu hierarchy), then MemoryMax below usage fails (EBUSY).
    let bad = weighted
        .replace("CPUWeight = 10\n", "CPUWeight = 500\n")
        .replace(
            "MemoryMax = { value = \"5%\", min = \"1400M\" }",
            "MemoryMax = \"8M\"",
        );
    let o = t.run(&["-c", t.plan(&bad).to_str().unwrap(), "apply"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("memory.limit_in_bytes"), "{err}");
    assert!(err.contains("were undone"), "{err}");
    assert_eq!(
        read(&shares),
        "102",
        "the earlier cpu.shares write was put back"
    );
    let _ = hog.kill();
    let _ = hog.wait();
    t.destroy(p);
}

#[test]
fn foreign_cgroups_are_never_adopted_or_deleted() {
    let Some((_suite, t, p)) = crate::suite::planned(EMBEDDED_DEFAULT) else {
        return;
    };
    // Someone else's db.slice in the memory hierarchy.
    let foreign = t.dir("memory", "db.slice");
    std::fs::create_dir(&foreign).unwrap();
    let o = t.run(&["-c", p, "apply"]);
    assert_eq!(o.status.code(), Some(2));
    assert_has(&stderr(&o), "refusing to adopt");
    assert_eq!(
        t.cgroups(),
        vec![foreign.clone()],
        "nothing else may be created"
    );
    let o = t.run(&["-c", p, "destroy", "--slice", "db"]);
    assert!(o.status.success() || o.status.code() == Some(2));
    assert!(
        foreign.exists(),
        "destroy must not remove a cgroup it did not create"
    );
}

#[test]
fn status_reports_usage_and_pressure() {
    let Some((_suite, t, p)) = crate::suite::planned(&crate::common::default_weighted(100)) else {
        return;
    };
    t.ok(&["-c", p, "apply", "-q"]);
    let mut busy = t.sh_in("db-helper", "while :; do :; done").spawn().unwrap();
    // `run` joins the slice, then execs the shell: once it is `sh`, it is in the slice.
    let comm = format!("/proc/{}/comm", busy.id());
    crate::common::wait_for("the busy loop in the slice", || {
        std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sh")
    });
    let o = t.ok(&["status", "--json", "--interval", "0.5"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let slices = v["slices"].as_array().unwrap();
    let helper = slices
        .iter()
        .find(|s| s["name"] == "db-helper")
        .expect("db-helper in status");
    assert_eq!(helper["processes"], 1);
    let cpu = helper["cpu_percent"].as_f64().unwrap();
    assert!(cpu > 20.0, "a busy loop shows CPU use, got {cpu}%");
    assert!(helper["memory_current"].as_u64().is_some());
    assert_eq!(helper["memory_max"].as_u64(), Some(1400 << 20));
    if t.layout.unified.is_some() {
        assert!(
            helper["psi"]["cpu"]["some"]["avg10"].is_number(),
            "{helper}"
        );
    }
    let parent = slices.iter().find(|s| s["name"] == "db").unwrap();
    assert_eq!(
        parent["processes"], 1,
        "parents count their children's processes"
    );
    // The table for people.
    let o = t.run(&["status", "--interval", "0.2"]);
    let table = stdout(&o);
    assert!(
        table.contains("db-helper.slice") && table.contains("PSI"),
        "{table}"
    );
    let _ = busy.kill();
    let _ = busy.wait();
    t.destroy(p);
}

#[test]
fn hugetlb_limit_on_this_hosts_unified_mount() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    let Some(u) = t.layout.unified.clone() else {
        eprintln!("no unified mount");
        return;
    };
    if t.layout
        .hierarchy("hugetlb")
        .is_none_or(|h| h.mount != u.mount)
    {
        eprintln!("hugetlb is not on the unified mount here");
        return;
    }
    let plan = t.plan("[slice.db-server]\nHugetlbMax = { \"2M\" = \"64M\" }\n");
    let p = plan.to_str().unwrap();
    let o = t.ok(&["-c", p, "apply"]);
    assert!(
        stderr(&o).contains("'db' is not in the plan"),
        "implicit parent is said: {}",
        stderr(&o)
    );
    let f = t.dir("unified", "db.slice/db-server.slice/hugetlb.2MB.max");
    assert_eq!(read(&f), (64u64 << 20).to_string());
    let o = t.run(&["-c", p, "apply"]);
    assert_has(&stdout(&o), "nothing to change");
    t.ok(&["-c", p, "destroy"]);
    assert!(t.cgroups().is_empty());
}

/// Every bad input: a clear message, exit code 2, and nothing created.
#[test]
fn bad_input_changes_nothing() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    let cases: &[(&str, &str)] = &[
        (
            "[slice.db]\nMemoryMaxx = \"1G\"\n",
            "did you mean MemoryMax?",
        ),
        ("[slice.db]\nCPUWeight = 0\n", "CPUWeight takes 1..10000"),
        (
            "[slice.db]\nMemoryHigh = \"110%\"\n",
            "more than 100% of RAM",
        ),
        ("[slice.\"db/x\"]\nCPUWeight = 5\n", "contains '/'"),
        ("[slice.\"a..b\"]\nCPUWeight = 5\n", "'..'"),
        ("[slice.\"db--x\"]\nCPUWeight = 5\n", "empty part"),
        ("[slice.db]\nCPUWeight = = 5\n", ":2:"),
        (
            "[slice.db]\nIOReadBandwidthMax = \"/no/such/dev 10M\"\n",
            "cannot open '/no/such/dev': No such file or directory",
        ),
        ("[slice.db]\nAllowedCPUs = \"0-4095\"\n", "online CPUs"),
    ];
    for (text, want) in cases {
        let plan = t.plan(text);
        let o = t.run(&["-c", plan.to_str().unwrap(), "apply"]);
        assert_eq!(o.status.code(), Some(2), "{text}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(want), "{text}: expected '{want}' in\n{err}");
        assert!(
            err.contains(plan.to_str().unwrap()),
            "the message names the file: {err}"
        );
        assert!(t.cgroups().is_empty(), "{text}: created {:?}", t.cgroups());
    }
    let o = t.run(&["-c", "/no/such/plan.toml", "apply"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/no/such/plan.toml") && stderr(&o).contains("No such file"));
    let o = t.run(&["run", "--slice", "nope", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert_has(&stderr(&o), "unknown slice 'nope'");
    let o = t.run(&["move", "--slice", "nope", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown slice 'nope'"));
    let plan = t.plan(EMBEDDED_DEFAULT);
    let o = t.run(&[
        "-c",
        plan.to_str().unwrap(),
        "run",
        "--slice",
        "db-helper",
        "--",
        "true",
    ]);
    assert_has(&stderr(&o), "in the plan but does not exist yet");
    assert!(t.cgroups().is_empty());
}

#[test]
fn import_scylla_slices_and_apply_them() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    let d = &t.plan_dir;
    bulkhead_testkit::write(d.join("scylla-server.slice"), "[Unit]\nDescription=Slice used to run Scylla. Maximum priority for IO and CPU\nBefore=slices.target\n\n[Slice]\nMemoryAccounting=true\nIOAccounting=true\nCPUAccounting=true\nMemorySwapMax=1\nCPUShares=1000\nCPUWeight=1000\n");
    bulkhead_testkit::write(d.join("scylla-helper.slice"), "[Unit]\nDescription=Slice used to run companion programs to Scylla. Memory, CPU and IO restricted\nBefore=slices.target\n\n[Slice]\nMemoryAccounting=true\nIOAccounting=true\nCPUAccounting=true\n\nCPUWeight=10\nIOWeight=10\n\nMemoryHigh=4%\nMemoryLimit=5%\nCPUShares=10\nBlockIOWeight=10\n");
    let out = d.join("imported.toml");
    t.ok(&[
        "import",
        d.join("scylla-server.slice").to_str().unwrap(),
        d.join("scylla-helper.slice").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    t.ok(&["-c", out.to_str().unwrap(), "apply"]);
    if v1(&t, "cpu") {
        assert_eq!(
            read(&t.dir("cpu", "scylla.slice/scylla-server.slice/cpu.shares")),
            "10240"
        );
        assert_eq!(
            read(&t.dir("cpu", "scylla.slice/scylla-helper.slice/cpu.shares")),
            "102"
        );
    }
    assert!(t
        .run(&["-c", out.to_str().unwrap(), "destroy", "-q"])
        .status
        .success());
    assert!(t.cgroups().is_empty());
}

#[test]
fn status_counts_io_bytes() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    // A generous limit on the disk under /var/tmp: on v1 it also turns on per-cgroup I/O
    // accounting for that disk (and on v2 io.stat counts anyway).
    let plan = t.plan("[slice.db-helper]\nIOWriteBandwidthMax = \"/var/tmp 10G\"\n");
    let p = plan.to_str().unwrap();
    t.ok(&["-c", p, "apply"]);
    let file = format!("/var/tmp/bulkhead-io-test-{}", std::process::id());
    let o = t.run(&[
        "run",
        "--slice",
        "db-helper",
        "--",
        "dd",
        "if=/dev/zero",
        &format!("of={file}"),
        "bs=1M",
        "count=8",
        "oflag=direct",
        "status=none",
    ]);
    let _ = std::fs::remove_file(&file);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = t.run(&["status", "--json", "--interval", "0.1"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let helper = crate::common::entry(&v["slices"], "name", "db-helper").clone();
    let written = helper["io_write_bytes"].as_u64().unwrap_or(0);
    assert!(
        written >= 8 << 20,
        "8 MiB of direct writes are counted, got {written}: {helper}"
    );
    t.ok(&["-c", p, "destroy", "-q"]);
}

/// Device arguments as systemd takes them, on this machine's real disk: a path on a file
/// system becomes the whole disk under it (`plan show` says how), the blkio limit lands on
/// that disk; IODeviceLatencyTargetSec is shown and, with the I/O controller on cgroup v1
/// here, apply says plainly that it has no effect and writes nothing for it.
#[test]
fn device_paths_resolve_to_the_disk_and_io_latency_on_v1_warns() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    let disk = bulkhead::host::resolve_device_path("/var/tmp").unwrap();
    let plan = t.plan(
        "[slice.lat]\nIOReadBandwidthMax = \"/var/tmp 10M\"\nIODeviceLatencyTargetSec = \"/var/tmp 10ms\"\n",
    );
    let p = plan.to_str().unwrap();

    let o = t.ok(&["-c", p, "plan", "show"]);
    let out = stdout(&o);
    assert!(
        out.contains("IODeviceLatencyTargetSec = [\"/var/tmp 10ms\"]"),
        "{out}"
    );
    assert!(
        out.contains(&format!("# device {}: /var/tmp on ", disk.dev)),
        "{out}"
    );

    let o = t.ok(&["-c", p, "apply"]);
    let err = stderr(&o);
    if v1(&t, "blkio") {
        assert!(
            err.contains("IODeviceLatencyTargetSec is not applied")
                && err.contains("cgroup v2")
                && err.contains("no effect here"),
            "{err}"
        );
        assert_eq!(
            read(&t.dir("blkio", "lat.slice/blkio.throttle.read_bps_device")),
            format!("{} 10000000", disk.dev)
        );
    }
    // With io on cgroup v2, io.latency itself is checked by the host suite (hosts/io.rs).

    // --strict refuses what cannot be honoured; a path with no disk behind it is an error
    // naming the directive and the line, and nothing is changed.
    let o = t.run(&["-c", p, "apply", "--strict", "--dry-run"]);
    assert_eq!(
        o.status.code() == Some(0),
        !v1(&t, "blkio"),
        "{}",
        stderr(&o)
    );
    let bad = t.plan("[slice.lat2]\nIOWriteBandwidthMax = \"/proc 5M\"\n");
    let o = t.run(&["-c", bad.to_str().unwrap(), "apply"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(":2:1") && err.contains("IOWriteBandwidthMax = \"/proc 5M\""),
        "{err}"
    );
    assert!(err.contains("no block device behind it"), "{err}");
    if v1(&t, "blkio") {
        assert!(!t.dir("blkio", "lat2.slice").exists());
    }

    t.ok(&["-c", p, "destroy"]);
}

/// `[iocost]` is shown by `plan show`; where the cgroup2 root has no io.cost (this hybrid
/// host: the I/O controller is on v1) `apply` refuses the plan with the reason, and nothing
/// at all is changed: no slice made, no record left.
#[test]
fn iocost_is_shown_and_refused_where_the_kernel_lacks_it() {
    let Some((_suite, t, p)) = crate::suite::planned(
        "[slice.w]\nIOWeight = 25\n\n[iocost]\ndevices = [\"/var/tmp\"]\nrlat = \"5ms\"\nmodel = \"auto\"\n",
    ) else {
        return;
    };
    let disk = bulkhead::host::resolve_device_path("/var/tmp").unwrap().dev;
    let o = t.ok(&["-c", p, "plan", "show"]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "# io.cost.qos   <- \"{disk} enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000 min=50.00 max=150.00\""
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("# io.cost.model <- \"{disk} ctrl=auto\"")),
        "{out}"
    );
    let v2_io = t
        .layout
        .hierarchy("io")
        .is_some_and(|h| h.version == bulkhead::cgroup::Version::V2);
    if v2_io {
        return; // the host suite applies it in the pure v2 guest
    }
    let state = t.plan_dir.join("iocost.json");
    let o = t
        .cmd()
        .env("BULKHEAD_IOCOST_STATE", &state)
        .args(["-c", p, "apply"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("[iocost] cannot be applied on this host")
            && err.contains("cgroup v1")
            && err.contains("Nothing was changed"),
        "{err}"
    );
    assert!(t.cgroups().is_empty(), "made {:?}", t.cgroups());
    assert!(!state.exists());
}

#[test]
fn a_missing_plan_file_is_the_same_error_for_every_command() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    let missing = t.plan_dir.join("no-such-plan.toml");
    let m = missing.to_str().unwrap();
    for args in [
        &["status"][..],
        &["status", "--format", "prometheus"],
        &["apply"],
        &["plan", "show"],
        &["destroy"],
        &["move", "--slice", "db-helper", "1"],
        &["run", "--slice", "db-helper", "true"],
        &["hugepages", "status"],
    ] {
        let mut line = vec!["-c", m];
        line.extend_from_slice(args);
        let o = t.run(&line);
        let err = stderr(&o);
        // `run`'s own code for "bulkhead could not start the command".
        let code = if args[0] == "run" { 125 } else { 2 };
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{m}: cannot read the plan file: ")),
            "{args:?}: {err}"
        );
    }
}
