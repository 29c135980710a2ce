//! Escape tests: sandboxes and images. A hostile image (device nodes, setuid binaries,
//! symlinked /etc files), a hostile program in the sandbox (TIOCSTI, mounts, races with the
//! removal of its snapshot) and the hosts' mount propagation types.

use crate::common::rootfs::busybox_root;
use crate::common::{stderr, stdout};
use bulkhead_testkit::assert_has;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static N: AtomicUsize = AtomicUsize::new(0);

fn say(what: &str, result: &str) {
    println!("escape[sandbox]: tried {what} -> {result}");
}

/// A scratch directory under /var/tmp (a world-traversable parent, as a user's ROOTFS would
/// have), with a busybox root at `root`; removed on drop.
pub(crate) struct Scratch {
    pub(crate) dir: PathBuf,
    pub(crate) root: PathBuf,
}

impl Scratch {
    pub(crate) fn new(tag: &str) -> Scratch {
        let dir = PathBuf::from(format!(
            "/var/tmp/bulkhead-escape-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.join("root");
        busybox_root(&root);
        Scratch { dir, root }
    }
    pub(crate) fn root(&self) -> &str {
        self.root.to_str().unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = bulkhead::sys::tree::remove_tree(&self.dir);
    }
}

/// A test's start: [`crate::suite::cgroups_and`] and a scratch directory with a busybox root.
pub(crate) fn scratch(tag: &str, more: bool) -> Option<(crate::suite::Guard, Scratch)> {
    crate::suite::cgroups_and(more).map(|g| (g, Scratch::new(tag)))
}

fn bulkhead() -> Command {
    bulkhead_testkit::bins::bulkhead_cmd()
}

fn spawn(root: &str, opts: &[&str], script: &str) -> Output {
    bulkhead()
        .args(["spawn", "-D", root])
        .args(opts)
        .args(["--", "/bin/sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("run bulkhead")
}

/// A shell command run by a local user without privileges (nobody). setpriv itself execs with
/// root's capabilities still in effect, so the command runs from a shell it starts.
fn as_nobody(script: &str) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["/bin/sh", "-c", script])
        .output()
        .unwrap()
}

/// A loop device over a file that starts with a marker, detached on drop.
pub(crate) struct LoopDev {
    pub(crate) dev: String,
    pub(crate) file: PathBuf,
}

impl LoopDev {
    pub(crate) fn new(dir: &Path) -> LoopDev {
        LoopDev::sized(dir, 1 << 20)
    }

    /// A loop device of `bytes` (the marker first, then zeros).
    pub(crate) fn sized(dir: &Path, bytes: usize) -> LoopDev {
        let file = dir.join("disk.img");
        let mut data = b"HOSTDISK-SECRET\n".to_vec();
        data.resize(bytes, 0);
        std::fs::write(&file, data).unwrap();
        let o = bulkhead_testkit::ok(Command::new("losetup").args(["-f", "--show"]).arg(&file));
        LoopDev {
            dev: stdout(&o).trim().to_string(),
            file,
        }
    }
    fn rdev(&self) -> (u64, u64) {
        let rdev = std::fs::metadata(&self.dev).unwrap().rdev();
        // The kernel's encoding of a dev_t (glibc's gnu_dev_major/minor).
        let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
        let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
        (major, minor)
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Class 1: a block device node that an image carries (made with mknod, kept by import and
/// by the copy snapshot) reaches no host device: every mount made from the image or a bind
/// is nodev, and the sandbox cannot make nodes (no CAP_MKNOD).
#[test]
fn device_nodes_from_an_image_reach_no_host_device() {
    let Some((_suite, s)) = scratch("dev", true) else {
        return;
    };
    let disk = LoopDev::new(&s.dir);
    let (major, minor) = disk.rdev();
    // The hostile image: a node of the host's loop device, at its top and in a directory
    // that is bound in.
    let node = s.root.join("hostdisk");
    let bound = s.dir.join("bound");
    std::fs::create_dir_all(&bound).unwrap();
    for n in [node.clone(), bound.join("hostdisk")] {
        bulkhead_testkit::ok(Command::new("mknod").arg(&n).args([
            "b",
            &major.to_string(),
            &minor.to_string(),
        ]));
    }
    let bind = format!("{}:/var/tmp", bound.display());
    let read = "head -c 15 /hostdisk 2>&1; head -c 15 /var/tmp/hostdisk 2>&1; mknod /tmp/d b 7 0 2>&1; echo; echo end";
    for opts in [
        vec!["--bind", bind.as_str()],
        vec!["--ephemeral", "--snapshot", "copy", "--bind", bind.as_str()],
        vec![
            "--ephemeral",
            "--snapshot",
            "overlay",
            "--bind",
            bind.as_str(),
        ],
        vec![
            "--ephemeral",
            "--snapshot",
            "copy",
            "--private-users",
            "auto",
            "--bind",
            bind.as_str(),
        ],
        vec!["--private-users", "auto", "--bind", bind.as_str()],
    ] {
        let o = spawn(s.root(), &opts, read);
        let out = stdout(&o);
        assert!(out.contains("end"), "{opts:?}: {out} {}", stderr(&o));
        assert!(
            !out.contains("HOSTDISK-SECRET"),
            "{opts:?}: the sandbox read the host's disk: {out}"
        );
        assert!(
            out.matches("Permission denied").count() >= 2
                || out.matches("Operation not permitted").count() >= 2,
            "{opts:?}: {out}"
        );
        say(
            &format!("reading a host loop device through image nodes with {opts:?}"),
            "EACCES/EPERM, no byte read",
        );
    }
}

/// Class 2: the setuid bit as a way to root for host users. The copy a sandbox writes (where
/// it can chmod 4755 a root-owned binary) lives in a 0700 directory of root's, and the images
/// directory is 0700.
#[test]
fn setuid_binaries_in_snapshots_and_images_are_out_of_host_users_reach() {
    let Some((_suite, s)) = scratch("suid", true) else {
        return;
    };
    let ready = s.dir.join("ready");
    let started = Instant::now();
    let mut child = bulkhead()
        .args([
            "spawn",
            "-D",
            s.root(),
            "--ephemeral",
            "--snapshot",
            "copy",
            "--bind",
            &format!("{}:/out", s.dir.display()),
            "--",
            "/bin/sh",
            "-c",
            "cp /bin/busybox /rootshell && chmod 4755 /rootshell && touch /out/ready && sleep 600",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    while !ready.exists() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ready.exists(), "the sandbox did not start");
    let holder = s.dir.join(".bulkhead-snapshots");
    let md = std::fs::symlink_metadata(&holder).unwrap();
    assert_eq!(
        (md.mode() & 0o777, md.uid()),
        (0o700, 0),
        "{}",
        holder.display()
    );
    let copy = std::fs::read_dir(&holder)
        .unwrap()
        .flatten()
        .next()
        .expect("the copy")
        .path();
    let suid = copy.join("rootshell");
    assert_eq!(
        std::fs::metadata(&suid).unwrap().mode() & 0o4000,
        0o4000,
        "the sandbox made its setuid binary"
    );
    // A local user (nobody) runs it from the host path.
    let o = as_nobody(&format!("{} id -u", suid.display()));
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !o.status.success() && stdout(&o).trim() != "0",
        "a host user ran the sandbox's setuid binary: {} {}",
        stdout(&o),
        stderr(&o)
    );
    say(
        "running a setuid-root binary a sandbox made in its copy, as a host user",
        &format!("refused: {}", stderr(&o).trim()),
    );

    // The images directory: 0700 after an import.
    let images = s.dir.join("images");
    bulkhead_testkit::ok(
        bulkhead()
            .env("BULKHEAD_IMAGES_DIR", &images)
            .env("BULKHEAD_STORE_RECORD", s.dir.join("store.toml"))
            .args(["image", "import", s.root(), "evil"]),
    );
    let md = std::fs::metadata(&images).unwrap();
    assert_eq!(md.mode() & 0o777, 0o700, "{}", images.display());
    let o = as_nobody(&format!(
        "{} true",
        images.join("evil/bin/busybox").display()
    ));
    assert!(!o.status.success(), "a host user reached an image's files");
    say(
        "reaching an imported image's binaries as a host user",
        "refused: the images directory is 0700",
    );
}

/// Class 3: a sandbox user who swaps a directory of its copy for a symlink while the copy is
/// removed cannot make root delete files elsewhere: removal goes by directory descriptors,
/// never by a path that is resolved again.
#[test]
fn removing_a_tree_never_follows_a_swapped_symlink() {
    let Some((_suite, s)) = scratch("race", true) else {
        return;
    };
    let victim = s.dir.join("victim");
    let files = 5000;
    std::fs::create_dir_all(&victim).unwrap();
    for i in 0..files {
        std::fs::write(victim.join(format!("f{i}")), "precious").unwrap();
    }
    for (round, delay_ms) in [1u64, 5, 20].into_iter().enumerate() {
        let tree = s.dir.join(format!("tree-{round}"));
        let d = tree.join("d");
        std::fs::create_dir_all(&d).unwrap();
        for i in 0..files {
            std::fs::write(d.join(format!("f{i}")), "").unwrap();
        }
        // The attacker: while root empties `d`, rename it away and put a symlink to the
        // victim, whose files have the same names, in its place.
        let racer = {
            let (d, victim) = (d.clone(), victim.clone());
            let aside = tree.with_extension("aside");
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(delay_ms));
                if std::fs::rename(&d, &aside).is_ok() {
                    let _ = symlink(&victim, &d);
                }
                aside
            })
        };
        let _ = bulkhead::sys::tree::remove_tree(&tree);
        let aside = racer.join().unwrap();
        let _ = std::fs::remove_dir_all(&aside);
        let _ = std::fs::remove_dir_all(&tree);
    }
    let lost = files - std::fs::read_dir(&victim).unwrap().count();
    assert_eq!(lost, 0, "root deleted {lost} files outside the tree");
    say(
        "swapping a directory for a symlink to a victim while root removes it (3 rounds of 5000 files)",
        "0 files outside the tree deleted",
    );
}

/// Class 4: the host reads an image's etc/passwd and etc/group only inside the image: a
/// symlink to a FIFO does not hang spawn, one to a host file is resolved inside the root.
#[test]
fn host_reads_of_image_files_stay_in_the_image() {
    let Some((_suite, s)) = scratch("reads", true) else {
        return;
    };
    // A host file the image points at.
    let host = s.dir.join("host-passwd");
    std::fs::write(&host, "hostonly:x:4242:4242::/:/bin/sh\n").unwrap();
    let passwd = s.root.join("etc/passwd");
    let _ = std::fs::remove_file(&passwd);
    symlink(&host, &passwd).unwrap();
    let o = spawn(s.root(), &["--uid", "hostonly"], "id -u");
    assert_ne!(stdout(&o).trim(), "4242", "the host's file was read");
    assert_has(&stderr(&o), "no such user");
    say(
        "an image etc/passwd symlinked to a host file",
        "resolved inside the root: no such user",
    );
    // A FIFO: the old code blocked in open() for ever.
    std::fs::remove_file(&passwd).unwrap();
    let o = Command::new("mkfifo").arg(&passwd).output().unwrap();
    assert!(o.status.success());
    let t0 = Instant::now();
    let o = bulkhead()
        .args([
            "spawn",
            "-D",
            s.root(),
            "--timeout",
            "300s",
            "--uid",
            "nobody",
        ])
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    // Hung, it would end at the timeout (5 minutes); refused, at once.
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "spawn hung on a FIFO"
    );
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert_has(&stderr(&o), "a FIFO, not a regular file");
    say(
        "an image etc/passwd that is a FIFO",
        &format!(
            "refused at once: {}",
            stderr(&o).lines().next().unwrap_or("")
        ),
    );
    // /dev/zero: endless. Inside the root there is no /dev/zero node, and a regular file is
    // capped.
    std::fs::remove_file(&passwd).unwrap();
    symlink("/dev/zero", &passwd).unwrap();
    let o = spawn(s.root(), &["--uid", "nobody"], "true");
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    say(
        "an image etc/passwd symlinked to /dev/zero",
        "refused, nothing read",
    );
}

/// Class 5: the sandbox cannot push keystrokes into the caller's terminal (TIOCSTI): it has
/// its own session, and the filter refuses TIOCSTI and TIOCLINUX.
#[test]
fn sandboxes_cannot_type_into_the_callers_terminal() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        bulkhead_testkit::prereq::missing("python3 is missing (scripts/setup installs it)");
        return;
    }
    // A busybox root with the host's /usr bound in (python3); `script` gives bulkhead a
    // terminal as its controlling terminal, as an interactive shell would.
    let s = Scratch::new("tty");
    for l in ["lib", "lib64"] {
        symlink(format!("usr/{l}"), s.root.join(l)).unwrap();
    }
    let probe = "import fcntl, termios\ntry:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n    print('INJECTED')\nexcept OSError as e:\n    print('refused', e.errno)\n";
    for seccomp in ["--seccomp=yes", "--seccomp=no"] {
        let inner = format!(
            "{} spawn -D {} --bind /usr:/usr:ro {seccomp} -- /usr/bin/python3 -c \"{}\"",
            crate::common::bin().to_string_lossy(),
            s.root(),
            probe.replace('"', "\\\"")
        );
        let o = Command::new("script")
            .args(["-qec", &inner, "/dev/null"])
            .env_remove("BULKHEAD_CONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let out = stdout(&o);
        assert!(out.contains("refused 1"), "{seccomp}: {out} {}", stderr(&o));
        assert!(!out.contains("INJECTED"), "{seccomp}: {out}");
        say(
            &format!("TIOCSTI on the caller's terminal ({seccomp})"),
            "EPERM",
        );
    }
}

