//! Placing what already runs: `move --tree` on a real process tree, placement rules
//! (`bulkhead place`), and a real PostgreSQL cluster placed end to end. Each test under its
//! own cgroup root, removed even when the test fails.

use crate::common::{prerequisites, stderr, stdout, TestRoot};
use bulkhead::plan::EMBEDDED_DEFAULT;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child killed (with its process group) and reaped when the test ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sh` in a process group of its own, running `script`.
fn tree(script: &str) -> Reaped {
    use std::os::unix::process::CommandExt;
    Reaped(
        Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    )
}

fn descendants(pid: u32) -> Vec<i32> {
    let table = bulkhead::sys::procs::table();
    bulkhead::sys::procs::descendants(pid as i32, &table)
}

/// Wait until `pid` has at least `n` descendants.
fn wait_descendants(pid: u32, n: usize) -> Vec<i32> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let d = descendants(pid);
        if d.len() >= n || Instant::now() > end {
            return d;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn in_slice(pid: i32, t: &TestRoot, slice_path: &str) -> bool {
    let want = format!("{}/{slice_path}", t.cgroup);
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|c| c.lines().any(|l| l.ends_with(&want)))
}

#[test]
fn move_tree_takes_every_descendant_and_a_single_move_says_who_stays() {
    let _suite = crate::suite::shared();
    if !prerequisites() {
        return;
    }
    let t = TestRoot::new();
    let plan = t.plan(EMBEDDED_DEFAULT);
    let p = plan.to_str().unwrap();
    assert!(t.run(&["-c", p, "apply", "-q"]).status.success());
    // sh -> (sh -> sleep), sleep: three descendants, two levels.
    let root = tree("(sleep 60 & wait) & sleep 60 & wait");
    let pid = root.0.id();
    let kids = wait_descendants(pid, 3);
    assert_eq!(kids.len(), 3, "{kids:?}");
    let pid_s = pid.to_string();

    // A single move takes the one process and says which descendants stay where.
    let o = t.run(&["-c", p, "move", "--slice", "db-helper", &pid_s]);
    assert!(o.status.success(), "{}", stderr(&o));
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
    let o = t.run(&[
        "-c",
        p,
        "move",
        "--tree",
        "--dry-run",
        "--slice",
        "db-server",
        &pid_s,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("would move {pid} and 3 descendant(s)")),
        "{}",
        stdout(&o)
    );
    assert!(!in_slice(pid as i32, &t, "db.slice/db-server.slice"));

    // --tree moves all four, threads included, and --json lists them.
    let o = t.run(&[
        "-c",
        p,
        "move",
        "--tree",
        "--json",
        "--slice",
        "db-server",
        &pid_s,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let moved: Vec<i64> = v["results"][0]["tree"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    assert_eq!(moved.len(), 4, "{v}");
    assert_eq!(moved[0], i64::from(pid));
    for k in std::iter::once(pid as i32).chain(kids) {
        assert!(in_slice(k, &t, "db.slice/db-server.slice"), "{k} not moved");
    }
    drop(root);
    let o = t.run(&["-c", p, "destroy", "--kill"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn move_tree_catches_a_tree_that_forks_while_it_moves() {
    let _suite = crate::suite::shared();
    if !prerequisites() {
        return;
    }
    let t = TestRoot::new();
    let plan = t.plan(EMBEDDED_DEFAULT);
    let p = plan.to_str().unwrap();
    assert!(t.run(&["-c", p, "apply", "-q"]).status.success());
    // A shell that starts a new sleeper every 10 ms, up to 300.
    let root = tree("i=0; while [ $i -lt 300 ]; do sleep 30 & i=$((i+1)); sleep 0.01; done; wait");
    let pid = root.0.id();
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
        // Children forked after the move are born in the slice: none is outside it.
        std::thread::sleep(Duration::from_millis(100));
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
        assert!(stderr(&o).contains("still forking"), "{}", stderr(&o));
    }
    drop(root);
    let o = t.run(&["-c", p, "destroy", "--kill"]);
    assert!(o.status.success(), "{}", stderr(&o));
}
