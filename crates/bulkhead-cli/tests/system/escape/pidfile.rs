//! Escape tests: a service's pidfile on a host without systemd (issue 28). `bulkhead place`
//! (root) moves the process a pidfile names, with its tree, into the service's slice. The
//! pidfile's directory belongs to the service's user (PostgreSQL's postmaster.pid lives in
//! its data directory): that user must not get root to move someone else's processes, by
//! writing another user's PID into its own pidfile, or by putting at the pidfile's name a
//! symlink or a hard link to root's pidfile (which names root's process and is owned by root).

use crate::common::{stderr, stdout};
use crate::place::{applied, in_slice, tree};
use bulkhead::plan::EMBEDDED_DEFAULT;
use bulkhead_testkit::assert_has;
use std::path::Path;

/// `place --once` by the bulkhead under test (an older build with BULKHEAD_UNDER_TEST, to
/// show it falling to the attack), on `t`'s cgroup root.
fn place_once(t: &crate::common::TestRoot, plan: &str) -> std::process::Output {
    bulkhead_testkit::bins::bulkhead_cmd()
        .env("BULKHEAD_CGROUP_ROOT", &t.cgroup)
        .args(["-c", plan, "--backend", "cgroupfs", "place", "--once"])
        .output()
        .expect("run bulkhead")
}

/// The default plan with a service `svc` placed by `pidfile` in db-server.
fn plan_text(pidfile: &Path) -> String {
    EMBEDDED_DEFAULT.replace(
        "[slice.db-server]\n",
        &format!(
            "[slice.db-server]\nservices = [{{ name = \"svc\", pidfile = \"{}\" }}]\n",
            pidfile.display()
        ),
    )
}

/// Without systemd a service is placed by its pidfile, which may name only a process of the
/// file's owner: a pidfile another user can write does not get root to move root's processes.
#[test]
fn a_pidfile_names_only_its_owners_processes() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let dir = bulkhead_testkit::fs::TempDir::new("place-pidfile");
    let pidfile = dir.path().join("svc.pid");
    let Some((t, plan)) = applied(&EMBEDDED_DEFAULT.replace(
        "[slice.db-server]\n",
        &format!(
            "[slice.db-server]\nservices = [{{ name = \"svc\", pidfile = \"{}\" }}]\n",
            pidfile.display()
        ),
    )) else {
        return;
    };
    let p = plan.to_str().unwrap();
    let victim = tree("sleep 60");
    let pid = victim.id() as i32;
    std::fs::write(&pidfile, format!("{pid}\n")).unwrap();
    // Owned by nobody, naming root's process: refused, nothing moves.
    std::os::unix::fs::chown(&pidfile, Some(65534), Some(65534)).unwrap();
    let o = place_once(&t, p);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_has(&stderr(&o), "may name only its owner's processes");
    assert!(!in_slice(pid, &t, "db.slice/db-server.slice"));
    // Root's pidfile may name it: the process moves, with its tree.
    std::os::unix::fs::chown(&pidfile, Some(0), Some(0)).unwrap();
    let o = place_once(&t, p);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_has(&stdout(&o), "(service svc.service)");
    assert!(in_slice(pid, &t, "db.slice/db-server.slice"));
    drop(victim);
    t.ok(&["-c", p, "destroy", "--kill"]);
}

