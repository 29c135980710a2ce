//! Identity by what the kernel vouches for (issue 40): `place` decides as root on facts about
//! other users' processes, so a rule must not be met by a fact the process's owner chooses.
//! - #1: a user's own systemd manager names a unit `postgresql@15-main.service`: the user's
//!   process is not that unit (in the booted systemd container, with a real user manager).
//! - #2: a literal `exe` path is the file, not the name: a user who mounts a tmpfs over the
//!   directory in their own user and mount namespace and runs other code at that path is not
//!   the program.
//! - A rule into a slice that ranks above the default must name whose processes it places.

use crate::common::container::{err, out, Container};
use crate::common::{prerequisites, TestRoot};
use std::process::{Command, Stdio};

/// A scratch cgroup root, or None (after saying why) where the suite cannot run.
fn root_or_skip() -> Option<TestRoot> {
    prerequisites().then(TestRoot::new)
}

/// The bulkhead under test (`BULKHEAD_UNDER_TEST`: an older build, to show it falling to the
/// attack) on `t`'s cgroup root.
fn under_test(t: &TestRoot, args: &[&str]) -> std::process::Output {
    bulkhead_testkit::bins::bulkhead_cmd()
        .env("BULKHEAD_CGROUP_ROOT", &t.cgroup)
        .args(args)
        .output()
        .expect("run bulkhead")
}

/// #1 on a real systemd: `systemd-run --user --unit=postgresql@15-main.service` by an
/// ordinary user, and `place` with a rule for that unit into the server slice.
#[test]
fn a_users_own_unit_named_like_the_database_is_not_placed() {
    let _suite = crate::suite::shared();
    let Some(c) = Container::boot() else { return };
    let setup = c.sh("id attacker >/dev/null 2>&1 || useradd -m attacker; \
         loginctl enable-linger attacker && \
         uid=$(id -u attacker) && \
         for i in $(seq 300); do [ -S /run/user/$uid/systemd/private ] && break; sleep 0.1; done; \
         [ -S /run/user/$uid/systemd/private ] || { echo no user manager for $uid: >&2; systemctl status user@$uid.service >&2; exit 1; }; \
         runuser -u attacker -- env XDG_RUNTIME_DIR=/run/user/$uid \
           systemd-run --user --unit=postgresql@15-main.service sleep 600");
    assert!(
        setup.status.success(),
        "a user manager for the attacker: {}",
        err(&setup)
    );
    let plan = format!(
        "{}\n[place.server]\nslice = \"db-server\"\nunit = \"postgresql@*.service\"\n",
        bulkhead::plan::EMBEDDED_DEFAULT
    );
    c.write("/root/identity.toml", &plan);
    let applied = c.bulkhead(&["-c", "/root/identity.toml", "apply"]);
    assert!(applied.status.success(), "apply: {}", err(&applied));
    let pid = out(&c.sh(
        "for p in /proc/[0-9]*; do \
           [ \"$(cat $p/comm)\" = sleep ] && grep -q 'postgresql@15-main.service' $p/cgroup && echo ${p#/proc/} && exit; \
         done",
    ))
    .trim()
    .to_string();
    assert!(!pid.is_empty(), "the attacker's unit runs");
    let placed = c.bulkhead(&["-c", "/root/identity.toml", "place", "--once", "--json"]);
    let text = out(&placed) + &err(&placed);
    let cg = out(&c.sh(&format!("cat /proc/{pid}/cgroup")));
    println!("$ bulkhead place --once\n{text}\n/proc/{pid}/cgroup:\n{cg}");
    assert!(
        !cg.contains("db-server.slice"),
        "root placed the user's process in the server slice: {cg}"
    );
    assert!(
        !text.contains(&format!("\"pid\":{pid}")),
        "place decided on the user's process: {text}"
    );
    let _ = c.sh("loginctl disable-linger attacker; loginctl terminate-user attacker");
}

