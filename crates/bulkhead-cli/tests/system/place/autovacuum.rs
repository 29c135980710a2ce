//! Issue 43 #3: PostgreSQL's autovacuum workers, by rule, into db-helper. A worker is a
//! short-lived child of the postmaster ("postgres: NAME: autovacuum worker DB"), forked every
//! naptime for a table that needs it; `bulkhead place` catches it by the kernel's process
//! events and moves it while it works. The launcher, the postmaster and every other process
//! of the cluster stay where they are.

use super::{in_slice, marker, placing, Reaped};
use crate::common::{prerequisites, stderr, TestRoot};
use std::io::BufRead;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn postgres_autovacuum_workers_by_rule_in_the_helper_slice() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    if !prerequisites() || !bulkhead_testkit::prereq::require(crate::postgres::problem()) {
        return;
    }
    let t = TestRoot::new();
    let name = marker("av");
    let pg = crate::postgres::Cluster::start(&name, true);
    // The guide's recipe (docs/POSTGRESQL.md) with this cluster's name in place of its `*`:
    // a test must not move another test's cluster.
    let plan = t.plan(&format!(
        "[slice.db-server]\n[slice.db-helper]\nCPUWeight = \"idle\"\n\n[place.autovacuum]\nslice = \"db-helper\"\nuser = \"postgres\"\ncmdline = \"postgres: {name}: autovacuum worker*\"\n"
    ));
    let p = plan.to_str().unwrap();
    t.ok(&["-c", p, "apply", "-q"]);
    let mut placer = placing(&t, p, Stdio::piped());
    let lines = lines_of(&mut placer);
    // Autovacuum every second, on a table that always needs it.
    for sql in [
        "alter system set autovacuum_naptime = '1s'",
        "select pg_reload_conf()",
        "create table v (i int) with (autovacuum_vacuum_threshold = 0, autovacuum_vacuum_scale_factor = 0)",
    ] {
        let o = pg.sql("postgres", sql);
        assert!(o.status.success(), "{sql}: {}", stderr(&o));
    }
    // Dead rows until place says it moved a worker (each round gives the next worker work).
    let end = Instant::now() + Duration::from_secs(90);
    let mut said = String::new();
    let placed = loop {
        assert!(Instant::now() < end, "no autovacuum worker placed: {said}");
        let o = pg.sql(
            "postgres",
            "insert into v select generate_series(1, 20000); delete from v",
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let wait = Instant::now() + Duration::from_secs(3);
        let mut found = None;
        while found.is_none() && Instant::now() < wait {
            if let Ok(l) = lines.recv_timeout(Duration::from_millis(200)) {
                // A worker done before place moved it says "no such process": the next.
                if l.contains("\"rule\":\"autovacuum\"") && l.contains("\"moved\":true") {
                    found = Some(l.clone());
                }
                said.push_str(&l);
                said.push('\n');
            }
        }
        if let Some(l) = found {
            break l;
        }
    };
    println!("{placed}");
    assert!(placed.contains("autovacuum worker"), "{placed}");
    // The launcher is not a worker: it stays with the postmaster.
    let pm = pg.postmaster_pid();
    let launcher = super::descendants(pm as u32).into_iter().find(|&k| {
        bulkhead_sys::procs::read(k).is_some_and(|p| p.cmdline.contains("autovacuum launcher"))
    });
    let launcher = launcher.expect("the autovacuum launcher");
    assert!(!in_slice(launcher, &t, "db.slice/db-helper.slice"));
    assert!(!said.contains(&format!("\"pid\":{launcher},")), "{said}");
    // A worker that exits while it is being moved (done in milliseconds) is nothing to
    // place, not an error (before: "error: rule autovacuum could not move ...: no such
    // process" for about one worker in ten).
    let o = placer.stop();
    assert!(!stderr(&o).contains("could not move"), "{}", stderr(&o));
    drop(pg);
    t.ok(&["-c", p, "destroy", "--kill"]);
}

/// The placer's stdout, a line at a time, as it comes.
fn lines_of(placer: &mut Reaped) -> mpsc::Receiver<String> {
    let out = placer.0.as_mut().unwrap().stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}