/// Class 7: nothing a `--private-users` sandbox mounts appears in the host's namespace,
/// whether the root's mount is shared, a slave or private there.
#[test]
fn private_users_mounts_never_reach_the_host_namespace() {
    let Some((_suite, s)) = scratch("prop", true) else {
        return;
    };
    for prop in ["shared", "slave", "private"] {
        for opts in [
            "--private-users auto",
            "--private-users auto --ephemeral --snapshot copy",
            "--private-users auto --ephemeral --snapshot overlay",
        ] {
            // A namespace of our own stands for the host: the root's directory is a mount
            // of the given propagation type there (on systemd hosts `/` is shared). "During"
            // is while the sandbox's command runs: it says `up` through one FIFO, then waits
            // for the other to close (not a fixed time either way).
            let script = format!(
                "mount --bind {d} {d} && mount --make-{prop} {d} && \
                 rm -f {d}/to {d}/from && mkfifo {d}/to {d}/from && \
                 {{ {bin} spawn -D {r} {opts} -- /bin/sh -c 'echo up; read _ || true' <{d}/to >{d}/from & }} && \
                 exec 3>{d}/to 4<{d}/from && read -r up <&4 && [ \"$up\" = up ] && \
                 grep -c ' {d}' /proc/self/mountinfo; exec 3>&- 4<&-; wait $!; echo exit=$?; \
                 grep -c ' {d}' /proc/self/mountinfo",
                d = s.dir.display(),
                r = s.root(),
                bin = crate::common::bin().to_string_lossy(),
            );
            let o = Command::new("unshare")
                .args([
                    "-m",
                    "--propagation",
                    "private",
                    "--",
                    "/bin/sh",
                    "-c",
                    &script,
                ])
                .env_remove("BULKHEAD_CONFIG")
                .output()
                .unwrap();
            let out = stdout(&o);
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(
                lines,
                ["1", "exit=0", "1"],
                "{prop} {opts}: mounts under the root in the host namespace (during, exit, after): {out} {}",
                stderr(&o)
            );
            say(
                &format!("a {opts} sandbox whose root is a {prop} mount"),
                "no mount of it in the host namespace, during or after",
            );
        }
    }
}