/// #2 on this host: nobody mounts a tmpfs over the rule's program's directory in a user and
/// mount namespace of its own and runs a copy of `sleep` at the program's path.
#[test]
fn an_exe_path_is_the_file_it_names_not_a_name_in_a_users_namespace() {
    let _suite = crate::suite::shared();
    let Some(root) = root_or_skip() else {
        return;
    };
    // The rule's program: a file only root can change, in a directory of its own.
    let dir = std::path::PathBuf::from(format!("/var/tmp/bh-identity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("bh-program");
    std::fs::copy("/bin/sleep", &prog).unwrap();
    let plan = root.plan(&format!(
        "[slice.db]\n[slice.db-helper]\nCPUWeight = 50\n[place.p]\nslice = \"db-helper\"\nexe = \"{}\"\n",
        prog.display()
    ));
    let applied = root.run(&["-c", plan.to_str().unwrap(), "apply"]);
    assert!(applied.status.success(), "apply: {}", err(&applied));
    let prog = prog.canonicalize().unwrap();
    // The attacker's process: `sleep` shown at the program's path in its own namespace.
    let script = format!(
        "mount -t tmpfs t {d} && cp /bin/sleep {p} && exec {p} 600",
        d = dir.display(),
        p = prog.display()
    );
    let mut fake = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "unshare",
            "-Urm",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let fpid = fake.id();
    // The real program, by root.
    let mut real = Command::new(&prog).arg("600").spawn().unwrap();
    crate::common::wait_for("the attacker's process at the program's path", || {
        std::fs::read_link(format!("/proc/{fpid}/exe")).is_ok_and(|p| p == prog)
    });
    let o = under_test(
        &root,
        &["-c", plan.to_str().unwrap(), "place", "--once", "--json"],
    );
    let text = out(&o);
    println!("{text}{}", err(&o));
    let _ = fake.kill();
    let _ = fake.wait();
    let _ = real.kill();
    let _ = real.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        text.contains(&format!("\"pid\":{}", real.id())),
        "the real program was placed: {text}"
    );
    assert!(
        !text.contains(&format!("\"pid\":{fpid}")),
        "the attacker's look-alike was placed as the program: {text}"
    );
}

/// A rule into a slice that ranks above the default, with neither `user` nor `unit`, is
/// refused at its line: any user could start a matching process.
#[test]
fn a_rule_into_a_higher_slice_must_name_whose_processes() {
    let Some(root) = root_or_skip() else {
        return;
    };
    let plan = root.plan(
        "[slice.db]\n[slice.db-server]\nCPUWeight = 1000\n[place.s]\nslice = \"db-server\"\nexe = \"postgres\"\n",
    );
    let o = under_test(&root, &["-c", plan.to_str().unwrap(), "place", "--once"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("[place.s]") && e.contains("ranks above") && e.contains("user"),
        "{e}"
    );
}

/// A user's own copy of a program under a server's name, run by nobody.
struct Impostors {
    group: std::process::Child,
    dir: std::path::PathBuf,
}

impl Impostors {
    /// `n` processes of nobody named `postgres` (its own copy of `sleep`, with a 4 KiB
    /// command line: `sleep` adds its arguments up), started by one shell; waits until they
    /// all run.
    fn start(n: usize) -> Impostors {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::path::PathBuf::from(format!("/var/tmp/bh-impostor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy("/bin/sleep", dir.join("postgres")).unwrap();
        std::os::unix::fs::chown(dir.join("postgres"), Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let script = format!(
            "i=0; while [ $i -lt {n} ]; do {}/postgres {} & i=$((i+1)); done; echo started; wait",
            dir.display(),
            "1 ".repeat(2000)
        );
        let mut group = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                &script,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        assert_eq!(bulkhead_testkit::first_line(&mut group).trim(), "started");
        Impostors { group, dir }
    }
}

impl Drop for Impostors {
    fn drop(&mut self) {
        // Every process of the copy, by PID (its path names them), then the shell.
        if let Ok(rd) = std::fs::read_dir("/proc") {
            let exe = self.dir.join("postgres");
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
                    continue;
                };
                if std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe) {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
            }
        }
        let _ = self.group.kill();
        let _ = self.group.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// #8: `check` knew servers by name: a user's process named `postgres` turned the verdict to
/// NOT PROTECTED and the hint told the operator to move it into db-server.
#[test]
fn a_users_process_named_like_the_server_does_not_turn_the_verdict() {
    let _suite = crate::suite::alone();
    let Some(root) = root_or_skip() else {
        return;
    };
    let plan = root.plan(
        "[slice.db]\n[slice.db-server]\nCPUWeight = 1000\n[slice.db-helper]\nCPUWeight = 10\n",
    );
    let p = plan.to_str().unwrap();
    let o = under_test(&root, &["-c", p, "apply"]);
    assert!(o.status.success(), "apply: {}", err(&o));
    let _fake = Impostors::start(3);
    let o = under_test(&root, &["-c", p, "check"]);
    let text = out(&o);
    println!("{text}");
    assert!(
        !text.contains("postgres outside db-server"),
        "a user's process was judged a database server: {text}"
    );
    assert!(!text.contains("move --tree --slice db-server"), "{text}");
    let _ = under_test(&root, &["-c", p, "destroy"]);
}

/// #4: the exporter's cached check read every process and held every command line: 8,000
/// processes of another user timed scrapes out, 14,000 got it OOM-killed. With 20,000 such
/// processes, each with a 4 KiB command line: Every scrape answers within a second, and the
/// exporter's memory stays under its packaged limit (64M).
#[test]
fn many_processes_of_another_user_do_not_hold_the_exporter_up() {
    let _suite = crate::suite::alone();
    let Some(root) = root_or_skip() else {
        return;
    };
    let plan = root.plan(
        "[slice.db]\n[slice.db-server]\nCPUWeight = 1000\n[slice.db-helper]\nCPUWeight = 10\n",
    );
    let p = plan.to_str().unwrap();
    let o = under_test(&root, &["-c", p, "apply"]);
    assert!(o.status.success(), "apply: {}", err(&o));
    let _many = Impostors::start(20_000);
    let mut exporter = bulkhead_testkit::bins::bulkhead_cmd()
        .env("BULKHEAD_CGROUP_ROOT", &root.cgroup)
        .args(["-c", p, "exporter", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = crate::common::exporter::address(&mut exporter);
    let mut slowest = std::time::Duration::ZERO;
    let t0 = std::time::Instant::now();
    // Scrapes for 20 s, one every 250 ms: through at least one whole check.
    while t0.elapsed() < std::time::Duration::from_secs(20) {
        use std::io::{Read, Write};
        let t = std::time::Instant::now();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut page = String::new();
        c.read_to_string(&mut page).unwrap();
        assert!(page.contains(" 200 "), "{page}");
        slowest = slowest.max(t.elapsed());
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", exporter.id())).unwrap();
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let _ = exporter.kill();
    let _ = exporter.wait();
    println!(
        "20,000 processes of nobody: slowest scrape {slowest:?}, exporter peak RSS {} MiB",
        hwm_kib / 1024
    );
    assert!(
        slowest < std::time::Duration::from_secs(1),
        "a scrape took {slowest:?}"
    );
    assert!(
        hwm_kib < 64 * 1024,
        "the exporter's peak RSS: {hwm_kib} KiB"
    );
    let _ = under_test(&root, &["-c", p, "destroy"]);
}
