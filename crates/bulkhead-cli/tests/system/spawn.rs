//! `bulkhead spawn` for real: namespaces, mounts, the tiny init, exit codes, timeouts, the
//! ephemeral root and its cleanup, hardening, bad input. Each test builds its own busybox
//! root under /var/tmp and removes it.

use crate::common::rootfs::busybox_root;
use crate::common::{stderr, stdout, wait_for};
use bulkhead_testkit::assert_has;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static N: AtomicUsize = AtomicUsize::new(0);

/// A busybox root in a unique directory, removed on drop.
struct Root(PathBuf);
impl Root {
    fn new() -> Root {
        let d = PathBuf::from(format!(
            "/var/tmp/bulkhead-spawn-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&d);
        busybox_root(&d);
        Root(d)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}
impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A host directory removed on drop, also when the test fails.
struct Dir(PathBuf);
impl Dir {
    fn new(path: String) -> Dir {
        let d = PathBuf::from(path);
        std::fs::create_dir_all(&d).unwrap();
        use std::os::unix::fs::PermissionsExt;
        // The sandbox's users may write to it.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        Dir(d)
    }
    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
    fn display(&self) -> std::path::Display<'_> {
        self.0.display()
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bulkhead() -> Command {
    bulkhead_testkit::bins::clean(bulkhead_testkit::bins::this_build())
}

fn spawn(root: &Root, opts: &[&str], script: &str) -> Output {
    let mut c = bulkhead();
    c.args(["spawn", "-D", root.path()]);
    c.args(opts);
    c.args(["--", "/bin/sh", "-c", script]);
    c.output().expect("run bulkhead")
}

/// Sandbox state entries owned by `pid` (or by any of this test process's children).
fn state_entries_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/run/bulkhead/sandbox")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.starts_with(&format!("{pid}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// Wait until a descendant of `pid` (through the sandbox's init) runs `comm`: the sandbox
/// is set up and its command started. Its PID.
fn wait_command(pid: u32, comm: &str) -> i32 {
    let mut found = None;
    wait_for(&format!("{comm} running below {pid}"), || {
        let table = bulkhead_sys::procs::table();
        found = bulkhead_sys::procs::descendants(pid as i32, &table)
            .into_iter()
            .find(|&d| bulkhead_sys::procs::read(d).is_some_and(|p| p.comm == comm));
        found.is_some()
    });
    found.unwrap()
}

/// Whether any process's command line contains `what`.
fn running(what: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmd).contains(what)
    })
}

fn mounts() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        stdout(o),
        stderr(o)
    );
    stdout(o)
}

#[test]
fn pid1_private_network_and_hostname() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let out = ok(&spawn(
        &r,
        &["-x", "--hostname", "db-tools"],
        "echo pid=$$; echo init=$(cat /proc/1/comm); echo procs=$(ls /proc | grep -c '^[0-9]'); echo net=$(ls /sys/class/net); echo host=$(hostname); ip link show lo | head -1",
    ));
    assert!(out.contains("pid=2\n"), "{out}");
    assert!(out.contains("init=bulkhead-init\n"), "{out}");
    // init, sh, ls, grep at most: no host process is visible.
    let procs: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("procs="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(procs <= 5, "{out}");
    assert!(out.contains("net=lo\n"), "{out}");
    assert!(out.contains("host=db-tools\n"), "{out}");
    assert!(out.contains("UP"), "lo is up in a private netns: {out}");

    let out = ok(&spawn(
        &r,
        &["--as-pid1", "--net", "none"],
        "echo pid=$$; ip link show lo | head -1",
    ));
    assert!(out.contains("pid=1\n"), "{out}");
    assert!(!out.contains(",UP"), "--net none leaves lo down: {out}");

    let out = ok(&spawn(&r, &["--net", "host"], "ls /sys/class/net | wc -l"));
    let host_ifaces = std::fs::read_dir("/sys/class/net").unwrap().count();
    assert_eq!(out.trim(), host_ifaces.to_string());
}

