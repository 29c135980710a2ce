//! The DBA's path on a systemd host: Debian's real `postgresql@15-main.service` (the
//! `postgresql-15` package's 15/main cluster) in the booted container, placed by the
//! plan's `services`, its backup's backend placed in the helper slice by a rule, and `check`
//! judging both.

use crate::common::container::{err, out, Container};
use crate::common::wait_for;
use bulkhead::plan::EMBEDDED_DEFAULT;
use std::process::Stdio;
use std::time::{Duration, Instant};

const UNIT: &str = "postgresql@15-main.service";
const PLAN: &str = "/root/pg.toml";
const SERVER: &str = "/db.slice/db-server.slice/postgresql@15-main.service";

/// The unit's processes (PIDs in the container), from its cgroup as systemd names it.
fn unit_pids(c: &Container) -> Vec<String> {
    let cg = c.show(UNIT, "ControlGroup");
    let o = c.sh(&format!(
        "for d in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do \
           f=\"$d{cg}/cgroup.procs\"; if [ -r \"$f\" ]; then cat \"$f\"; exit; fi; done"
    ));
    out(&o).split_whitespace().map(str::to_string).collect()
}

/// A process's systemd cgroup (the name=systemd line of /proc/PID/cgroup, else cgroup2's).
fn systemd_cgroup(c: &Container, pid: &str) -> String {
    let text = out(&c.sh(&format!("cat /proc/{pid}/cgroup")));
    let line = |prefix: &str| {
        text.lines()
            .find_map(|l| l.split_once(prefix).map(|(_, p)| p.to_string()))
    };
    line(":name=systemd:")
        .or_else(|| line("0::"))
        .unwrap_or_else(|| "(gone)".into())
}

/// A process named `comm` whose command line matches the shell pattern `cmdline` (the
/// container has no procps).
fn find(c: &Container, comm: &str, cmdline: &str) -> Option<String> {
    let o = c.sh(&format!(
        "for p in /proc/[0-9]*; do \
           [ \"$(cat $p/comm 2>/dev/null)\" = {comm} ] || continue; \
           case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in {cmdline}) echo ${{p#/proc/}}; exit;; esac; done"
    ));
    let pid = out(&o).trim().to_string();
    (!pid.is_empty()).then_some(pid)
}

/// `runuser -u USER -- ARGV` inside the container, its stdin closed.
fn as_user(c: &Container, user: &str, argv: &[&str]) -> std::process::Command {
    let mut cmd = c.cmd(&[&["runuser", "-u", user, "--"], argv].concat());
    cmd.stdin(Stdio::null());
    cmd
}

fn psql(c: &Container, sql: &str) {
    let o = as_user(c, "postgres", &["psql", "-XAtqc", sql])
        .output()
        .unwrap();
    assert!(o.status.success(), "psql {sql}: {}", err(&o));
}

/// `bulkhead check` with the plan: its exit code and its output (printed, for the log).
/// check while `place` runs: every process of the unit placed in db-server (an autovacuum
/// worker may have joined the cluster's `at_least`), and the verdict degraded (exit 1) only
/// for directives with no effect here. The container's v1 controllers are read-only, so
/// systemd records CPUWeight, IOWeight, MemoryMax... without a cgroup to write them to; on a
/// host (or with v2 controllers) that is exit 0.
fn check_degraded_only_by_no_effect(c: &Container, at_least: usize) {
    let (code, text) = check(c);
    let placed_ok = text.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix("OK")?.trim_start();
        let n = rest.strip_prefix(&format!("placement service {UNIT}: "))?;
        n.strip_suffix(" process(es) in db-server")?
            .parse::<usize>()
            .ok()
    });
    assert!(placed_ok.is_some_and(|n| n >= at_least), "{text}");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.starts_with("bulkhead check: DEGRADED: "), "{text}");
    for l in text.lines().skip(1) {
        let l = l.trim_start();
        if ["WARNING", "CRITICAL", "UNKNOWN"]
            .iter()
            .any(|w| l.starts_with(w))
        {
            assert!(
                l.contains(" no_effect "),
                "only no-effect findings: {l}\n{text}"
            );
        }
    }
    assert!(!text.contains("NOT PROTECTED"), "{text}");
}

fn check(c: &Container) -> (Option<i32>, String) {
    let o = c.bulkhead(&["-c", PLAN, "check"]);
    let text = out(&o) + &err(&o);
    println!(
        "$ bulkhead -c {PLAN} check   (exit {:?})\n{text}",
        o.status.code()
    );
    (o.status.code(), text)
}

#[test]
fn the_debian_cluster_placed_by_the_plan_and_its_backup_backend_by_a_rule_on_systemd() {
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };
    // As the DBA finds it: the package's cluster running, in system.slice (the cached root
    // has it `manual`, so that no other test's boot runs it: started here).
    let o = c.sh(&format!("systemctl start {UNIT}"));
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        c.show(UNIT, "ActiveState"),
        "active",
        "{UNIT} is not running"
    );
    assert_eq!(
        c.show(UNIT, "ControlGroup"),
        format!("/system.slice/system-postgresql.slice/{UNIT}")
    );

    // The plan: the cluster in db-server by name; the backends serving the backup role
    // ("postgres: 15/main: backup postgres [local] ...") and pg_dump in db-helper.
    let plan = EMBEDDED_DEFAULT.replace(
        "[slice.db-server]\n",
        &format!("[slice.db-server]\nservices = [\"{UNIT}\"]\n"),
    ) + "
[place.backup-backends]
slice = \"db-helper\"
user = \"postgres\"
cmdline = \"postgres: 15/main: backup *\"

