//! Escape tests: io_uring (issue 40, item 11). A program in a sandbox or a booted container
//! sets up a ring: the operations a ring carries out never pass through the seccomp filter,
//! and io_uring has been the way in of many kernel escalations, so `io_uring_setup`,
//! `io_uring_enter` and `io_uring_register` answer EPERM, as in Docker's and containerd's
//! default profiles. The attacker is this test binary, run again inside the sandbox with
//! `BH_ESCAPE_PROBE=io_uring` (the host's /usr/lib bound in read-only for its libc): it
//! makes the three calls with the `libc` crate and prints what they returned.

use super::sandbox::Scratch;
use crate::common::{stderr, stdout};
use bulkhead_testkit::prereq::missing;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::process::Stdio;

const PROBE_ENV: &str = "BH_ESCAPE_PROBE";

/// A descriptor number no process here has open.
const NOT_OPEN: i64 = 999_999;

/// What a system call returned: `ok`, or the errno's name.
fn outcome(r: libc::c_long) -> String {
    if r >= 0 {
        return "ok".into();
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EPERM) => "EPERM".into(),
        Some(libc::EBADF) => "EBADF".into(),
        Some(libc::ENOSYS) => "ENOSYS".into(),
        Some(n) => format!("errno {n}"),
        None => "?".into(),
    }
}

/// Not a test: the attacker, run inside the sandbox. Does nothing without the variable.
#[test]
#[ignore = "run inside a sandbox by io_uring_is_refused_in_sandboxes_and_booted_containers"]
fn probe() {
    if std::env::var(PROBE_ENV).as_deref() != Ok("io_uring") {
        return;
    }
    // struct io_uring_params: 120 bytes, zeroed (no flags, the kernel fills in the rest).
    let mut params = [0u64; 15];
    // SAFETY: io_uring_setup(entries, params): `params` is 120 writable bytes, the size of
    // struct io_uring_params, and lives across the call.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4_i64, params.as_mut_ptr()) };
    let setup = outcome(fd);
    if fd >= 0 {
        // SAFETY: closing the ring's descriptor, which this function owns and uses no more.
        unsafe { libc::close(fd as libc::c_int) };
    }
    // On a descriptor that is not open: without the filter the kernel says EBADF, with it
    // EPERM. (-1 is no good: io_uring_register takes it for a "blind" registration.)
    // SAFETY: io_uring_enter(NOT_OPEN, 0, 0, 0, NULL, 0): no memory is passed.
    let enter = unsafe {
        libc::syscall(
            libc::SYS_io_uring_enter,
            NOT_OPEN,
            0_i64,
            0_i64,
            0_i64,
            std::ptr::null::<libc::c_void>(),
            0_i64,
        )
    };
    let enter = outcome(enter);
    // SAFETY: io_uring_register(NOT_OPEN, 0, NULL, 0): no memory is passed.
    let register = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            NOT_OPEN,
            0_i64,
            std::ptr::null::<libc::c_void>(),
            0_i64,
        )
    };
    let register = outcome(register);
    println!("io_uring: setup={setup} enter={enter} register={register}");
    std::process::exit(0);
}

/// A busybox root this test binary runs in: the host's /usr/lib and /usr/lib64 bound
/// read-only at the same places (/lib and /lib64 link there, as on the host), the binary's
/// directory at /probe, and /sbin/init a script that runs the probe (for `--boot`).
fn root_for_the_probe(s: &Scratch) -> (String, Vec<String>) {
    let exe = std::env::current_exe().unwrap();
    let name = exe.file_name().unwrap().to_str().unwrap().to_string();
    let dir = exe.parent().unwrap().to_str().unwrap().to_string();
    for d in ["usr/lib", "usr/lib64", "probe", "run"] {
        std::fs::create_dir_all(s.root.join(d)).unwrap();
    }
    symlink("usr/lib", s.root.join("lib")).unwrap();
    symlink("usr/lib64", s.root.join("lib64")).unwrap();
    let argv = format!(
        "/probe/{name} --exact escape::io_uring::probe --ignored --nocapture --test-threads=1"
    );
    let init = s.root.join("bin/init");
    let _ = std::fs::remove_file(&init);
    bulkhead_testkit::write(
        &init,
        format!("#!/bin/sh\nexport {PROBE_ENV}=io_uring\n{argv}\nexit 0\n"),
    );
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).unwrap();
    let binds = vec![
        "--bind-ro".into(),
        "/usr/lib".into(),
        "--bind-ro".into(),
        "/usr/lib64".into(),
        "--bind-ro".into(),
        format!("{dir}:/probe"),
    ];
    (argv, binds)
}

/// The probe's line in `out` (after the test harness's `test ... `), or the whole output
/// when it printed none.
fn probe_line(out: &str) -> &str {
    match out.find("io_uring: ") {
        Some(i) => out[i..].lines().next().unwrap_or_default(),
        None => out,
    }
}

#[test]
fn io_uring_is_refused_in_sandboxes_and_booted_containers() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    if !std::path::Path::new("/usr/lib64").is_dir() {
        missing("/usr/lib64 (the probe binds the host's libraries in)");
        return;
    }
    let s = Scratch::new("io-uring");
    let (argv, binds) = root_for_the_probe(&s);
    let run = |opts: &[&str], boot: bool| -> String {
        let mut c = bulkhead_testkit::bins::bulkhead_cmd();
        c.args(["spawn", "-D", s.root()]).args(opts).args(&binds);
        if boot {
            c.args(["--boot", "-x", "--timeout", "60s"]);
        } else {
            c.args(["-E", &format!("{PROBE_ENV}=io_uring"), "--"])
                .args(argv.split(' '));
        }
        let o = c.stdin(Stdio::null()).output().expect("run bulkhead");
        let out = format!("{}{}", stdout(&o), stderr(&o));
        assert!(
            o.status.success() && out.contains("io_uring: "),
            "spawn {opts:?} (boot: {boot}): {}\n{out}",
            o.status
        );
        probe_line(&out).trim().to_string()
    };
    // Without the filter the kernel sets up a ring (io_uring_disabled is 0 here): the
    // attack works on this kernel, and only the filter stands in its way.
    let unfiltered = run(&["--seccomp=no"], false);
    println!("escape[io_uring]: tried io_uring in a sandbox with --seccomp=no -> {unfiltered}");
    if unfiltered != "io_uring: setup=ok enter=EBADF register=EBADF" {
        let why = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").unwrap_or_default();
        missing(&format!(
            "a kernel that sets up io_uring rings (io_uring_disabled = {}): {unfiltered}",
            why.trim()
        ));
        return;
    }
    let mut failed = Vec::new();
    for (what, opts, boot) in [
        ("a sandbox", &[][..], false),
        (
            "a sandbox with --private-users",
            &["--private-users"][..],
            false,
        ),
        ("a booted container", &[][..], true),
    ] {
        let got = run(opts, boot);
        println!("escape[io_uring]: tried io_uring_setup, io_uring_enter and io_uring_register in {what} -> {got}");
        if got != "io_uring: setup=EPERM enter=EPERM register=EPERM" {
            failed.push(format!("{what}: {got}"));
        }
    }
    assert!(
        failed.is_empty(),
        "io_uring is not refused (EPERM, as Docker's default profile):\n{}",
        failed.join("\n")
    );
}