#[test]
fn writes_never_reach_rootfs() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let before = mounts();
    let out = ok(&spawn(
        &r,
        &["-x", "-v"],
        "echo new > /etc/new-file && rm /bin/ls && mkdir /data && echo wrote",
    ));
    assert!(out.contains("wrote"));
    assert!(stderr(&spawn(&r, &["-x", "-v"], "true")).contains("snapshot: "));
    assert!(!r.0.join("etc/new-file").exists());
    assert!(r.0.join("bin/ls").exists());
    assert!(!r.0.join("data").exists());
    // Without --ephemeral the root is read-only.
    let o = spawn(&r, &[], "touch /etc/x");
    assert!(!o.status.success());
    assert_has(&stderr(&o), "Read-only");
    assert!(!r.0.join("etc/x").exists());
    // --writable writes through.
    ok(&spawn(&r, &["--writable"], "touch /etc/x"));
    assert!(r.0.join("etc/x").exists());
    assert_eq!(mounts(), before, "no mount is left in the host's namespace");
}

#[test]
fn hardening_fds_proc_sys_caps() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    // An fd inherited from the caller (not close-on-exec) must not reach the command.
    let f = std::fs::File::open("/etc/hostname").unwrap();
    let mut c = bulkhead();
    c.args(["spawn", "-D", r.path(), "--", "/bin/sh", "-c"]);
    // `ls` itself opens the directory it lists: that is fd 3, the lowest free one.
    c.arg("echo $(ls /proc/self/fd); cat /proc/self/status | grep -E 'CapBnd|NoNewPrivs|Seccomp:'");
    bulkhead_sys::process::dup_to_before_exec(&mut c, std::os::fd::AsRawFd::as_raw_fd(&f), 9);
    let out = ok(&c.output().unwrap());
    let fds = out.lines().next().unwrap().trim();
    assert_eq!(
        fds, "0 1 2 3",
        "only ls's own directory fd beyond 0-2: {out}"
    );
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
    let bnd = out
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:\t"))
        .unwrap();
    let bnd = u64::from_str_radix(bnd.trim(), 16).unwrap();
    assert_eq!(bnd & (1 << 21), 0, "CAP_SYS_ADMIN dropped");
    assert_eq!(bnd & (1 << 27), 0, "CAP_MKNOD dropped");
    assert_eq!(bnd & (1 << 19), 0, "CAP_SYS_PTRACE dropped");

    let out = ok(&spawn(
        &r,
        &["-x"],
        "echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo proc-sys-writable; \
         echo x > /sys/kernel/uevent_helper 2>/dev/null && echo sys-writable; \
         cat /proc/keys 2>/dev/null | wc -c; \
         mount -t tmpfs none /tmp 2>/dev/null && echo mounted; \
         mknod /tmp/sda b 8 0 2>/dev/null && echo mknod; \
         unshare -U true 2>/dev/null && echo unshared; \
         ls /proc/1/exe >/dev/null 2>&1 && readlink /proc/1/exe; \
         echo done",
    ));
    for bad in [
        "proc-sys-writable",
        "sys-writable",
        "mounted",
        "mknod",
        "unshared",
        "bulkhead\n",
    ] {
        assert!(!out.contains(bad), "{bad} in: {out}");
    }
    assert!(out.starts_with("0\n"), "/proc/keys is masked: {out}");
    assert!(out.contains("done"));
}

#[test]
fn exit_codes_signals_and_missing_commands() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    assert_eq!(spawn(&r, &[], "exit 7").status.code(), Some(7));
    assert_eq!(spawn(&r, &[], "kill -TERM $$").status.code(), Some(143));
    assert_eq!(spawn(&r, &["--as-pid1"], "exit 3").status.code(), Some(3));

    let o = bulkhead()
        .args(["spawn", "-D", r.path(), "--", "/usr/bin/postgres"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
    assert!(stderr(&o).contains("/usr/bin/postgres: command not found in the sandbox's root"));
    let o = bulkhead()
        .args(["spawn", "-D", r.path(), "--", "/etc/passwd"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));

    // SIGTERM to bulkhead reaches the command through the init (once the command runs).
    let mut child = bulkhead()
        .args(["spawn", "-D", r.path(), "--", "/bin/sleep", "600"])
        .spawn()
        .unwrap();
    wait_command(child.id(), "sleep");
    let _ = bulkhead::sys::process::kill(child.id() as i32, libc::SIGTERM);
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(143));
}

