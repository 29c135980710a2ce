//! Escape tests, issue 25: a host path checked once and used again by name. The attacker is a
//! local user without privileges (`nobody`) who owns a directory root later hands to bulkhead
//! (a `--bind` source, a ROOTFS or its parent, a tree to import) and, from a process of their
//! own, swaps names in it for symlinks in a loop while bulkhead works. Every test checks that
//! nothing outside what root named is read, written, chowned or mounted.

use super::sandbox::{LoopDev, Scratch};
use crate::common::rootfs::busybox_root;
use crate::common::serve::{python_ok, PY};
use crate::common::{stderr, stdout};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

fn say(what: &str, result: &str) {
    println!("escape[paths]: tried {what} -> {result}");
}

fn bulkhead() -> Command {
    let mut c = bulkhead_testkit::bins::bulkhead_cmd();
    c.stdin(Stdio::null());
    c
}

fn chown_nobody(p: &Path) {
    bulkhead_testkit::ok(
        Command::new("chown")
            .args(["-R", "-h", &format!("{NOBODY}:{NOBODY}")])
            .arg(p),
    );
}

/// A directory of the attacker's (owned by nobody, 0755) under the scratch directory.
fn attackers_dir(s: &Scratch, name: &str) -> PathBuf {
    let d = s.dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown_nobody(&d);
    d
}