[place.dump]
slice = \"db-helper\"
exe = \"pg_dump\"
";
    c.write(PLAN, &plan);
    let o = c.bulkhead(&["-c", PLAN, "apply"]);
    let e = err(&o);
    println!("$ bulkhead -c {PLAN} apply\n{}{e}", out(&o));
    assert!(o.status.success(), "{e}");
    assert!(
        e.contains(&format!(
            "{UNIT} runs in /system.slice/system-postgresql.slice: it moves to db-server.slice when it restarts"
        )) && e.contains(&format!("systemctl restart {UNIT}")),
        "{e}"
    );
    let o = c.sh(&format!("systemctl restart {UNIT}"));
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(c.show(UNIT, "ControlGroup"), SERVER);
    // The whole cluster: the postmaster and every process it forked, in the unit in db-server.
    let end = Instant::now() + Duration::from_secs(30);
    let mut cluster = unit_pids(&c);
    while cluster.len() < 6 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        cluster = unit_pids(&c);
    }
    assert!(
        cluster.len() >= 6,
        "postmaster, checkpointer, background writer, walwriter, autovacuum and logical replication launchers: {cluster:?}"
    );
    for pid in &cluster {
        assert_eq!(systemd_cgroup(&c, pid), SERVER, "{pid}");
    }

    // A backup role (the Debian system user `backup` connects as it by peer authentication),
    // and enough data that the dump's backend works for a while.
    psql(
        &c,
        "create role backup login; grant pg_read_all_data to backup",
    );
    psql(
        &c,
        "create table t as select g, md5(g::text) as h from generate_series(1, 200000) g",
    );

    // The rules, placed as processes start, while the backup runs.
    let placer = c
        .cmd(&[
            "sh",
            "-c",
            &format!(
                "echo $$ > /run/place.pid; exec bulkhead -c {PLAN} place --interval 50ms --json"
            ),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the placer's pidfile", || c.path("/run/place.pid").exists());
    // Another session holds the table until the test has seen the dump's backend and pg_dump
    // in the helper slice: the backend waits on the lock first, so both live until then.
    let lock = super::TableLock::take(as_user(
        &c,
        "postgres",
        &["psql", "-Xq", "-v", "ON_ERROR_STOP=1"],
    ));
    let dump_argv = [
        "pg_dump",
        "-U",
        "backup",
        "-Z9",
        "-f",
        "/tmp/dump.sql.gz",
        "postgres",
    ];
    let mut dump = as_user(&c, "backup", &dump_argv)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let helper = "/db.slice/db-helper.slice/";
    let (mut backend_seen, mut dump_seen) = (None, None);
    let end = Instant::now() + Duration::from_secs(60);
    while dump.try_wait().unwrap().is_none() && Instant::now() < end {
        if backend_seen.is_none() {
            backend_seen = find(&c, "postgres", "'postgres: 15/main: backup '*")
                .filter(|b| systemd_cgroup(&c, b).starts_with(helper));
        }
        if dump_seen.is_none() {
            dump_seen = find(&c, "pg_dump", "*pg_dump' -U backup '*")
                .filter(|d| systemd_cgroup(&c, d).starts_with(helper));
        }
        if backend_seen.is_some() && dump_seen.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let backend = backend_seen.expect("the dump's backend was placed in db-helper while it ran");
    let dumper = dump_seen.expect("pg_dump was placed in db-helper while it ran");
    lock.release();
    let st = dump.wait_with_output().unwrap();
    assert!(st.status.success(), "pg_dump: {}", err(&st));
    assert!(std::fs::metadata(c.path("/tmp/dump.sql.gz")).unwrap().len() > 1000);
    // The cluster stays where the plan puts it.
    for pid in unit_pids(&c) {
        assert_eq!(systemd_cgroup(&c, &pid), SERVER, "{pid}");
    }

    check_degraded_only_by_no_effect(&c, cluster.len());

    let o = c.sh("kill -TERM $(cat /run/place.pid)");
    assert!(o.status.success(), "{}", err(&o));
    let placed = placer.wait_with_output().unwrap();
    let lines = out(&placed);
    println!(
        "$ bulkhead -c {PLAN} place --interval 50ms --json\n{}",
        lines.trim()
    );
    assert!(placed.status.success(), "{}", err(&placed));
    assert!(
        lines.contains(&format!("\"pid\":{backend},"))
            && lines.contains("\"rule\":\"backup-backends\""),
        "{lines}"
    );
    assert!(
        lines.contains(&format!("\"pid\":{dumper},")) && lines.contains("\"rule\":\"dump\""),
        "{lines}"
    );

    // A cluster process moved out of the server slice: not protected, exit 2, named.
    let main_pid = c.show(UNIT, "MainPID");
    let stray = cluster.iter().find(|p| **p != main_pid).unwrap().clone();
    let o = c.bulkhead(&["move", "--slice", "db-helper", &stray]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(systemd_cgroup(&c, &stray).starts_with(helper));
    let (code, text) = check(&c);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.starts_with("bulkhead check: NOT PROTECTED"), "{text}");
    // The process left the unit, so it is no longer the service's: a database server outside
    // db-server, named by PID (its cgroup as the read-only v1 cpu hierarchy has it: `/`).
    assert!(
        text.lines().any(|l| l.trim_start().starts_with(&format!(
            "CRITICAL placement database server postgres outside db-server: 1 process(es) ({stray} (UID "
        ))),
        "{text}"
    );

    let o = c.bulkhead(&["-c", PLAN, "destroy", "--kill"]);
    assert!(o.status.success(), "{}", err(&o));
}