/// The sandbox has a session of its own (no TIOCSTI on the caller's terminal), so a
/// terminal's ^C reaches only bulkhead, which must pass it on: under `script`, a ^C typed
/// into the terminal ends `sleep 600` with 130 (long before it would end on its own).
#[test]
fn ctrl_c_on_the_terminal_stops_the_sandbox() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let cmd = format!(
        "{} spawn -D {} -- sleep 600",
        bulkhead_testkit::bins::this_build().display(),
        r.path()
    );
    let mut c = Command::new("script")
        .args(["-qefc", &cmd, "/dev/null"])
        .env_remove("BULKHEAD_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("script (util-linux)");
    // Typed once the sandbox's command runs (before, it would stop a half-made sandbox).
    wait_command(c.id(), "sleep");
    let t = Instant::now();
    use std::io::Write;
    c.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    let status = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = c.kill();
            panic!("^C did not stop the sandbox in 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("^C: the sandbox ended in {:?} with {status}", t.elapsed());
    assert_eq!(status.code(), Some(130), "^C: {status}");
}

#[test]
fn timeout_kills_the_whole_sandbox() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let t = Instant::now();
    // A grandchild that ignores SIGTERM, in the background: the timeout must take it too.
    // (Sleeps far longer than any wait here, so that one left running cannot pass for gone.)
    let o = spawn(
        &r,
        &["--timeout", "700ms"],
        "trap '' TERM; sleep 4141.5 & sleep 4242.5",
    );
    assert_eq!(o.status.code(), Some(124), "{}", stderr(&o));
    assert_has(&stderr(&o), "--timeout");
    assert!(t.elapsed() < Duration::from_secs(60));
    // The kernel ends the sandbox's processes as its PID 1 goes: gone soon, not at once.
    wait_for("the sandbox's sleeps gone", || {
        !running("sleep 4141.5") && !running("sleep 4242.5")
    });
}

#[test]
fn user_ids_cwd_env_binds_tmpfs() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let data = Dir::new(format!("{}-data", r.path()));
    std::fs::write(data.join("hello"), "from the host\n").unwrap();
    let bind = format!("{}:/srv/data", data.display());
    let bind_ro = format!("{}:/srv/ro:ro", data.display());
    let out = ok(&spawn(
        &r,
        &[
            "-x", "--uid", "app", "--cwd", "/tmp", "-E", "DB=main", "--bind", &bind, "--bind",
            &bind_ro, "--tmpfs", "/scratch",
        ],
        "id -u; id -g; pwd; echo $DB $HOME $container; cat /srv/data/hello; \
         echo w > /srv/data/written && echo rw-ok; echo w > /srv/ro/x 2>/dev/null || echo ro-refused; \
         grep -c ' /scratch ' /proc/mounts",
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1000", "{out}");
    assert_eq!(lines[1], "1000", "{out}");
    assert_eq!(lines[2], "/tmp", "{out}");
    assert_eq!(lines[3], "main /home/app bulkhead", "{out}");
    assert_eq!(lines[4], "from the host");
    assert!(out.contains("rw-ok") && out.contains("ro-refused"), "{out}");
    assert!(data.join("written").exists());
    assert!(!data.join("x").exists());
    assert_eq!(lines.last().unwrap().trim(), "1");
}

#[test]
fn bad_input_is_refused_and_leaves_nothing() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let before = mounts();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["-D".into(), "/nonexistent/root".into()],
            "No such file or directory",
        ),
        (vec!["-D".into(), "/etc/hostname".into()], "not a directory"),
        (
            vec![
                "-D".into(),
                r.path().into(),
                "-x".into(),
                "--bind".into(),
                "/nonexistent:/x".into(),
            ],
            "--bind /nonexistent",
        ),
        (
            vec![
                "-D".into(),
                r.path().into(),
                "-x".into(),
                "--bind".into(),
                "/etc:/../../etc".into(),
            ],
            "'..' could leave",
        ),
        (
            vec![
                "-D".into(),
                r.path().into(),
                "-x".into(),
                "--bind".into(),
                "/etc:/escape/etc".into(),
            ],
            "symbolic link",
        ),
        (
            vec![
                "-D".into(),
                r.path().into(),
                "--bind".into(),
                "/etc:/nowhere".into(),
            ],
            "read-only",
        ),
        (
            vec![
                "-D".into(),
                r.path().into(),
                "-x".into(),
                "--hostname".into(),
                "a b".into(),
            ],
            "not a valid host name",
        ),
        (
            vec![
                "-D".into(),
                r.path().into(),
                "-x".into(),
                "--uid".into(),
                "postgres".into(),
            ],
            "no such user",
        ),
        (
            vec![
                "-D".into(),
                r.path().into(),
                "-x".into(),
                "--cwd".into(),
                "/no/dir".into(),
            ],
            "--cwd /no/dir",
        ),
        (
            vec![
                "-D".into(),
                r.path().into(),
                "--snapshot".into(),
                "overlay".into(),
            ],
            "--snapshot needs --ephemeral",
        ),
    ];
    // An absolute symlink inside the root that points at the host's /etc.
    std::os::unix::fs::symlink("/etc", r.0.join("escape")).unwrap();
    for (args, want) in cases {
        let mut c = bulkhead();
        c.arg("spawn").args(&args).args(["--", "/bin/true"]);
        let o = c.output().unwrap();
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(
            stderr(&o).contains(want),
            "{args:?}: want '{want}' in: {}",
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("hint:") || want == "symbolic link" || want == "not a directory",
            "{args:?}: no hint: {}",
            stderr(&o)
        );
    }
    assert_eq!(mounts(), before);
    // Nothing was mounted over the host's /etc through the symlink.
    assert!(!Path::new("/etc/etc").exists());
}