/// A directory only root can enter, holding `secret` (0600) with `text`.
fn root_only_dir(p: &Path, text: &str) {
    std::fs::create_dir_all(p).unwrap();
    std::fs::write(p.join("secret"), text).unwrap();
    std::fs::set_permissions(p.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// The attacker's process: python3 running as nobody, killed (by its PID) on drop.
struct Attacker {
    child: Child,
    stop: PathBuf,
}

impl Attacker {
    fn start(script: &str, args: &[&str], stop: PathBuf) -> Attacker {
        let _ = std::fs::remove_file(&stop);
        let child = Command::new("setpriv")
            .args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
                "--",
                PY,
                "-c",
                script,
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Attacker { child, stop }
    }
}

impl Drop for Attacker {
    /// Ask it to stop and let it finish its round (a swapper puts the path back as it was),
    /// for at most 30 s; then kill it.
    fn drop(&mut self) {
        let _ = std::fs::write(&self.stop, "");
        let t0 = Instant::now();
        while let Ok(None) = self.child.try_wait() {
            if t0.elapsed() > Duration::from_secs(30) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The swap: PATH becomes a symlink to TARGET and back to what it was, in a loop, as fast as
/// the attacker can (so that what bulkhead sees at one moment says nothing of the next);
/// SHARE is the part of the time it is the symlink.
const SWAPPER: &str = r#"
import os, sys, time
path, target, stop, share = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
aside = path + ".real"
hold = lambda t: time.perf_counter() + t
n = 0
while not os.path.exists(stop):
    n += 1
    try:
        os.rename(path, aside)
        os.symlink(target, path)
        end = hold(0.0002 * share)
        while time.perf_counter() < end:
            pass
        os.unlink(path)
        os.rename(aside, path)
        end = hold(0.0002 * (1 - share))
        while time.perf_counter() < end:
            pass
    except OSError:
        pass
"#;

fn swapper(path: &Path, target: &Path, share: f64) -> Attacker {
    let stop = path.with_extension("stop");
    let stop_s = stop.to_str().unwrap().to_string();
    Attacker::start(
        SWAPPER,
        &[
            path.to_str().unwrap(),
            target.to_str().unwrap(),
            &stop_s,
            &share.to_string(),
        ],
        stop,
    )
}

/// What the runs came to: each distinct first line (the sandbox's output, or bulkhead's
/// error), counted.
#[derive(Default)]
struct Tally(std::collections::BTreeMap<String, usize>);

impl Tally {
    fn add(&mut self, o: &Output) {
        let out = stdout(o);
        let err = stderr(o);
        let line = out
            .lines()
            .next()
            .filter(|l| !l.is_empty())
            .or_else(|| err.lines().next())
            .unwrap_or("(nothing)");
        let line: String = line.chars().take(110).collect();
        *self.0.entry(line).or_default() += 1;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (line, n) in &self.0 {
            write!(f, "\n    {n:3} x {line}")?;
        }
        Ok(())
    }
}

fn spawn(args: &[&str], script: &str) -> Output {
    bulkhead()
        .arg("spawn")
        .args(args)
        .args(["--", "/bin/sh", "-c", script])
        .output()
        .unwrap()
}

/// Item 1: `spawn --bind SRC`, where the attacker owns SRC and swaps it for a symlink to a
/// loop device standing in for the host's disk, or to a directory only root may enter. The
/// source is opened once, decided on by fstat (a device or not), and the sandbox gets that
/// very file: never the device, never root's directory.
#[test]
fn a_bind_source_swapped_for_a_symlink_reaches_no_device_and_no_root_file() {
    let Some((_suite, s)) = super::sandbox::scratch("bindswap", python_ok()) else {
        return;
    };
    let disk = LoopDev::new(&s.dir);
    let rootonly = s.dir.join("rootonly");
    root_only_dir(&rootonly, "ROOT-ONLY-SECRET\n");
    let home = attackers_dir(&s, "home");
    let data = home.join("data");
    std::fs::create_dir(&data).unwrap();
    chown_nobody(&data);
    let bind = format!("{}:/data", data.display());
    let probe = "head -c 15 /data 2>/dev/null; cat /data/secret 2>/dev/null; \
                 touch /data/planted 2>/dev/null; printf WRITTEN-FROM-SANDBOX > /data 2>/dev/null; echo end";
    for target in [PathBuf::from(&disk.dev), rootonly.clone()] {
        let attacker = swapper(&data, &target, 0.7);
        let mut tally = Tally::default();
        let mut leaked = Vec::new();
        for _ in 0..40 {
            let o = spawn(&["-D", s.root(), "--ephemeral", "--bind", &bind], probe);
            tally.add(&o);
            let out = stdout(&o);
            if out.contains("HOSTDISK-SECRET") || out.contains("ROOT-ONLY-SECRET") {
                leaked.push(out);
                break;
            }
        }
        drop(attacker);
        let head = std::fs::read(&disk.file).unwrap();
        assert!(
            leaked.is_empty(),
            "{}: the sandbox read what the symlink named: {leaked:?}{tally}",
            target.display()
        );
        assert!(
            head.starts_with(b"HOSTDISK-SECRET"),
            "the sandbox wrote to the loop device: {:?}",
            String::from_utf8_lossy(&head[..32])
        );
        assert!(
            !rootonly.join("planted").exists(),
            "the sandbox created a file in root's 0700 directory"
        );
        say(
            &format!(
                "--bind of a directory nobody swaps for a symlink to {} (40 starts)",
                target.display()
            ),
            &format!("nothing read or written through the link; outcomes:{tally}"),
        );
    }
}

/// Item 1, the plan's side: a `[socket.*.target] bind` source is resolved at each start of the
/// target. The attacker owns it and has put a symlink to root's directory there since the
/// plan was written: the start refuses it (the target never runs with root's files).
#[test]
fn a_targets_bind_source_swapped_for_a_symlink_is_refused_at_start() {
    let Some((_suite, s)) = super::sandbox::scratch("targetbind", true) else {
        return;
    };
    let rootonly = s.dir.join("rootonly");
    root_only_dir(&rootonly, "ROOT-ONLY-SECRET\n");
    let home = attackers_dir(&s, "home");
    let data = home.join("data");
    let out = s.dir.join("out");
    std::fs::create_dir(&out).unwrap();
    // The attacker's swap, done before the start.
    bulkhead_testkit::ok(
        Command::new("setpriv")
            .args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
                "--",
                "ln",
                "-s",
            ])
            .arg(&rootonly)
            .arg(&data),
    );
    let port = bulkhead_testkit::free_port();
    let backend = bulkhead_testkit::free_port();
    let name = format!("tb{}", std::process::id());
    let plan = s.dir.join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            r#"
[socket.{name}]
listen = ["127.0.0.1:{port}"]
backend = "127.0.0.1:{backend}"
start_timeout = "60s"
stop_timeout = "300ms"
[socket.{name}.target]
rootfs = "{root}"
bind = ["{data}:/data", "{out}:/out"]
command = ["/bin/sh", "-c", "cat /data/secret > /out/result 2>&1; touch /data/planted; sleep 600"]
"#,
            root = s.root(),
            data = data.display(),
            out = out.display(),
        ),
    )
    .unwrap();
    let mut serve = crate::common::serve::Serve::start(&plan, s.dir.join("serve.log"));
    for _ in 0..2 {
        let _ = std::net::TcpStream::connect(("127.0.0.1", port)).map(|mut c| {
            use std::io::Read;
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = c.read_to_end(&mut Vec::new());
        });
    }
    // The start refused (what must happen), or the target ran (what must not): one of them
    // before anything is judged, however slow the host (a fixed pause could judge early and
    // pass whatever happened).
    crate::common::wait_for("the start refused or the target run", || {
        serve.log().contains("symlink owned by")
            || rootonly.join("planted").exists()
            || std::fs::metadata(out.join("result")).is_ok_and(|m| m.len() > 0)
    });
    let log = serve.log();
    serve.stop();
    let result = std::fs::read_to_string(out.join("result")).unwrap_or_default();
    assert!(
        !result.contains("ROOT-ONLY-SECRET"),
        "the target read root's file through the swapped bind source\n{log}"
    );
    assert!(
        !rootonly.join("planted").exists(),
        "the target created a file in root's 0700 directory"
    );
    say(
        "a [socket.*.target] bind source swapped for a symlink to root's directory before a start",
        &format!(
            "the start refused it: {}",
            log.lines()
                .find(|l| l.contains("symlink owned by"))
                .unwrap_or("(no start)")
                .trim()
        ),
    );
}

/// Item 2: `-D ROOTFS`, where the attacker owns ROOTFS's directory and renames ROOTFS away
/// and puts a symlink to `/` in its place, in a loop. The root is mounted from the descriptor
/// `validate` opened: never the host's `/` (which `-D /` refuses), never a root-only file of
/// it.
#[test]
fn a_rootfs_renamed_and_swapped_for_a_symlink_to_slash_is_never_the_root() {
    let Some((_suite, s)) = super::sandbox::scratch("rootswap", python_ok()) else {
        return;
    };
    let marker = HostMarker::new();
    let home = attackers_dir(&s, "home");
    let root = home.join("root");
    busybox_root(&root);
    let root_s = root.to_str().unwrap().to_string();
    let read = format!("cat {} 2>&1; echo end", marker.path.display());
    // A build that resolves the name again loses about one overlay start in ten (the name is
    // the directory when checked, the link when mounted), a read-only one rarely (its bind's
    // target is the same name): 200 starts each, about 10 ms apiece. (Not --snapshot copy: a
    // build that follows the swap would copy the host's whole /.)
    const STARTS: usize = 200;
    for opts in [vec![], vec!["--ephemeral", "--snapshot", "overlay"]] {
        let attacker = swapper(&root, Path::new("/"), 0.5);
        let mut tally = Tally::default();
        let mut leaked = Vec::new();
        for _ in 0..STARTS {
            let mut args = vec!["-D", root_s.as_str()];
            args.extend(&opts);
            let o = spawn(&args, &read);
            tally.add(&o);
            let out = stdout(&o);
            if out.contains("HOST-ROOT-MARKER") {
                leaked.push(out);
                break;
            }
        }
        drop(attacker);
        assert!(
            leaked.is_empty(),
            "{opts:?}: the sandbox's root was the host's /: {leaked:?}{tally}"
        );
        say(
            &format!("-D of a root nobody swaps for a symlink to / {opts:?} ({STARTS} starts)"),
            &format!("the host's / never; outcomes:{tally}"),
        );
    }
}

/// A root-only file at the top of the host's `/`, removed on drop.
struct HostMarker {
    path: PathBuf,
}

impl HostMarker {
    fn new() -> HostMarker {
        let path = PathBuf::from(format!("/bulkhead-escape-marker-{}", std::process::id()));
        std::fs::write(&path, "HOST-ROOT-MARKER\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        HostMarker { path }
    }
}

impl Drop for HostMarker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The holder swap: once bulkhead's `.bulkhead-snapshots` appears in the attacker's directory
/// and DELAY seconds have passed, rename it away and put a symlink to a directory of the
/// attacker's in its place, where the copy's own name is a symlink to root's directory W.
const HOLDER_SWAP: &str = r#"
import os, sys, time
home, victim_parent, pidfile, delay, stop = sys.argv[1:6]
while not os.path.exists(pidfile):
    if os.path.exists(stop):
        sys.exit(0)
    time.sleep(0.0005)
pid = open(pidfile).read().strip()
fake = os.path.join(home, "fake")
os.makedirs(fake, exist_ok=True)
for seq in range(4):
    try:
        os.symlink(victim_parent, os.path.join(fake, ".#bulkhead-root-%s-%d" % (pid, seq)))
    except OSError:
        pass
holder = os.path.join(home, ".bulkhead-snapshots")
while not os.path.isdir(holder):
    if os.path.exists(stop):
        sys.exit(0)
    time.sleep(0.0002)
time.sleep(float(delay))
os.rename(holder, os.path.join(home, "aside-%s" % pid))
os.symlink(fake, holder)
"#;

/// Item 3: `--snapshot copy` of a ROOTFS whose directory the attacker owns. Mid-copy they
/// swap the snapshot holder for a symlink, so that a copy by path lands in root's 0700
/// directory W: chown of W/victim to nobody, chmod 0777, W widened to 0755. bulkhead keeps no
/// copy beside a tree in another user's directory (refused, naming it), and copies relative
/// to the holder it made and checked.
#[test]
fn a_snapshot_holder_swapped_mid_copy_changes_nothing_outside_it() {
    let Some((_suite, s)) = super::sandbox::scratch("holderswap", python_ok()) else {
        return;
    };
    let w = s.dir.join("w");
    std::fs::create_dir_all(w.join("victim")).unwrap();
    std::fs::set_permissions(w.join("victim"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o700)).unwrap();
    let home = attackers_dir(&s, "home");
    // The attacker's root: a directory `victim` (0777) with many files, so the copy spends its
    // time inside it, after making it and before setting its owner and mode.
    let root = home.join("root");
    std::fs::create_dir_all(root.join("victim")).unwrap();
    for i in 0..20000 {
        std::fs::write(root.join("victim").join(format!("f{i}")), "").unwrap();
    }
    std::fs::set_permissions(root.join("victim"), std::fs::Permissions::from_mode(0o777)).unwrap();
    chown_nobody(&root);
    let check = |round: &str| {
        let md = std::fs::symlink_metadata(&w).unwrap();
        let v = std::fs::symlink_metadata(w.join("victim")).unwrap();
        let inside = std::fs::read_dir(w.join("victim")).unwrap().count();
        let fine = (md.uid(), md.mode() & 0o7777) == (0, 0o700)
            && (v.uid(), v.mode() & 0o7777) == (0, 0o700)
            && inside == 0;
        (
            fine,
            format!(
                "{round}: W uid {} mode {:o}, W/victim uid {} mode {:o}, {inside} files in it",
                md.uid(),
                md.mode() & 0o7777,
                v.uid(),
                v.mode() & 0o7777
            ),
        )
    };
    let mut messages = Vec::new();
    for delay in ["0.02", "0.05", "0.1", "0.2"] {
        let pidfile = s.dir.join(format!("pid-{delay}"));
        let stop = s.dir.join(format!("stop-{delay}"));
        let attacker = Attacker::start(
            HOLDER_SWAP,
            &[
                home.to_str().unwrap(),
                w.to_str().unwrap(),
                pidfile.to_str().unwrap(),
                delay,
                stop.to_str().unwrap(),
            ],
            stop.clone(),
        );
        let child = bulkhead()
            .args(["spawn", "-D", root.to_str().unwrap(), "--ephemeral"])
            .args(["--snapshot", "copy", "--", "/bin/true"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Whole when it appears (the attacker reads it as soon as it exists).
        let tmp = pidfile.with_extension("tmp");
        std::fs::write(&tmp, child.id().to_string()).unwrap();
        std::fs::rename(&tmp, &pidfile).unwrap();
        let o = child.wait_with_output().unwrap();
        drop(attacker);
        messages.push(stderr(&o));
        let (fine, state) = check(&format!("holder swapped {delay} s after it appeared"));
        assert!(fine, "{state}\nbulkhead said: {}", stderr(&o));
        // Put the attacker's directory back as it was for the next round.
        let _ = std::fs::remove_file(home.join(".bulkhead-snapshots"));
        let _ = std::fs::remove_dir_all(home.join("fake"));
    }
    let refusal = messages
        .iter()
        .find(|m| m.contains("only where nobody but root can change that directory"))
        .map(|m| m.lines().next().unwrap_or("").to_string());
    assert!(
        refusal.is_some(),
        "expected the copy to be refused beside another user's directory: {messages:?}"
    );
    say(
        "--snapshot copy of a root in nobody's directory, the holder swapped mid-copy for a symlink toward root's 0700 directory (4 rounds)",
        &format!(
            "root's directory unchanged; {}",
            refusal.unwrap_or_default()
        ),
    );
}

/// Item 4: a tree root copies (`image import`, and a `--snapshot copy` of a ROOTFS the
/// attacker owns in a directory of root's) whose subdirectory the attacker swaps for a symlink
/// to root's 0700 directory while it is copied. The copy walks by descriptors: the link is
/// copied as a link, root's file never.
#[test]
fn a_source_directory_swapped_for_a_symlink_is_never_followed_by_a_copy() {
    let Some((_suite, s)) = super::sandbox::scratch("copyswap", python_ok()) else {
        return;
    };
    let rootonly = s.dir.join("rootonly");
    root_only_dir(&rootonly, "ROOT-ONLY-SECRET\n");
    let images = s.dir.join("images");
    // The attacker's tree, in a directory of root's (/var/tmp/...): many files at the top, so
    // that the copy looks at `sub` long before it goes into it.
    let tree = s.dir.join("usertree");
    busybox_root(&tree);
    for i in 0..2000 {
        std::fs::write(tree.join(format!("f{i}")), "x").unwrap();
    }
    let sub = tree.join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("own"), "mine\n").unwrap();
    chown_nobody(&tree);
    // A copy that follows the link loses to the attacker when the stat sees the directory and
    // the walk into it the link; many copies fail sooner (the name is missing mid-swap), so
    // each side tries for a fixed time rather than a fixed count: up to 9 s and 60 copies
    // (a copy that completes takes about 1 s here; one that fails, a few ms).
    const ROUNDS: usize = 60;
    const FOR: Duration = Duration::from_secs(9);
    let attacker = swapper(&sub, &rootonly, 0.5);
    let t0 = Instant::now();
    let mut leaked = Vec::new();
    let mut imports = 0;
    let mut i = 0;
    while i < ROUNDS && t0.elapsed() < FOR {
        i += 1;
        let o = bulkhead()
            .env("BULKHEAD_IMAGES_DIR", &images)
            .env("BULKHEAD_STORE_RECORD", s.dir.join("store.toml"))
            .args([
                "image",
                "import",
                tree.to_str().unwrap(),
                &format!("img{i}"),
            ])
            .output()
            .unwrap();
        if !o.status.success() {
            continue;
        }
        imports += 1;
        // A copied symlink would name root's directory on the host too: only a directory
        // of the image holding the secret counts (a link is what the tree had).
        let got = images.join(format!("img{i}/sub"));
        if std::fs::symlink_metadata(&got).is_ok_and(|m| m.is_dir())
            && std::fs::read_to_string(got.join("secret")).is_ok_and(|t| t.contains("ROOT-ONLY"))
        {
            leaked.push(format!("import {i}: {}", got.display()));
            break;
        }
        let _ = bulkhead::sys::tree::remove_tree(&images.join(format!("img{i}")));
    }
    let mut snapshots = 0;
    let t1 = Instant::now();
    for _ in 0..ROUNDS {
        if t1.elapsed() > FOR {
            break;
        }
        let o = spawn(
            &[
                "-D",
                tree.to_str().unwrap(),
                "--ephemeral",
                "--snapshot",
                "copy",
            ],
            "cat /sub/secret 2>/dev/null; echo end",
        );
        if stdout(&o).contains("end") {
            snapshots += 1;
        }
        if stdout(&o).contains("ROOT-ONLY-SECRET") {
            leaked.push(format!("snapshot: {}", stdout(&o)));
            break;
        }
    }
    drop(attacker);
    assert!(
        leaked.is_empty(),
        "a copy followed the swapped symlink into root's directory: {leaked:?}"
    );
    say(
        "image import and --snapshot copy of nobody's tree whose subdirectory is swapped for a symlink to root's 0700 directory",
        &format!(
            "{imports} of {i} imports and {snapshots} sandboxes in {:.1} s: root's file never copied",
            t0.elapsed().as_secs_f64()
        ),
    );
}