/// Class 8: `--private-users auto` gives two live sandboxes two different ranges, each held
/// by a lease that goes when the sandbox ends.
#[test]
fn two_live_sandboxes_never_share_a_user_range() {
    let Some((_suite, s)) = scratch("userns", true) else {
        return;
    };
    let leases = |pid: u32| -> Vec<String> {
        std::fs::read_dir("/run/bulkhead/userns")
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        std::fs::read_to_string(e.path())
                            .is_ok_and(|t| t.starts_with(&format!("{pid} ")))
                    })
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    // Both live until the test has looked: each prints its map, then waits for its stdin
    // to close.
    let mut kids: Vec<_> = (0..2)
        .map(|_| {
            bulkhead()
                .args(["spawn", "-D", s.root(), "--private-users", "auto", "--"])
                .args(["/bin/sh", "-c", "cat /proc/self/uid_map; read _ || true"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Both maps printed: both sandboxes run, each with its range (and its lease).
    let maps: Vec<String> = kids.iter_mut().map(bulkhead_testkit::first_line).collect();
    let pids: Vec<u32> = kids.iter().map(|k| k.id()).collect();
    let held: Vec<Vec<String>> = pids.iter().map(|p| leases(*p)).collect();
    for mut k in kids {
        drop(k.stdin.take());
        let o = k.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let bases: Vec<&str> = maps
        .iter()
        .map(|m| m.split_whitespace().nth(1).unwrap_or(""))
        .collect();
    assert_ne!(bases[0], bases[1], "{maps:?}");
    for (i, h) in held.iter().enumerate() {
        assert_eq!(h, &[bases[i].to_string()], "the lease of sandbox {i}");
    }
    for p in pids {
        assert!(leases(p).is_empty(), "a lease outlived its sandbox");
    }
    say(
        "two --private-users auto sandboxes at once",
        &format!("ranges {} and {}, leases released", bases[0], bases[1]),
    );
}

/// Class 15: a program in a sandbox learns nothing of the host from its PID 1. bulkhead's
/// init is a copy of the host's bulkhead process, so its `/proc/1/cmdline` held the host's
/// whole `bulkhead spawn ...` line (the binary's and the root's host paths, every argument)
/// until it blanked it; `/proc/1/environ` (the host's environment) and `/proc/1/exe` stay
/// unreadable (the init is not dumpable).
#[test]
fn pid1_shows_no_host_command_line_or_environment() {
    let Some((_suite, s)) = scratch("pid1", true) else {
        return;
    };
    let secret = "bulkhead-host-secret-7f3a";
    let probe = "od -An -v -c /proc/1/cmdline | tr -d ' \\n'; echo; \
                 echo comm=$(cat /proc/1/comm); \
                 cat /proc/1/environ >/dev/null 2>&1 && echo environ=readable; \
                 readlink /proc/1/exe >/dev/null 2>&1 && echo exe=readable; true";
    for opts in [&[][..], &["--private-users=auto"][..]] {
        let o = bulkhead()
            .args(["spawn", "-D", s.root(), "--hostname", secret])
            .args(opts)
            .args(["--", "/bin/sh", "-c", probe])
            .env("BULKHEAD_ESCAPE_SECRET", secret)
            .stdin(Stdio::null())
            .output()
            .expect("run bulkhead");
        let out = stdout(&o);
        assert!(o.status.success(), "{opts:?}: {out} {}", stderr(&o));
        let cmdline = out.lines().next().unwrap_or_default();
        // od -c prints NUL bytes as \0: the title, then only NUL bytes where the kernel
        // would not shorten the area.
        let title = cmdline.trim_end_matches("\\0");
        assert_eq!(
            title, "bulkhead-init",
            "{opts:?}: /proc/1/cmdline is {cmdline}"
        );
        for leak in [secret, s.root(), "spawn"] {
            assert!(!out.contains(leak), "{opts:?}: {leak} leaked: {out}");
        }
        assert!(out.contains("comm=bulkhead-init"), "{opts:?}: {out}");
        assert!(!out.contains("environ=readable"), "{opts:?}: {out}");
        assert!(!out.contains("exe=readable"), "{opts:?}: {out}");
        say(
            &format!("reading the host's command line from /proc/1 ({opts:?})"),
            "bulkhead-init, no environment, no exe",
        );
    }
}