#[test]
fn fifty_parallel_sandboxes_leave_nothing() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let before = mounts();
    let children: Vec<_> = (0..50)
        .map(|i| {
            bulkhead()
                .args(["spawn", "-D", r.path(), "-x", "--", "/bin/sh", "-c"])
                .arg(format!("echo {i} > /etc/me; sleep 0.3; cat /etc/me"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut pids = Vec::new();
    for (i, c) in children.into_iter().enumerate() {
        pids.push(c.id());
        let o = c.wait_with_output().unwrap();
        assert_eq!(
            ok(&o).trim(),
            i.to_string(),
            "each sandbox has its own root"
        );
    }
    assert!(!r.0.join("etc/me").exists());
    for p in pids {
        assert!(state_entries_of(p).is_empty(), "state of {p} left behind");
    }
    assert_eq!(mounts(), before);
}

#[test]
fn kill_9_leaves_nothing_after_the_next_start() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let mut child = bulkhead()
        // A full copy: state on the host (an overlay has none: its tmpfs lives in the
        // sandbox's own mount namespace).
        .args([
            "spawn",
            "-D",
            r.path(),
            "-x",
            "--snapshot",
            "copy",
            "--",
            "/bin/sleep",
            "4343.5",
        ])
        .spawn()
        .unwrap();
    let pid = child.id();
    // Its command runs: the state is registered and the copy made before it starts.
    wait_command(pid, "sleep");
    assert!(
        !state_entries_of(pid).is_empty(),
        "the sandbox registered its state"
    );
    let entry = PathBuf::from("/run/bulkhead/sandbox").join(&state_entries_of(pid)[0]);
    let text = std::fs::read_to_string(&entry).unwrap();
    let copy = PathBuf::from(text.split_once('\n').unwrap().1);
    assert!(copy.is_dir(), "{}", copy.display());
    let _ = bulkhead::sys::process::kill(pid as i32, libc::SIGKILL);
    child.wait().unwrap();
    // The sandbox dies with bulkhead (PR_SET_PDEATHSIG on its PID 1), soon after it.
    wait_for("the sandbox gone with bulkhead", || {
        !running("sleep 4343.5")
    });
    // The next start removes the dead owner's state and its copy.
    ok(&spawn(&r, &["-x"], "true"));
    assert!(
        state_entries_of(pid).is_empty(),
        "stale state of {pid} not removed"
    );
    assert!(!copy.exists(), "{} left behind", copy.display());
}

#[test]
fn spawn_in_a_slice_with_its_own_cgroup_namespace() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    let plan = t.plan("[slice.db-helper]\nCPUWeight = 10\nTasksMax = 50\n");
    bulkhead_testkit::ok(t.cmd().args(["-c", plan.to_str().unwrap(), "apply"]));
    let r = Root::new();
    let mut c = t.cmd();
    c.args([
        "-c",
        plan.to_str().unwrap(),
        "spawn",
        "-D",
        r.path(),
        "-x",
        "--slice",
        "db-helper",
        "--",
    ])
    // The command waits for its stdin to close: it runs until the test has looked.
    .args(["/bin/sh", "-c", "cat /proc/self/cgroup; read _ || true"])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let procs = t.dir("pids", "db.slice/db-helper.slice/cgroup.procs");
    // bulkhead, the init and the command are in the slice.
    wait_for("bulkhead, the init and the command in the slice", || {
        std::fs::read_to_string(&procs).is_ok_and(|p| p.lines().count() >= 3)
    });
    drop(child.stdin.take());
    let o = child.wait_with_output().unwrap();
    let out = ok(&o);
    // In its own cgroup namespace the slice is the root.
    assert!(out.lines().all(|l| l.ends_with(":/")), "{out}");

    let o = t
        .cmd()
        .args([
            "-c",
            plan.to_str().unwrap(),
            "spawn",
            "-D",
            r.path(),
            "--slice",
            "db-nope",
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert_has(&stderr(&o), "db-nope");
}

#[test]
fn private_users_root_inside_is_not_root_outside() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let data = Dir::new(format!("{}-userns", r.path()));
    let bind = format!("{}:/out", data.display());
    let out = ok(&spawn(
        &r,
        &["-x", "--private-users=300000:65536", "--bind", &bind],
        "id -u; cat /proc/self/uid_map; stat -c %u /etc/passwd; echo x > /etc/x && echo wrote; touch /out/made",
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "0", "root inside: {out}");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["0", "300000", "65536"],
        "{out}"
    );
    assert_eq!(lines[2], "0", "the root's files are ID-mapped: {out}");
    assert!(out.contains("wrote"), "{out}");
    assert!(!r.0.join("etc/x").exists());
    // A file it makes on the host belongs to 300000, not to root.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(data.join("made")).unwrap().uid(), 300000);
    let o = spawn(&r, &["--private-users=0"], "true");
    assert_eq!(o.status.code(), Some(125));
    assert_has(&stderr(&o), "must start above 0");
}

/// A caller with inheritable and ambient capabilities (what runc's CVE-2022-29162 was
/// about) does not hand them to the sandbox: both sets are empty inside.
#[test]
fn inherited_capabilities_do_not_reach_the_sandbox() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    if !Path::new("/usr/sbin/capsh").exists() && !Path::new("/sbin/capsh").exists() {
        bulkhead_testkit::prereq::missing("capsh (libcap2-bin; scripts/setup installs it)");
        return;
    }
    let r = Root::new();
    let inner = format!(
        "exec {} spawn -D {} -- /bin/sh -c 'grep -E \"^Cap(Inh|Amb)\" /proc/self/status'",
        bulkhead_testkit::bins::this_build().display(),
        r.path()
    );
    let o = Command::new("capsh")
        .args([
            "--inh=cap_net_raw",
            "--addamb=cap_net_raw",
            "--",
            "-c",
            &inner,
        ])
        .env_remove("BULKHEAD_CONFIG")
        .output()
        .unwrap();
    let out = ok(&o);
    assert!(out.contains("CapInh:\t0000000000000000"), "{out}");
    assert!(out.contains("CapAmb:\t0000000000000000"), "{out}");
    // The caller really had them (so the test can fail).
    let o = Command::new("capsh")
        .args([
            "--inh=cap_net_raw",
            "--addamb=cap_net_raw",
            "--",
            "-c",
            "grep -E '^CapAmb' /proc/self/status",
        ])
        .output()
        .unwrap();
    assert_has(&stdout(&o), "CapAmb:\t0000000000002000");
}

/// Every tmpfs has a size: --tmp-size, --shm-size and --overlay-size set them (the plan's
/// tmp_size, shm_size, overlay_size), writing past one fails inside, and --dry-run shows them.
#[test]
fn tmpfs_sizes_are_set_and_enforced() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let r = Root::new();
    let fill = "for f in /tmp/a /dev/shm/b /c; do dd if=/dev/zero of=$f bs=1M count=6 2>/dev/null; echo $f=$?; rm -f $f; done; \
                dd if=/dev/zero of=/dev/shm/d bs=1M count=2 2>/dev/null; echo small=$?";
    let args = [
        "-x",
        "--snapshot",
        "overlay",
        "--tmp-size",
        "4M",
        "--shm-size",
        "3M",
        "--overlay-size",
        "5M",
    ];
    let out = stdout(&spawn(&r, &args, fill));
    for f in ["/tmp/a", "/dev/shm/b", "/c"] {
        assert!(
            out.contains(&format!("{f}=1\n")),
            "{f} past its size: {out}"
        );
    }
    assert!(out.contains("small=0\n"), "{out}");
    let o = bulkhead()
        .args([
            "spawn",
            "-D",
            r.path(),
            "--dry-run",
            "--shm-size",
            "3M",
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    let plan = stdout(&o);
    assert!(plan.contains("size=3145728"), "{plan}");
    // Paths in the new root as the run makes them (issue 28: "ROOTproc"), the clone flags
    // by name.
    let root = plan
        .lines()
        .find_map(|l| l.strip_prefix("pivot_root "))
        .unwrap_or_else(|| panic!("no pivot_root: {plan}"));
    for dir in ["proc", "sys", "dev", "tmp"] {
        assert!(
            plan.contains(&format!(" on {root}/{dir} ")),
            "{dir} not under {root}: {plan}"
        );
    }
    assert!(plan.contains(&format!("mknod {root}/dev/null ")), "{plan}");
    assert!(
        plan.starts_with("clone3 CLONE_NEWNS|") && !plan.contains("flags=1"),
        "{plan}"
    );
    assert!(plan.contains(&format!("size={}", 256u64 << 20)), "{plan}");
    let o = bulkhead()
        .args([
            "spawn",
            "-D",
            r.path(),
            "--tmp-size",
            "0",
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_has(&stderr(&o), "at least 1M");
}

/// Issue 29 item 4: a PID 1 that writes to /dev/console reaches the user (systemd reopens
/// /dev/console and, with none, writes its fatal errors to /dev/null), and one that fails at
/// once and writes nothing there is named with its exit code, never left silent.
#[test]
fn a_pid1_reaches_the_user_through_dev_console() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let root = Root::new();
    let o = spawn(
        &root,
        &["--as-pid1"],
        "test -c /dev/console || echo 'no console' >&2; echo 'to the console' >/dev/console; exit 4",
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("to the console"), "{err}");
    assert!(!err.contains("no console"), "{err}");
    assert!(!err.contains("wrote nothing"), "{err}");

    let o = spawn(&root, &["--as-pid1"], "exit 3");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("/bin/sh (PID 1 of the sandbox) exited 3")
            && err.contains("wrote nothing to /dev/console"),
        "{err}"
    );
    // Root of a user namespace opens it too (it is given the terminal).
    let o = spawn(
        &root,
        &["--as-pid1", "--private-users=auto"],
        "echo 'to the console' >/dev/console; exit 4",
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("to the console"), "{err}");
    // Under bulkhead's init the command is not PID 1: no console, no note.
    let o = spawn(&root, &[], "test -e /dev/console && echo console; exit 3");
    assert_eq!(o.status.code(), Some(3));
    assert!(
        !stdout(&o).contains("console") && stderr(&o).is_empty(),
        "{}",
        stderr(&o)
    );

    // systemd as PID 1 of a snapshot of the Debian root: its errors (the mounts a container
    // manager has to prepare, see `spawn --boot`) reach the user.
    let Some(debian) = crate::common::container::debian_root() else {
        return;
    };
    let o = bulkhead()
        .args(["spawn", "-D", debian, "-x", "--as-pid1", "--"])
        .arg("/lib/systemd/systemd")
        .output()
        .expect("run bulkhead");
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("Failed to mount"), "{err}");
    // A pipe is no terminal: the lines come without the terminal's carriage returns.
    assert!(!err.contains('\r'), "{err:?}");
    println!("systemd as PID 1 (exit {:?}):\n{err}", o.status.code());
}
