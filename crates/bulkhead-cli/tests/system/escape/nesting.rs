//! Escape tests: a booted container's cgroups (issue 40, item 9). PID 1 of a booted container
//! (a busybox script as the root's init) may make cgroups below its own; the attacker nests
//! them as deep and as many as it can, past PATH_MAX, so that neither the cleanup at its exit
//! nor the next boot, both of which removed trees by path, can remove them.
//!
//! What holds now: on cgroup2 the container's cgroup (`bulkhead-boot-PID/payload`, the root
//! of its cgroup namespace) sits below bulkhead's `bulkhead-boot-PID`, whose
//! `cgroup.max.depth` and `cgroup.max.descendants` allow 16 levels and 4096 cgroups below
//! the container's own; raising the files of its own cgroup (which a container without a user
//! namespace can write) changes nothing. v1 hierarchies (name=systemd) have no such files:
//! there it nests 1,500 deep, and the cleanup still removes it all, through directory
//! descriptors. What cannot be removed is named on stderr, and the next boot removes it.

use super::sandbox::Scratch;
use crate::boot::{text, Booted};
use bulkhead_sys::bootcg::{self, Kind};
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The limits bulkhead sets (crates/bulkhead/src/sandbox/boot.rs, `LIMITS`).
const DEPTH: usize = 16;
const DESCENDANTS: usize = 4096;

fn say(what: &str, result: &str) {
    println!("escape[nesting]: tried {what} -> {result}");
}

