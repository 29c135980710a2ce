//! Placing what already runs: `move --tree` on a real process tree, placement rules
//! (`bulkhead place`), and a real PostgreSQL cluster placed end to end. Each test under its
//! own cgroup root, removed even when the test fails.

use crate::common::{prerequisites, stderr, stdout, wait_for, TestRoot};
use bulkhead::plan::EMBEDDED_DEFAULT;
use bulkhead_testkit::assert_has;
use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod autovacuum;
mod init_script;
mod postgres_systemd;

/// A child killed (with its process group) and reaped when the test ends.
pub(crate) struct Reaped(Option<Child>);

impl Reaped {
    pub(crate) fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// Let a child started by [`held`] go on: the word it waits for on its stdin.
    fn release(&mut self) {
        let mut stdin = self.0.as_mut().unwrap().stdin.take().expect("a held child");
        stdin.write_all(b"go\n").unwrap();
    }

    /// SIGTERM, then its exit and output.
    fn stop(mut self) -> std::process::Output {
        let child = self.0.take().unwrap();
        bulkhead_sys::process::kill(child.id() as i32, libc::SIGTERM).unwrap();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", c.id())])
                .stderr(Stdio::null())
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `bulkhead place --interval 50ms --json` with plan `p`, its stderr piped.
pub(crate) fn placing(t: &TestRoot, p: &str, stdout: Stdio) -> Reaped {
    Reaped(Some(
        t.cmd()
            .args(["-c", p, "place", "--interval", "50ms", "--json"])
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ))
}

/// `sh` in a process group of its own, running `script`.
pub(crate) fn tree(script: &str) -> Reaped {
    use std::os::unix::process::CommandExt;
    Reaped(Some(
        Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    ))
}

/// [`tree`], but `script` runs only once the test says so ([`Reaped::release`]): until then
/// the shell waits on its stdin, so the test knows what it is however long a scan takes.
fn held(script: &str) -> Reaped {
    use std::os::unix::process::CommandExt;
    Reaped(Some(
        Command::new("sh")
            .args(["-c", &format!("read _; {script}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    ))
}

fn descendants(pid: u32) -> Vec<i32> {
    let table = bulkhead_sys::procs::table();
    bulkhead_sys::procs::descendants(pid as i32, &table)
}

/// Wait until `pid` has at least `n` descendants (at most 30 s; the caller checks how many).
fn wait_descendants(pid: u32, n: usize) -> Vec<i32> {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let d = descendants(pid);
        if d.len() >= n || Instant::now() > end {
            return d;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A psql session holding an ACCESS EXCLUSIVE lock on table `t` until the test releases it:
/// a pg_dump started meanwhile waits on it, so the dump's backend lives (and can be looked
/// at) for as long as the test needs, not for a fixed time.
pub(crate) struct TableLock {
    psql: Child,
}

impl TableLock {
    /// Start `psql` (reading SQL from its stdin; this sets stdin and stdout), take the lock
    /// and wait until psql says it holds it.
    pub(crate) fn take(mut psql: Command) -> TableLock {
        let mut psql = psql
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("psql");
        let out = psql.stdout.take().unwrap();
        let mut lock = TableLock { psql };
        lock.say("begin;\nlock table t in access exclusive mode;\n\\echo locked\n");
        // The answer through a thread: a psql that never answers fails the test, not hangs it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.trim() == "locked" => return lock,
                Ok(_) => {}
                Err(e) => panic!("psql did not take the lock: {e}"),
            }
        }
    }

    fn say(&mut self, sql: &str) {
        let stdin = self.psql.stdin.as_mut().expect("psql's stdin");
        stdin.write_all(sql.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Commit (the waiting dump goes on) and end the session.
    pub(crate) fn release(mut self) {
        self.say("commit;\n");
        drop(self.psql.stdin.take());
        let st = self.psql.wait().unwrap();
        assert!(st.success(), "psql: {st}");
    }
}

impl Drop for TableLock {
    fn drop(&mut self) {
        if let Ok(None) = self.psql.try_wait() {
            let _ = self.psql.kill();
            let _ = self.psql.wait();
        }
    }
}

pub(crate) fn in_slice(pid: i32, t: &TestRoot, slice_path: &str) -> bool {
    let want = format!("{}/{slice_path}", t.cgroup);
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|c| c.lines().any(|l| l.ends_with(&want)))
}

/// A test root with the plan `text` applied (None: no prerequisites).
pub(crate) fn applied(text: &str) -> Option<(TestRoot, std::path::PathBuf)> {
    if !prerequisites() {
        return None;
    }
    let t = TestRoot::new();
    let plan = t.plan(text);
    t.ok(&["-c", plan.to_str().unwrap(), "apply", "-q"]);
    Some((t, plan))
}

#[test]
fn move_tree_takes_every_descendant_and_a_single_move_says_who_stays() {
    let _suite = crate::suite::shared();
    let Some((t, plan)) = applied(EMBEDDED_DEFAULT) else {
        return;
    };
    let p = plan.to_str().unwrap();
    // sh -> (sh -> sleep), sleep: three descendants, two levels.
    let root = tree("(sleep 60 & wait) & sleep 60 & wait");
    let pid = root.id();
    let kids = wait_descendants(pid, 3);
    assert_eq!(kids.len(), 3, "{kids:?}");
    let pid_s = pid.to_string();

    // A single move takes the one process and says which descendants stay where.
    let o = t.ok(&["-c", p, "move", "--slice", "db-helper", &pid_s]);
    let err = stderr(&o);
    assert!(
        err.contains(&format!("3 descendant(s) of {pid} stay in")) && err.contains("add --tree"),
        "{err}"
    );
    assert!(in_slice(pid as i32, &t, "db.slice/db-helper.slice"));
    assert!(kids
        .iter()
        .all(|&k| !in_slice(k, &t, "db.slice/db-helper.slice")));

    // The dry run lists the tree and moves nothing.
    let o = t.ok(&[
        "-c",
        p,
        "move",
        "--tree",
        "--dry-run",
        "--slice",
        "db-server",
        &pid_s,
    ]);
    assert_has(
        &stdout(&o),
        &format!("would move {pid} and 3 descendant(s)"),
    );
    assert!(!in_slice(pid as i32, &t, "db.slice/db-server.slice"));

    // --tree moves all four, threads included, and --json lists them.
    let o = t.ok(&[
        "-c",
        p,
        "move",
        "--tree",
        "--json",
        "--slice",
        "db-server",
        &pid_s,
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let moved: Vec<i64> = v["results"][0]["tree"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    assert_eq!(moved.len(), 4, "{v}");
    assert_eq!(moved[0], i64::from(pid));
    for k in std::iter::once(pid as i32).chain(kids.iter().copied()) {
        assert!(in_slice(k, &t, "db.slice/db-server.slice"), "{k} not moved");
    }
    assert!(v["results"][0].get("already").is_none(), "{v}");
    // Again: they are there already, and it says so (issue 41 #6).
    let o = t.ok(&["-c", p, "move", "--tree", "--slice", "db-server", &pid_s]);
    assert!(
        stdout(&o).contains(&format!(
            "{pid} and 3 descendant(s) are already in db-server.slice"
        )),
        "{}",
        stdout(&o)
    );
    let o = t.run(&[
        "-c",
        p,
        "move",
        "--slice",
        "db-server",
        &kids[0].to_string(),
    ]);
    assert!(
        stdout(&o).contains(&format!("{} is already in db-server.slice", kids[0])),
        "{}",
        stdout(&o)
    );
    drop(root);
    t.ok(&["-c", p, "destroy", "--kill"]);
}

#[test]
fn move_tree_catches_a_tree_that_forks_while_it_moves() {
    let _suite = crate::suite::shared();
    let Some((t, plan)) = applied(EMBEDDED_DEFAULT) else {
        return;
    };
    let p = plan.to_str().unwrap();
    // A shell that starts a new sleeper every 10 ms, up to 300.
    let root = tree("i=0; while [ $i -lt 300 ]; do sleep 30 & i=$((i+1)); sleep 0.01; done; wait");
    let pid = root.id();
    wait_descendants(pid, 20);
    let o = t.run(&[
        "-c",
        p,
        "move",
        "--tree",
        "--slice",
        "db-server",
        &pid.to_string(),
    ]);
    // Either stable (every process moved) or said that it was not.
    if o.status.success() {
        // Children forked after the move are born in the slice: none is outside it. Some
        // forked after it, unless the loop had ended by then (a busy host: then it checks
        // the ones there are).
        let moved = descendants(pid).len();
        wait_descendants(pid, (moved + 5).min(300));
        let outside: Vec<i32> = descendants(pid)
            .into_iter()
            .filter(|&k| !in_slice(k, &t, "db.slice/db-server.slice"))
            .collect();
        // A sleeper that exited between the scan and the read is gone, not outside.
        let outside: Vec<i32> = outside
            .into_iter()
            .filter(|k| std::path::Path::new(&format!("/proc/{k}")).exists())
            .collect();
        assert!(outside.is_empty(), "left outside: {outside:?}");
    } else {
        assert_has(&stderr(&o), "still forking");
    }
    drop(root);
    t.ok(&["-c", p, "destroy", "--kill"]);
}

/// A marker no other process on the machine has in its command line.
fn marker(tag: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("bh-{tag}-{}-{n}", std::process::id())
}

/// `sleep 600` whose command line is `MARKER 600` (as a PostgreSQL backend's title after
/// fork); the script itself never names the marker whole. With `later`, it takes that title
/// only when the test releases it ([`Reaped::release`]): until then it is a shell waiting on
/// its stdin.
fn renamed_sleeper(marker: &str, later: bool) -> Reaped {
    let (a, b) = marker.split_at(3);
    let script = format!("exec bash -c 'm={a}; exec -a \"${{m}}{b}\" sleep 600'");
    if later {
        held(&script)
    } else {
        tree(&script)
    }
}

#[test]
fn rules_place_once_dry_run_and_as_processes_start() {
    let _suite = crate::suite::shared();
    let m = marker("rule");
    let Some((t, plan)) = applied(&format!(
        "{EMBEDDED_DEFAULT}\n[place.t]\nslice = \"db-helper\"\ncmdline = \"{m} *\"\n"
    )) else {
        return;
    };
    let p = plan.to_str().unwrap();
    let helper = "db.slice/db-helper.slice";

    let first = renamed_sleeper(&m, false);
    let pid = first.id() as i32;
    wait_for("the title", || {
        bulkhead_sys::procs::read(pid).is_some_and(|p| p.cmdline.starts_with(&m))
    });
    // Dry run: says it, moves nothing.
    let o = t.ok(&["-c", p, "place", "--dry-run"]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "would place {pid} (sleep: {m} 600) in db-helper.slice (rule t)"
        )),
        "{out}"
    );
    assert!(out.contains("dry run: 1 process(es) would move"), "{out}");
    assert!(!in_slice(pid, &t, helper));
    // --once moves it.
    let o = t.ok(&["-c", p, "place", "--once", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["pid"], pid);
    assert_eq!(v["moved"], true);
    assert!(in_slice(pid, &t, helper));
    // Already there: nothing more to do.
    let o = t.run(&["-c", p, "place", "--once"]);
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));

    // Running: a process that takes its title after `place` could see it without it is
    // placed. It waits for the test's word (a fixed delay would race `place`'s first scan on
    // a busy host). A witness started after it, with its title at once, placed: `place` runs
    // and has decided on processes newer than the held one, which is still the shell it
    // started as; only then does it take its title. `--recheck`: on a busy host that may be
    // more than the default 2 s after it started.
    let mut second = renamed_sleeper(&m, true);
    let pid2 = second.id() as i32;
    let running = Reaped(Some(
        t.cmd()
            .args([
                "-c",
                p,
                "place",
                "--interval",
                "50ms",
                "--recheck",
                "60s",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let witness = renamed_sleeper(&m, false);
    let pid3 = witness.id() as i32;
    wait_for("the witness in the helper slice", || {
        in_slice(pid3, &t, helper)
    });
    assert!(
        !in_slice(pid2, &t, helper),
        "placed before it had its title"
    );
    second.release();
    wait_for("the renamed process in the helper slice", || {
        in_slice(pid2, &t, helper)
    });
    let o = running.stop();
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = stdout(&o);
    assert!(lines.contains(&format!("\"pid\":{pid2}")), "{lines}");
    drop((first, second, witness));

    // A plan others can write is refused as root, before anything moves.
    let loose = t.plan(&std::fs::read_to_string(&plan).unwrap());
    std::fs::set_permissions(&loose, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let o = t.run(&["-c", loose.to_str().unwrap(), "place", "--once"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_has(&stderr(&o), "writable by its group or others (mode 0666)");
    // A plan without rules says what to add.
    let none = t.plan(EMBEDDED_DEFAULT);
    let o = t.run(&["-c", none.to_str().unwrap(), "place", "--once"]);
    assert_eq!(o.status.code(), Some(2));
    assert_has(&stderr(&o), "[place.NAME]");
    t.ok(&["-c", p, "destroy", "--kill"]);
}

/// Issue 41: `kill -HUP` of a running `place` reads the plan again: a new rule acts, `place`
/// still runs, and a bad plan leaves the rules before it, each said on stderr with a stamp.
#[test]
fn sighup_reads_the_plan_again_and_a_bad_one_keeps_the_old_rules() {
    let _suite = crate::suite::shared();
    let (a, b) = (marker("hup-a"), marker("hup-b"));
    let rule = |m: &str| {
        format!("{EMBEDDED_DEFAULT}\n[place.t]\nslice = \"db-helper\"\ncmdline = \"{m} *\"\n")
    };
    let Some((t, plan)) = applied(&rule(&a)) else {
        return;
    };
    let p = plan.to_str().unwrap();
    let helper = "db.slice/db-helper.slice";
    let mut running = placing(&t, p, Stdio::null());
    let pid = running.id() as i32;
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let err = running.0.as_mut().unwrap().stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let said = |what: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(l) if l.contains(what) => return l,
                Ok(_) => {}
                Err(e) => panic!("place never said '{what}': {e}"),
            }
        }
    };
    // The first rule acts (place runs and has scanned).
    let first = renamed_sleeper(&a, false);
    wait_for("the first rule's process in db-helper", || {
        in_slice(first.id() as i32, &t, helper)
    });
    // check reads place's state file: it runs, with this plan.
    let check = || stdout(&t.run(&["-c", p, "check"]));
    let text = check();
    assert!(
        text.contains(&format!(
            "bulkhead place runs (PID {pid}) with this plan: 1 placement rule(s)"
        )),
        "{text}"
    );
    // The new rule: written over the plan (check: place runs an older one), then SIGHUP.
    std::fs::write(&plan, rule(&b)).unwrap();
    let text = check();
    assert!(
        text.contains(&format!(
            "bulkhead place (PID {pid}) runs an older version of {p}"
        )),
        "{text}"
    );
    assert!(text.contains(&format!("hint: kill -HUP {pid}")), "{text}");
    bulkhead_sys::process::kill(pid, libc::SIGHUP).unwrap();
    let line = said("SIGHUP");
    assert!(line.contains("the plan was read again"), "{line}");
    let text = check();
    assert!(text.contains("with this plan"), "{text}");
    assert!(
        line.starts_with("20") && line.contains("Z bulkhead:"),
        "no stamp: {line}"
    );
    let second = renamed_sleeper(&b, false);
    wait_for("the new rule's process in db-helper", || {
        in_slice(second.id() as i32, &t, helper)
    });
    // A bad plan: said, and the rules before it stay.
    std::fs::write(&plan, format!("{}\nslice = \"db-helpr\"\n", rule(&b))).unwrap();
    bulkhead_sys::process::kill(pid, libc::SIGHUP).unwrap();
    let line = said("SIGHUP");
    assert!(
        line.contains("not reloaded, the rules before it stay"),
        "{line}"
    );
    let third = renamed_sleeper(&b, false);
    wait_for("the kept rule's process in db-helper", || {
        in_slice(third.id() as i32, &t, helper)
    });
    assert!(
        running.0.as_mut().unwrap().try_wait().unwrap().is_none(),
        "place ended"
    );
    // destroy refuses while the rules' processes are in the slices, and says that moving
    // them out is undone by the running place (issue 41 #6).
    std::fs::write(&plan, rule(&b)).unwrap();
    let o = t.run(&["-c", p, "destroy"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "bulkhead place (PID {pid}) runs for this plan and puts processes back into its slices: stop it first"
        )),
        "{}",
        stderr(&o)
    );
    drop((first, second, third));
    let o = running.stop();
    assert!(o.status.success(), "place: {:?}", o.status);
    // Stopped: check says so, a warning (exit 1 at least).
    std::fs::write(&plan, rule(&b)).unwrap();
    let o = t.run(&["-c", p, "check"]);
    let text = stdout(&o);
    assert!(
        text.contains("WARNING  placement bulkhead place is not running (no state file)"),
        "{text}"
    );
    assert!(o.status.code().unwrap_or(0) >= 1, "{text}");
}

/// Where a process's cgroups are, for messages.
fn cgroups_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_else(|_| "(gone)".into())
}

/// The CPU time a slice used, where cpuacct is a v1 controller (None elsewhere).
fn cpu_usage(t: &TestRoot, slice_path: &str) -> Option<u64> {
    if !t.v1("cpuacct") {
        return None;
    }
    let f = t
        .controller_dir("cpuacct", slice_path)
        .join("cpuacct.usage");
    std::fs::read_to_string(f).ok()?.trim().parse().ok()
}

/// As Debian's `pg_createcluster` makes a cluster: cluster_name set, titles "postgres:
/// NAME: backup ...".
#[test]
fn postgres_cluster_in_the_server_slice_and_its_backup_backend_in_the_helper_slice() {
    postgres_backup(true);
}

/// As `initdb` leaves a cluster: no cluster_name, titles "postgres: backup ..." (issue 41
/// #2: the rule the guide documents matches both).
#[test]
fn postgres_initdb_cluster_without_a_cluster_name_same_rules() {
    postgres_backup(false);
}

fn postgres_backup(cluster_name: bool) {
    // Alone: `check` must see no other test's database server outside these slices.
    let _suite = crate::suite::alone();
    if !prerequisites() || !bulkhead_testkit::prereq::require(crate::postgres::problem()) {
        return;
    }
    let t = TestRoot::new();
    let name = marker("pg");
    let pg = crate::postgres::Cluster::start(&name, cluster_name);
    let title = if cluster_name {
        format!("postgres: {name}: backup ")
    } else {
        "postgres: backup ".to_string()
    };
    let plan = backup_plan(&t, &pg);
    let p = plan.to_str().unwrap();
    let o = t.ok(&["-c", p, "apply", "--backend", "cgroupfs"]);
    assert_has(
        &stderr(&o),
        "postgresql@15-main.service is placed by `bulkhead place`",
    );
    let (server, helper) = ("db.slice/db-server.slice", "db.slice/db-helper.slice");

    // The whole cluster: the postmaster and every process it runs.
    let pm = pg.postmaster_pid();
    let children = descendants(pm as u32);
    assert!(
        children.len() >= 4,
        "checkpointer, background writer, walwriter, autovacuum launcher...: {children:?}"
    );
    let o = t.ok(&[
        "-c",
        p,
        "move",
        "--tree",
        "--dry-run",
        "--slice",
        "db-server",
        &pm.to_string(),
    ]);
    assert!(
        stdout(&o).contains(&format!(
            "would move {pm} and {} descendant(s)",
            children.len()
        )),
        "{}",
        stdout(&o)
    );
    // The rules and the service's pidfile, placed as they go, while the backup runs.
    let placer = placing(&t, p, Stdio::piped());
    wait_for("the cluster in db-server", || {
        std::iter::once(pm)
            .chain(children.iter().copied())
            .all(|k| in_slice(k, &t, server))
    });
    // Before the dump: protected.
    let o = t.run(&["-c", p, "--backend", "cgroupfs", "check"]);
    assert_eq!(o.status.code(), Some(0), "before the dump: {}", stdout(&o));

    // A backup role, and enough data that the dump's backend works for a while.
    let setup = "create role backup login; grant pg_read_all_data to backup; \
                 create table t as select g, md5(g::text) as h from generate_series(1, 200000) g";
    let o = pg.sql("postgres", setup);
    assert!(o.status.success(), "{}", stderr(&o));
    // An application's backend is born in the server slice (the postmaster's).
    let o = pg.sql("postgres", "select pg_read_file('/proc/self/cgroup')");
    assert!(
        stdout(&o).contains(&format!("{}/{server}", t.cgroup)),
        "{}",
        stdout(&o)
    );

    let helper_cpu_before = cpu_usage(&t, helper);
    // Another session holds the table until the test has seen the dump's backend in the
    // helper slice: the backend waits on the lock first, so it lives until then.
    let mut psql = pg.as_postgres(&format!("{}/psql", crate::postgres::BIN));
    psql.args([
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-U",
        "postgres",
        "-d",
        "postgres",
    ]);
    let lock = TableLock::take(psql);
    let dump_file = pg.dir.join("dump.sql.gz");
    let mut dump = pg
        .as_postgres(&format!("{}/pg_dump", crate::postgres::BIN))
        .args(["-U", "backup", "-Z9", "-h"])
        .arg(&pg.dir)
        .args(["-p", &pg.port.to_string(), "-f"])
        .arg(&dump_file)
        .arg("postgres")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dump_pid = dump.id() as i32;
    // While it runs: its backend (a child of the postmaster) and pg_dump are in db-helper.
    let mut seen_backend = None;
    let end = Instant::now() + Duration::from_secs(60);
    while dump.try_wait().unwrap().is_none() && Instant::now() < end {
        let backend = descendants(pm as u32)
            .into_iter()
            .find(|&b| bulkhead_sys::procs::read(b).is_some_and(|p| p.cmdline.starts_with(&title)));
        if let Some(b) = backend.filter(|&b| in_slice(b, &t, helper)) {
            assert!(
                in_slice(dump_pid, &t, helper),
                "pg_dump: {}",
                cgroups_of(dump_pid)
            );
            seen_backend = Some(b);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let backend = seen_backend.expect("the dump's backend was placed in db-helper while it ran");
    check_during_the_dump(&t, &plan);
    lock.release();
    let status = dump.wait().unwrap();
    assert!(status.success(), "pg_dump failed");
    assert!(std::fs::metadata(&dump_file).unwrap().len() > 1000);
    // The backend's work (the COPY of 200,000 rows) was counted in the helper slice.
    if let (Some(before), Some(after)) = (helper_cpu_before, cpu_usage(&t, helper)) {
        assert!(after > before, "helper CPU {before} -> {after}");
        println!(
            "db-helper used {} ms of CPU during the dump",
            (after - before) / 1_000_000
        );
    }

    // The cluster stays where the plan puts it: every other process of the postmaster
    // (and the postmaster) still in db-server.
    for k in std::iter::once(pm).chain(descendants(pm as u32)) {
        if k != backend {
            assert!(
                in_slice(k, &t, server),
                "{k} left db-server: {}",
                cgroups_of(k)
            );
        }
    }
    // check judges the plan's own placements: with the postmaster moved out of db-server,
    // the service's claim is broken and the verdict is "not protected" (exit 2).
    let o = t.run(&["-c", p, "--backend", "cgroupfs", "check"]);
    assert!(
        stdout(&o)
            .contains("placement service postgresql@15-main.service: 6 process(es) in db-server"),
        "{}",
        stdout(&o)
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).starts_with("bulkhead check: PROTECTED"),
        "{}",
        stdout(&o)
    );
    let o = placer.stop();
    after_place_stops(&t, p, pm);
    placed_lines(&o, pm, backend, dump_pid);
    drop(pg);
    t.ok(&["-c", p, "destroy", "--kill"]);
}

/// The default plan's slices with the cluster as db-server's service (by its pidfile: no
/// systemd here) and two rules: the backends serving the backup role (the pattern the guide
/// documents, for both kinds of cluster title) and pg_dump when it dumps this cluster.
fn backup_plan(t: &TestRoot, pg: &crate::postgres::Cluster) -> std::path::PathBuf {
    // The cluster as a service of db-server: no systemd here, so `bulkhead place` places it
    // by its pidfile (the postmaster and its tree). And two rules: the backends serving the
    // backup role of this cluster (their title is "postgres: NAME: backup postgres [local]
    // ..." once the connection is set up), and pg_dump itself when it dumps this cluster.
    let pidfile = pg.data().join("postmaster.pid");
    // The default plan's directives, as the guide has them. Where this host cannot enforce
    // some (IOWeight without BFQ or io.cost, MemoryHigh on cgroup v1) check says so, and the
    // plan accepts it for this host (issue 41 #4): PROTECTED, with what it does not cover.
    let server = format!(
        "[slice.db-server]\nCPUWeight = 1000\nIOWeight = 1000\nMemorySwapMax = 0\nservices = [{{ name = \"postgresql@15-main\", pidfile = \"{}\" }}]\n\n[slice.db-helper]\nCPUWeight = 10\nIOWeight = 10\nMemoryHigh = \"1G\"\nMemoryMax = \"1200M\"\n\n[check]\naccept = [\"io\", \"no_effect\"]\n",
        pidfile.display()
    );
    t.plan(&format!(
        "{server}
[place.backup-backends]
slice = \"db-helper\"
user = \"postgres\"
cmdline = [\"postgres: backup *\", \"postgres: *: backup *\"]

[place.dump]
slice = \"db-helper\"
exe = \"pg_dump\"
cmdline = \"* -p {port} *\"
",
        port = pg.port
    ))
}

/// During the dump `check` says PROTECTED and the exporter agrees; a backend rule that fits no
/// backend of this cluster is a warning (issue 41 #2).
fn check_during_the_dump(t: &TestRoot, plan: &std::path::Path) {
    let p = plan.to_str().unwrap();
    // Issue 41: during the dump `check` says PROTECTED: the backend the rule placed in
    // db-helper is the rule's, not also claimed by the service's tree (before: NOT
    // PROTECTED, "service postgresql@15-main.service outside db-server: 1 process(es)").
    let o = t.run(&["-c", p, "--backend", "cgroupfs", "check"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "check during the dump: {}{}",
        stdout(&o),
        stderr(&o)
    );
    assert_has(
        &stdout(&o),
        "placement rule backup-backends: 1 process(es) in db-helper",
    );
    // The exporter agrees (the gauge a monitor alerts on).
    let page = crate::check::scrape(t, p);
    assert!(
        page.contains("bulkhead_protection{state=\"protected\"} 1"),
        "{page}"
    );
    // Issue 41 #2: a backend rule whose pattern fits no backend of this cluster (a cluster
    // name it does not have) matches nothing while the dump runs: check says so.
    let wrong = t.plan(&format!(
        "{}\n[place.wrong-backends]\nslice = \"db-helper\"\nuser = \"postgres\"\ncmdline = \"postgres: 15/nope: backup *\"\n",
        std::fs::read_to_string(plan).unwrap()
    ));
    let o = t.run(&[
        "-c",
        wrong.to_str().unwrap(),
        "--backend",
        "cgroupfs",
        "check",
    ]);
    assert!(
        stdout(&o)
            .contains("WARNING  placement rule wrong-backends matches no process while pg_dump"),
        "{}",
        stdout(&o)
    );
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
}

/// With place stopped and the postmaster moved out of every slice, check says NOT PROTECTED
/// (exit 2), that place is not running, and names the service.
fn after_place_stops(t: &TestRoot, p: &str, pm: i32) {
    let out_of = t.run(&["-c", p, "move", "--slice", "/", &pm.to_string()]);
    assert!(out_of.status.success(), "{}", stderr(&out_of));
    let c = t.run(&["-c", p, "--backend", "cgroupfs", "check"]);
    println!("{}{}", stdout(&c), stderr(&c));
    assert_eq!(c.status.code(), Some(2), "{}{}", stdout(&c), stderr(&c));
    assert_has(&stdout(&c), "bulkhead place is not running");
    assert_has(&stdout(&c), "postgresql@15-main.service");
}

/// What `place --json` said it did: the dump's backend and pg_dump by their rules, the
/// postmaster by the service's pidfile.
fn placed_lines(o: &std::process::Output, pm: i32, backend: i32, dump_pid: i32) {
    assert!(o.status.success(), "{}", stderr(o));
    let lines = stdout(o);
    println!("{}", lines.trim());
    assert!(lines.contains(&format!("\"pid\":{backend}")), "{lines}");
    assert!(lines.contains("\"rule\":\"backup-backends\""), "{lines}");
    assert!(lines.contains(&format!("\"pid\":{dump_pid}")), "{lines}");
    assert!(
        lines.contains(&format!("\"pid\":{pm},"))
            && lines.contains("\"rule\":\"service postgresql@15-main.service\""),
        "{lines}"
    );
}

/// A service of the plan gets a `Slice=` drop-in from apply (dry run, warning, no restart),
/// export writes it, and removing the service from the plan or destroying the slice removes
/// it: against the real systemd of the booted container.
#[test]
fn services_are_attached_by_slice_drop_ins_on_systemd() {
    use crate::common::container::{err, out, Container};
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };
    let unit = "pgdemo@15-main.service";
    let drop_in = format!("/etc/systemd/system/{unit}.d/50-bulkhead-slice.conf");
    c.write(
        "/etc/systemd/system/pgdemo@.service",
        "[Service]\nExecStart=/bin/sleep infinity\n",
    );
    let o = c.sh(&format!(
        "systemctl daemon-reload && systemctl start {unit}"
    ));
    assert!(o.status.success(), "{}", err(&o));
    let main_pid = c.show(unit, "MainPID");
    let with = EMBEDDED_DEFAULT.replace(
        "[slice.db-server]\n",
        &format!("[slice.db-server]\nservices = [\"{unit}\", \"absent\"]\n"),
    );
    c.write("/tmp/svc.toml", &with);
    c.write("/tmp/nosvc.toml", EMBEDDED_DEFAULT);

    // The dry run prints the file and the reload, and writes nothing.
    let o = c.bulkhead(&["-c", "/tmp/svc.toml", "apply", "--dry-run"]);
    assert!(o.status.success(), "{}", err(&o));
    let text = out(&o);
    assert!(text.contains(&format!("write {drop_in}:")), "{text}");
    assert!(text.contains("Slice=db-server.slice"), "{text}");
    assert!(text.contains("After=bulkhead-apply.service"), "{text}");
    assert!(text.contains("dbus Reload()"), "{text}");
    assert!(!c.path(&drop_in).exists());

    // apply writes it, reloads, says the service needs a restart, and does not restart it.
    let o = c.bulkhead(&["-c", "/tmp/svc.toml", "apply"]);
    assert!(o.status.success(), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains(&format!(
            "{unit} runs in /system.slice/system-pgdemo.slice: it moves to db-server.slice when it restarts"
        )) && e.contains(&format!("systemctl restart {unit}")),
        "{e}"
    );
    assert!(e.contains("absent.service is not installed here"), "{e}");
    assert!(c.path(&drop_in).exists());
    assert_eq!(c.show(unit, "DropInPaths"), drop_in);
    assert_eq!(
        c.show(unit, "MainPID"),
        main_pid,
        "restarted behind the user's back"
    );
    // The user restarts it: it runs in the plan's slice.
    let o = c.sh(&format!("systemctl restart {unit}"));
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        c.show(unit, "ControlGroup"),
        format!("/db.slice/db-server.slice/{unit}")
    );
    let o = c.bulkhead(&["-c", "/tmp/svc.toml", "apply"]);
    assert_has(&out(&o), "nothing to change");
    assert!(!err(&o).contains("restarts"), "{}", err(&o));

    // export systemd writes the same drop-in beside the slices.
    let o = c.bulkhead(&["-c", "/tmp/svc.toml", "export", "systemd", "/tmp/exported"]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        std::fs::read_to_string(c.path(&format!("/tmp/exported/{unit}.d/50-bulkhead-slice.conf")))
            .unwrap(),
        std::fs::read_to_string(c.path(&drop_in)).unwrap()
    );

    // Out of the plan: the drop-in goes, and the service goes back at its next restart.
    let o = c.bulkhead(&["-c", "/tmp/nosvc.toml", "apply"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(!c.path(&drop_in).exists());
    assert!(!c.path(&format!("/etc/systemd/system/{unit}.d")).exists());
    let o = c.sh(&format!("systemctl restart {unit}"));
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        c.show(unit, "ControlGroup"),
        format!("/system.slice/system-pgdemo.slice/{unit}")
    );

    // move --tree through systemd: a shell and its two children, into one scope of the slice.
    let o = c.sh("setsid sh -c 'sleep 60 & sleep 60 & wait' >/dev/null 2>&1 & echo $!");
    let root = out(&o).trim().to_string();
    let kids = || {
        out(&c.sh(&format!("pgrep -P {root}")))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let end = Instant::now() + Duration::from_secs(30);
    while kids().len() < 2 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = c.bulkhead(&["move", "--tree", "--slice", "db-helper", &root]);
    assert!(o.status.success(), "{}", err(&o));
    assert_has(&out(&o), &format!("moved {root} and 2 descendant(s)"));
    for pid in std::iter::once(root.clone()).chain(kids()) {
        let cg = out(&c.sh(&format!("cat /proc/{pid}/cgroup")));
        assert!(cg.contains("/db.slice/db-helper.slice/"), "{pid}: {cg}");
    }

    // destroy removes the drop-ins of the slices it removes.
    let o = c.bulkhead(&["-c", "/tmp/svc.toml", "-q", "apply"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(c.path(&drop_in).exists());
    let o = c.bulkhead(&["-c", "/tmp/svc.toml", "destroy", "--kill"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(!c.path(&drop_in).exists());
    assert_eq!(c.show(unit, "DropInPaths"), "");
}
