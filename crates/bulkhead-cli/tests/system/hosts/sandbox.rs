//! Sandboxes in slices on every layout: `spawn --slice` (on systemd a transient scope with
//! Delegate=yes in the slice, like systemd-nspawn) and `serve` starting a sandboxed target in
//! a slice on its first connection. The root is a busybox root the check builds.

use super::host::{ended, Host};
use crate::common::rootfs::busybox_root;
use crate::common::stderr;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn root(h: &Host) -> std::path::PathBuf {
    let r = busybox_root(&h.tmp().join("root"));
    std::fs::create_dir_all(r.join("www")).unwrap();
    std::fs::write(r.join("www/index.html"), "hello from the sandbox\n").unwrap();
    r
}

#[test]
fn spawn_runs_the_sandbox_in_the_slice() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let r = root(&h);
    h.apply(&[("box", "TasksMax = 50")]);
    let kid = h
        .cmd()
        .args(["spawn", "--slice", &h.slice("box"), "-D"])
        .arg(&r)
        .args(["--", "sleep", "600"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let found = loop {
        let p = h.processes_below("box");
        if !p.is_empty() || t.elapsed() > Duration::from_secs(60) {
            break p;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(kid.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let o = kid.wait_with_output().unwrap();
    let places: Vec<&str> = found.iter().map(|(c, _)| c.as_str()).collect();
    h.report(
        "spawn --slice",
        &format!(
            "the sandbox's processes in the slice at {places:?} ({})",
            ended(&o.status)
        ),
    );
    assert!(
        !found.is_empty(),
        "no process of the sandbox in the slice: {}",
        stderr(&o)
    );
    if h.systemd {
        assert!(
            places
                .iter()
                .any(|c| c.starts_with("bulkhead-spawn-") && c.ends_with(".scope")),
            "on systemd the sandbox is in a scope of the slice: {places:?}"
        );
    }
}

#[test]
fn serve_starts_a_sandboxed_target_in_the_slice() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let r = root(&h);
    let port = bulkhead_testkit::free_port();
    let socket = format!("{}s", h.parent);
    h.write_plan_with(
        &[("web", "TasksMax = 50")],
        &format!(
            r#"
[socket.{socket}]
listen = ["127.0.0.1:{port}"]
backend = "127.0.0.1:8000"
[socket.{socket}.target]
rootfs = "{root}"
slice = "{slice}"
command = ["/bin/httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"]
"#,
            root = r.display(),
            slice = h.slice("web")
        ),
    );
    let o = h.bulkhead(&["apply"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (mut serve, answer, cold) = serve_until_answered(&h, port, "serve");
    let found = h.processes_below("web");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(serve.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let st = serve.wait().unwrap();
    let err = std::fs::read_to_string(h.tmp().join("serve.err")).unwrap_or_default();
    let places: Vec<&str> = found.iter().map(|(c, _)| c.as_str()).collect();
    h.report(
        "serve (sandboxed target)",
        &format!(
            "first answer after {:.1} s, the target in the slice at {places:?}, serve {}",
            cold.as_secs_f64(),
            ended(&st)
        ),
    );
    let answer = answer.unwrap_or_else(|e| panic!("no answer: {e}\n{err}"));
    assert!(answer.contains("hello from the sandbox"), "{answer}\n{err}");
    assert!(!found.is_empty(), "the target was not in the slice\n{err}");
}

/// `bulkhead serve` on the host's plan (stdout in `TAG.log`, stderr in `TAG.err`), asked
/// for the sandbox's page until it answers (60 s at most): serve, the last answer, and how
/// long the first answer took.
fn serve_until_answered(
    h: &Host,
    port: u16,
    tag: &str,
) -> (std::process::Child, std::io::Result<String>, Duration) {
    let serve = h
        .cmd()
        .arg("serve")
        .stdout(std::fs::File::create(h.tmp().join(format!("{tag}.log"))).unwrap())
        .stderr(std::fs::File::create(h.tmp().join(format!("{tag}.err"))).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let mut answer = Err(std::io::Error::other("not tried"));
    while t.elapsed() < Duration::from_secs(60) {
        answer = get(port);
        if answer
            .as_ref()
            .is_ok_and(|a| a.contains("hello from the sandbox"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    (serve, answer, t.elapsed())
}

fn get(port: u16) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// The socket's state file, as `bulkhead status` reads it.
fn socket_status(name: &str) -> serde_json::Value {
    std::fs::read_to_string(format!("/run/bulkhead/sockets/{name}.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Poll `f` until it holds, for at most 60 s.
fn until(what: &str, err: &std::path::Path, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "timed out: {what}\n{}",
            std::fs::read_to_string(err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `on_idle = "freeze"` on every layout: a cell below the slice with cgroupfs, the target's
/// own scope (FreezeUnit) with systemd. The idle sandbox is frozen, the next connection is
/// answered by it thawed (no second cold start), and serve's end stops it.
#[test]
fn serve_freezes_an_idle_sandboxed_target_and_thaws_it() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let r = root(&h);
    let port = bulkhead_testkit::free_port();
    let socket = format!("{}f", h.parent);
    h.write_plan_with(
        &[("frz", "TasksMax = 50")],
        &format!(
            r#"
[socket.{socket}]
listen = ["127.0.0.1:{port}"]
backend = "127.0.0.1:8000"
idle_timeout = "500ms"
on_idle = "freeze"
[socket.{socket}.target]
rootfs = "{root}"
slice = "{slice}"
command = ["/bin/httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"]
"#,
            root = r.display(),
            slice = h.slice("frz")
        ),
    );
    let o = h.bulkhead(&["apply"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = h.tmp().join("serve-frz.err");
    let (mut serve, answer, cold) = serve_until_answered(&h, port, "serve-frz");
    assert!(
        answer
            .as_ref()
            .is_ok_and(|a| a.contains("hello from the sandbox")),
        "{answer:?}\n{}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    until("frozen", &err, || {
        socket_status(&socket)["state"] == "frozen"
    });
    let pid = socket_status(&socket)["target_pid"].as_u64().unwrap_or(0);
    let unit_state = match h.systemd {
        true => {
            let o = std::process::Command::new("systemctl")
                .args(["show", "-p", "FreezerState", "--value"])
                .arg(format!("bulkhead-spawn-{pid}.scope"))
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        }
        false => "frozen (cell)".into(),
    };
    let t = Instant::now();
    let again = get(port).unwrap_or_default();
    let thawed = t.elapsed();
    until("the thaw in the status", &err, || {
        socket_status(&socket)["thaws"].as_u64() >= Some(1)
    });
    let st = socket_status(&socket);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(serve.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let ended_as = serve.wait().unwrap();
    h.report(
        "serve on_idle = freeze (sandboxed target)",
        &format!(
            "first answer {:.1} ms cold, {:.1} ms after a thaw; while frozen: {unit_state}; serve {}",
            cold.as_secs_f64() * 1e3,
            thawed.as_secs_f64() * 1e3,
            ended(&ended_as)
        ),
    );
    let log = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(again.contains("hello from the sandbox"), "{again}\n{log}");
    assert_eq!(st["cold_starts"], 1, "{st}\n{log}");
    if h.systemd {
        assert_eq!(unit_state, "frozen", "{log}");
    }
    assert_eq!(ended_as.code(), Some(0), "{log}");
}