/// The service's user owns the directory of the pidfile and puts there, at the pidfile's
/// name, another name for root's own pidfile: a symlink (its own), or a hard link (which
/// fs.protected_hardlinks=0 allows; root makes it here, as such a kernel would let the user).
/// Root's pidfile names root's process and is owned by root, so reading through either name
/// used to move root's process. Now: refused, saying why, and nothing moves.
#[test]
fn another_name_for_roots_pidfile_is_refused() {
    let _suite = crate::suite::shared();
    let dir = bulkhead_testkit::fs::TempDir::new("place-pidname");
    let user_dir = dir.path().join("svc-data");
    std::fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(65534), Some(65534)).unwrap();
    let pidfile = user_dir.join("svc.pid");
    let Some((t, plan)) = applied(&plan_text(&pidfile)) else {
        return;
    };
    let p = plan.to_str().unwrap();
    let victim = tree("sleep 60");
    let pid = victim.id() as i32;
    let roots = dir.path().join("root-only");
    std::fs::create_dir(&roots).unwrap();
    let roots_pidfile = roots.join("daemon.pid");
    std::fs::write(&roots_pidfile, format!("{pid}\n")).unwrap();
    let attempts: [(&str, &dyn Fn()); 2] = [
        ("a hard link", &|| {
            std::fs::hard_link(&roots_pidfile, &pidfile).unwrap()
        }),
        ("a symlink the user owns", &|| {
            std::os::unix::fs::symlink(&roots_pidfile, &pidfile).unwrap();
            std::os::unix::fs::lchown(&pidfile, Some(65534), Some(65534)).unwrap();
        }),
    ];
    for (what, plant) in attempts {
        let _ = std::fs::remove_file(&pidfile);
        plant();
        let o = place_once(&t, p);
        eprintln!(
            "{what}: exit {:?}: {}{}",
            o.status.code(),
            stdout(&o),
            stderr(&o)
        );
        assert!(
            !in_slice(pid, &t, "db.slice/db-server.slice"),
            "{what}: root's process was moved into db-server.slice"
        );
        assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("cannot be used") && stderr(&o).contains("svc.pid"),
            "{what}: {}",
            stderr(&o)
        );
    }
    drop(victim);
    t.ok(&["-c", p, "destroy", "--kill"]);
}

/// Issue 40 #3, a stale pidfile: root's pidfile was written for a process that has exited;
/// its PID now names another process (a user forks until one gets it). That process started
/// after the file was written: ignored, said once, nothing moves.
#[test]
fn a_stale_pidfile_names_no_one() {
    let _suite = crate::suite::shared();
    let dir = bulkhead_testkit::fs::TempDir::new("place-stale");
    let pidfile = dir.path().join("svc.pid");
    let Some((t, plan)) = applied(&plan_text(&pidfile)) else {
        return;
    };
    let p = plan.to_str().unwrap();
    let newcomer = tree("sleep 60");
    let pid = newcomer.id() as i32;
    std::fs::write(&pidfile, format!("{pid}\n")).unwrap();
    // Written an hour ago, for the process that had the PID then.
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&pidfile)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    let o = place_once(&t, p);
    eprintln!("exit {:?}: {}{}", o.status.code(), stdout(&o), stderr(&o));
    assert!(
        !in_slice(pid, &t, "db.slice/db-server.slice"),
        "the process that took the stale pidfile's PID was moved into db-server.slice"
    );
    assert_has(&stderr(&o), "stale");
    drop(newcomer);
    t.ok(&["-c", p, "destroy", "--kill"]);
}

/// Issue 40 #3, a planted pidfile: in a directory others can write in (sticky, shared) a
/// user puts the service's pidfile while the service is down, naming its own process:
/// refused, saying why.
#[test]
fn a_pidfile_in_a_shared_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let _suite = crate::suite::shared();
    let dir = bulkhead_testkit::fs::TempDir::new("place-shared");
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let pidfile = shared.join("svc.pid");
    let Some((t, plan)) = applied(&plan_text(&pidfile)) else {
        return;
    };
    let p = plan.to_str().unwrap();
    // The user's own process and its own pidfile (as if written by nobody while svc is down).
    let mine = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sleep",
            "60",
        ])
        .spawn()
        .unwrap();
    let pid = mine.id() as i32;
    std::fs::write(&pidfile, format!("{pid}\n")).unwrap();
    std::os::unix::fs::chown(&pidfile, Some(65534), Some(65534)).unwrap();
    let o = place_once(&t, p);
    eprintln!("exit {:?}: {}{}", o.status.code(), stdout(&o), stderr(&o));
    assert!(
        !in_slice(pid, &t, "db.slice/db-server.slice"),
        "a planted pidfile moved the user's process into db-server.slice"
    );
    assert_has(&stderr(&o), "others can write");
    let mut mine = mine;
    let _ = mine.kill();
    let _ = mine.wait();
    t.ok(&["-c", p, "destroy", "--kill"]);
}
