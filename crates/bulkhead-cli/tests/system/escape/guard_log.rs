//! Escape tests: the guard's `--log FILE` (issue 25, minor). A local user owns the directory
//! the log goes to and plants a symlink at its name: root must not create or append to the
//! file the link points at (an empty file is enough to do harm: `/etc/nologin` stops every
//! login but root's).

use super::guarded::Guarded;
use crate::common::serve::{as_nobody, Scratch};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_log_path_swapped_for_a_symlink_is_not_followed() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let g = Guarded::new("calibration = \"1s\"\n");
    let cmd = || g.cmd();

    // Root's own directory (0700) where the attacker wants a file to appear.
    let s = Scratch::new("escape");
    let victim_dir = s.dir.join("root-only");
    std::fs::create_dir(&victim_dir).unwrap();
    std::fs::set_permissions(&victim_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = victim_dir.join("nologin");
    // The attacker's directory, handed to root as the log's place; the attacker's link in it.
    let theirs = s.dir.join("logs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    // Two plants: the log's own name as a link to the victim, and a directory on its way as
    // a link to root's directory (O_NOFOLLOW on the last name alone does not see that one).
    let plants = [
        (
            theirs.join("guard.log"),
            victim.clone(),
            theirs.join("guard.log"),
        ),
        (
            theirs.join("d"),
            victim_dir.clone(),
            theirs.join("d").join("nologin2"),
        ),
    ];
    for (link, to, log) in plants {
        let planted = as_nobody("ln")
            .arg("-s")
            .arg(&to)
            .arg(&link)
            .status()
            .unwrap();
        assert!(planted.success(), "nobody could not plant the link");
        let made_at = victim_dir.join(log.file_name().unwrap());
        attempt(&cmd, &log, &made_at);
    }
}

fn attempt(cmd: &dyn Fn() -> Command, log: &Path, victim: &Path) {
    let mut guard = cmd()
        .arg("guard")
        .arg("--log")
        .arg(log)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It refuses the log as it starts: it exits by itself (a guard that took the log runs
    // on; after 30 s it is taken for one).
    let t0 = Instant::now();
    let mut exited = None;
    while t0.elapsed() < Duration::from_secs(30) {
        if let Some(st) = guard.try_wait().unwrap() {
            exited = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if exited.is_none() {
        let _ = bulkhead::sys::process::kill(guard.id() as i32, libc::SIGTERM);
        let t1 = Instant::now();
        while guard.try_wait().ok().flatten().is_none() && t1.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = guard.kill();
    }
    let out = guard.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let _ = cmd().args(["guard", "--release", "-q"]).output();
    let made = victim.exists();
    println!(
        "escape[guard-log]: tried --log {} with a symlink owned by UID 65534 on its way, into root's 0700 directory -> {}; the guard {}",
        log.display(),
        if made { "root created the file through it" } else { "nothing created" },
        match exited {
            Some(st) => format!("stopped at once ({st}): {}", err.lines().next().unwrap_or("")),
            None => "kept running".into(),
        }
    );
    assert!(
        !made,
        "root created {} through the attacker's link",
        victim.display()
    );
    assert!(
        exited.is_some_and(|s| !s.success()) && err.contains(&log.display().to_string()),
        "the guard must refuse the log and name it: {err}"
    );
}