/// The attacker, as the container's init: try to lift its own cgroup's limits, then nest
/// cgroup2 cgroups with 255-byte names as deep as it may (16 of them pass PATH_MAX), make as
/// many as it may beside them, and nest name=systemd (v1) ones 1,500 deep (`xx/xx/...`: past
/// PATH_MAX too). `cd -P` into a relative name works at any depth. Then it says how far it
/// got, touches /ctl/ready and waits (at most a minute) for /ctl/go before it exits 7. With
/// /ctl/quick it exits 0 at once (a second boot of the same root).
fn init_script() -> String {
    let long = "n".repeat(255);
    format!(
        r#"#!/bin/sh
[ -e /ctl/quick ] && exit 0
if [ -f /sys/fs/cgroup/cgroup.procs ]; then u=/sys/fs/cgroup; else u=/sys/fs/cgroup/unified; fi
if [ -f $u/cgroup.procs ]; then
  echo max > $u/cgroup.max.depth 2>/dev/null && echo "raised cgroup.max.depth of its own cgroup"
  echo max > $u/cgroup.max.descendants 2>/dev/null && echo "raised cgroup.max.descendants of its own cgroup"
  cd -P $u && n=0 && while [ $n -lt 40 ] && mkdir {long} 2>/dev/null && cd -P {long}; do n=$((n+1)); done
  echo "unified: nested $n deep"
  cd -P $u && i=0 && while [ $i -lt 5000 ] && mkdir w$i 2>/dev/null; do i=$((i+1)); done
  echo "unified: made $i beside"
fi
if [ -f /sys/fs/cgroup/systemd/cgroup.procs ]; then
  cd -P /sys/fs/cgroup/systemd && n=0 && while [ $n -lt 1500 ] && mkdir xx 2>/dev/null && cd -P xx; do n=$((n+1)); done
  echo "systemd: nested $n deep"
fi
cd /
touch /ctl/ready
i=0; while [ ! -e /ctl/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
exit 7
"#
    )
}

/// A busybox root with the attacker as its init, and the control directory bound at /ctl.
struct Attack {
    s: Scratch,
    ctl: PathBuf,
    log: PathBuf,
}

impl Attack {
    fn new(tag: &str) -> Attack {
        let s = Scratch::new(tag);
        let ctl = s.dir.join("ctl");
        std::fs::create_dir_all(&ctl).unwrap();
        std::fs::create_dir_all(s.root.join("ctl")).unwrap();
        std::fs::create_dir_all(s.root.join("run")).unwrap();
        let init = s.root.join("bin/init");
        let _ = std::fs::remove_file(&init);
        std::fs::write(&init, init_script()).unwrap();
        std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).unwrap();
        let log = s.dir.join("boot.log");
        Attack { s, ctl, log }
    }

    /// `spawn --boot` of the root, its output into the log.
    fn boot(&self, opts: &[&str]) -> Booted {
        let f = std::fs::File::create(&self.log).unwrap();
        bulkhead_testkit::bins::bulkhead_cmd()
            .args(["spawn", "--boot", "-x", "--timeout", "300s"])
            .args(opts)
            .args(["--bind", &format!("{}:/ctl", self.ctl.display())])
            .args(["-D", self.s.root()])
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .map(Booted)
            .expect("run bulkhead")
    }

    /// Wait until the init has made its cgroups (or bulkhead has exited): the log so far.
    fn wait_ready(&self, b: &mut Booted) -> String {
        let end = Instant::now() + Duration::from_secs(120);
        while !self.ctl.join("ready").exists() {
            if b.0.try_wait().unwrap().is_some() || Instant::now() > end {
                panic!("the init never got ready:\n{}", text(&self.log));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        text(&self.log)
    }

    /// Let the init exit; bulkhead's exit code and its output.
    fn finish(&self, b: &mut Booted) -> (i32, String) {
        std::fs::write(self.ctl.join("go"), "").unwrap();
        let end = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(st) = b.0.try_wait().unwrap() {
                return (st.code().unwrap_or(-1), text(&self.log));
            }
            assert!(
                Instant::now() < end,
                "bulkhead did not exit:\n{}",
                text(&self.log)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The container's outer cgroups for bulkhead's `pid`, in the hierarchies an init writes to
/// (this process's own cgroup there is bulkhead's). Removed, through descriptors, on drop: a
/// build that leaves them (the one before the fix) leaves nothing on the host.
struct Tops(Vec<(Kind, PathBuf)>);

impl Tops {
    fn of(pid: u32) -> Tops {
        let hier = bootcg::hierarchies().unwrap();
        Tops(
            hier.iter()
                .filter(|h| h.writable())
                .map(|h| (h.kind.clone(), h.own.join(format!("bulkhead-boot-{pid}"))))
                .collect(),
        )
    }

    fn get(&self, kind: Kind) -> Option<&Path> {
        self.0
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, p)| p.as_path())
    }

    fn left(&self) -> Vec<&Path> {
        self.0
            .iter()
            .map(|(_, p)| p.as_path())
            .filter(|p| p.symlink_metadata().is_ok())
            .collect()
    }
}

impl Drop for Tops {
    fn drop(&mut self) {
        for (_, top) in &self.0 {
            if top.symlink_metadata().is_err() {
                continue;
            }
            let parent = open(top.parent().unwrap());
            if let Err(left) =
                bootcg::tree::remove_tree_at(parent.as_fd(), top.file_name().unwrap(), top)
            {
                let left: Vec<String> = left.iter().map(ToString::to_string).collect();
                eprintln!(
                    "escape[nesting]: could not remove {}: {left:?}",
                    top.display()
                );
            }
        }
    }
}

fn open(p: &Path) -> OwnedFd {
    nix::fcntl::open(
        p,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
}

fn open_at(dir: &OwnedFd, name: &str) -> std::io::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

/// The subdirectories of the directory open as `dir` (listed through its descriptor).
fn subdirs(dir: &OwnedFd) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// How deep the deepest cgroup below `dir` is, and how many there are, walked by descriptors.
fn measure(dir: &OwnedFd) -> (usize, usize) {
    let (mut depth, mut count) = (0, 0);
    for name in subdirs(dir) {
        let Ok(fd) = open_at(dir, &name) else {
            continue;
        };
        let (d, c) = measure(&fd);
        depth = depth.max(d + 1);
        count += c + 1;
    }
    (depth, count)
}

/// The root of the container's cgroup namespace below `top`: `payload` where bulkhead makes
/// one, else `top` itself (the build before the fix).
fn container_root(top: &Path) -> OwnedFd {
    let t = open(top);
    open_at(&t, "payload").unwrap_or(t)
}

fn warned_about(out: &str, top: &Path) -> Vec<String> {
    let t = top.display().to_string();
    out.lines()
        .filter(|l| l.contains("could not remove") && l.contains(&t))
        .map(|l| l.chars().take(400).collect())
        .collect()
}

#[test]
fn a_booted_container_nests_cgroups_within_its_limits_and_the_cleanup_removes_them() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let a = Attack::new("nesting");
    let mut b = a.boot(&[]);
    let tops = Tops::of(b.0.id());
    let said = a.wait_ready(&mut b);
    let mut failed = Vec::new();
    let unified = tops.get(Kind::Unified).map(|top| {
        let (depth, count) = measure(&container_root(top));
        say(
            "nesting cgroup2 cgroups with 255-byte names 40 deep and making 5,000 beside them, after writing max to its own cgroup.max.depth and cgroup.max.descendants",
            &format!(
                "{depth} levels and {count} cgroups below the container's own ({})",
                said.lines()
                    .filter(|l| l.starts_with("unified:") || l.starts_with("raised"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        );
        if depth > DEPTH {
            failed.push(format!(
                "cgroup2: nested {depth} levels below the container's cgroup (limit {DEPTH})"
            ));
        }
        if count > DESCENDANTS {
            failed.push(format!(
                "cgroup2: {count} cgroups below the container's cgroup (limit {DESCENDANTS})"
            ));
        }
        (depth, count)
    });
    assert!(
        unified.is_some() || tops.get(Kind::Systemd).is_some(),
        "no cgroup2 or name=systemd hierarchy here"
    );
    if let Some(line) = said.lines().find(|l| l.starts_with("systemd: nested")) {
        say(
            "nesting name=systemd (v1, no limits there) cgroups 1,500 deep",
            line,
        );
    }
    let (code, out) = a.finish(&mut b);
    if code != 7 {
        failed.push(format!("exit code {code}, not the init's 7"));
    }
    for top in tops.left() {
        failed.push(format!(
            "{} is left after the container exited",
            top.display()
        ));
    }
    for (_, top) in &tops.0 {
        failed.extend(warned_about(&out, top));
    }
    say(
        "leaving its cgroups, past PATH_MAX, to the cleanup at its exit",
        &match tops.left().as_slice() {
            [] => "all removed".to_string(),
            left => format!("left: {left:?}"),
        },
    );
    assert!(failed.is_empty(), "{}\n{out}", failed.join("\n"));
}

/// A process outside the container (this test's `sleep`) moved into the deepest cgroup of
/// the container's tree keeps that cgroup, and those above it, from being removed: the
/// cleanup says so on stderr, naming it, and once the process is gone the next boot (from the
/// same cgroup) removes the tree.
#[test]
fn a_cgroup_the_cleanup_cannot_remove_is_named_and_the_next_boot_removes_it() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let a = Attack::new("nesting-left");
    let mut b = a.boot(&[]);
    let tops = Tops::of(b.0.id());
    a.wait_ready(&mut b);
    // The deepest cgroup of the longest chain: name=systemd's 1,500 levels, else cgroup2's 16.
    let (_, top) = tops
        .0
        .iter()
        .find(|(k, _)| *k == Kind::Systemd)
        .or_else(|| tops.0.first())
        .expect("a writable hierarchy");
    let mut dir = container_root(top);
    let mut depth = 0;
    loop {
        let next = subdirs(&dir)
            .into_iter()
            .find(|n| n.starts_with("xx") || n.starts_with('n'));
        let Some(next) = next.and_then(|n| open_at(&dir, &n).ok()) else {
            break;
        };
        dir = next;
        depth += 1;
    }
    assert!(
        depth >= DEPTH,
        "only {depth} levels below {}",
        top.display()
    );
    let mut sleeper = Command::new("sleep").arg("600").spawn().unwrap();
    let procs = openat(
        &dir,
        "cgroup.procs",
        OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    std::fs::File::from(procs)
        .write_all(sleeper.id().to_string().as_bytes())
        .unwrap();
    drop(dir);
    let (code, out) = a.finish(&mut b);
    let warned = warned_about(&out, top);
    say(
        &format!("keeping a process in its cgroup {depth} levels below the top, past PATH_MAX"),
        &match warned.first() {
            Some(w) => format!("named at exit: {w}"),
            None => "nothing said".to_string(),
        },
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let mut failed = Vec::new();
    if code != 7 {
        failed.push(format!("exit code {code}, not the init's 7"));
    }
    if warned.is_empty() {
        failed.push(format!(
            "nothing on stderr names what stayed of {}",
            top.display()
        ));
    }
    // The next boot from the same cgroup removes what the first one left.
    std::fs::write(a.ctl.join("quick"), "").unwrap();
    let mut again = a.boot(&["-v"]);
    let (code2, out2) = a.finish(&mut again);
    let left = tops.left();
    say(
        "leaving that tree to the next boot",
        &match left.as_slice() {
            [] => "removed".to_string(),
            l => format!("still there: {l:?}"),
        },
    );
    if code2 != 0 {
        failed.push(format!("the second boot exited {code2}:\n{out2}"));
    }
    for top in left {
        failed.push(format!("{} is left after the next boot", top.display()));
    }
    assert!(failed.is_empty(), "{}\n{out}\n{out2}", failed.join("\n"));
}
