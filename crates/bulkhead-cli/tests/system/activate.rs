//! `bulkhead serve`: real sockets on loopback, real targets (busybox httpd in a sandbox, small
//! python3 servers as plain commands), real `bulkhead serve` processes.

use crate::common;
use bulkhead_testkit::assert_has;

use crate::common::serve::{bulkhead, python_ok, status, wait_for, Serve};
use crate::common::served::{arr, q, Served};
use bulkhead_testkit::free_port;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn http_get(port: u16) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

fn pids_of(pattern: &str) -> Vec<u32> {
    let out = Command::new("pgrep")
        .arg("-f")
        .arg("--")
        .arg(pattern)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Sandbox registry entries owned by a process (the snapshot registry of `spawn`).
fn sandbox_entries() -> usize {
    std::fs::read_dir("/run/bulkhead/sandbox")
        .map(|r| {
            r.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn first_connection_starts_idle_stops_next_restarts() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let mut f = Served::new("activate", "web");
    let unix = f.s.dir.join("web.sock");
    f.set(
        "listen",
        arr(&[
            format!("127.0.0.1:{}", f.port),
            format!("unix:{}", unix.display()),
        ]),
    )
    .set("idle_timeout", q("400ms"))
    .set("socket_mode", q("0660"))
    .set("socket_group", q("nogroup"))
    .httpd("plain target\n");
    let (s, name, port) = (&f.s, &f.name, f.port);
    let marker = format!("-p 127.0.0.1:{}", f.backend);
    let mut serve = f.start();
    // Nothing runs before the first connection.
    assert!(pids_of(&marker).is_empty());
    assert_eq!(status(name)["state"], "idle");
    let r = http_get(port).unwrap();
    assert!(r.contains("plain target"), "{r}");
    // The unix socket file has the plan's mode and group (systemd's SocketMode=, SocketGroup=).
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(s.dir.join("web.sock")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o660);
    let nogroup = nix::unistd::Group::from_name("nogroup").unwrap().unwrap();
    assert_eq!(meta.gid(), nogroup.gid.as_raw());
    // The unix listener reaches the same target.
    let mut u = std::os::unix::net::UnixStream::connect(s.dir.join("web.sock")).unwrap();
    u.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    u.read_to_string(&mut out).unwrap();
    assert!(out.contains("plain target"), "{out}");
    // The target closed its side; the connection ends when the client closes its own.
    drop(u);
    // The status file is refreshed on every state change and once a second.
    wait_for("counters", || {
        let st = status(name);
        st["connections_total"] == 2 && st["bytes_out"].as_u64().unwrap() > 0
    });
    assert_eq!(status(name)["cold_starts"], 1);
    // Idle stop: the target is gone, and the next connection starts it again.
    let t0 = Instant::now();
    while !(status(name)["state"] == "idle" && pids_of(&marker).is_empty()) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no idle stop: {} {:?}\n{}",
            status(name),
            pids_of(&marker),
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_has(&serve.log(), "idle for 400ms");
    assert!(http_get(port).unwrap().contains("plain target"));
    wait_for("second cold start", || status(name)["cold_starts"] == 2);
    // `bulkhead status` shows the socket.
    let out = bulkhead().arg("status").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(name.as_str()));
    assert_eq!(serve.stop(), Some(0));
    assert!(pids_of(&marker).is_empty(), "target left running");
    assert!(!s.dir.join("web.sock").exists(), "unix socket file left");
    assert!(!Path::new(&format!("/run/bulkhead/sockets/{name}.json")).exists());
}

#[test]
fn dry_run_prints_the_target_and_sd_notify_says_ready() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let mut f = Served::new("activate", "dry");
    f.set("backend", q("127.0.0.1:8000"))
        .sandboxed()
        .command(&["/bin/httpd", "-f", "-p", "127.0.0.1:8000"])
        .target("network", q("private"))
        .target("environment", r#"{ A = "b c" }"#);
    let (s, port, plan) = (&f.s, f.port, f.plan());
    let out = bulkhead()
        .arg("-c")
        .arg(&plan)
        .args(["serve", "--dry-run"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "listen on 127.0.0.1:{port} (proxy mode, backend 127.0.0.1:8000)"
        )),
        "{text}"
    );
    assert!(text.contains(" spawn -D "), "{text}");
    assert!(text.contains("--ephemeral --net private"), "{text}");
    assert!(
        text.contains("--env 'A=b c' -- /bin/httpd -f -p 127.0.0.1:8000"),
        "{text}"
    );
    assert!(
        text.contains("dry run: nothing bound, nothing started"),
        "{text}"
    );
    // Nothing listens after a dry run.
    TcpListener::bind(("127.0.0.1", port)).expect("the dry run bound the port");
    // Started by systemd as Type=notify: READY=1 once every socket listens, STOPPING=1 at the end.
    let sock_path = s.dir.join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut child = bulkhead()
        .arg("-c")
        .arg(&plan)
        .arg("serve")
        .env("NOTIFY_SOCKET", &sock_path)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 64];
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    TcpStream::connect(("127.0.0.1", port)).expect("listening once READY=1 was sent");
    let _ = bulkhead::sys::process::kill(child.id() as i32, libc::SIGTERM);
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn hundred_clients_during_a_sandboxed_cold_start_all_get_answers() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let mut f = Served::new("activate", "sb");
    f.set("backend", q("127.0.0.1:8000"))
        .set("idle_timeout", q("infinity"))
        .sandboxed()
        .command(&["/bin/httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"]);
    let port = f.port;
    let before = sandbox_entries();
    let mut serve = f.start();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(100));
    let handles: Vec<_> = (0..100)
        .map(|_| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                http_get(port)
            })
        })
        .collect();
    let mut ok = 0;
    for h in handles {
        match h.join().unwrap() {
            Ok(r) if r.contains("hello from the sandbox") => ok += 1,
            other => panic!("a client got {other:?}\n{}", serve.log()),
        }
    }
    assert_eq!(ok, 100);
    // One snapshot of the counters: both from the same read of serve's state (two reads
    // once saw connections_total 100, then cold_starts 0).
    let mut last = serde_json::Value::Null;
    wait_for("counters", || {
        last = f.status();
        last["connections_total"] == 100
    });
    assert_eq!(last["cold_starts"], 1, "{last}");
    assert_eq!(serve.stop(), Some(0));
    assert_eq!(sandbox_entries(), before, "a sandbox was left behind");
}

#[test]
fn a_crashed_target_is_restarted_by_the_next_connection() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let mut f = Served::new("activate", "crash");
    f.httpd("again\n");
    let (name, port) = (&f.name, f.port);
    let serve = f.start();
    assert!(http_get(port).unwrap().contains("again"));
    wait_for("target pid", || status(name)["target_pid"].is_u64());
    let pid = status(name)["target_pid"].as_u64().unwrap();
    let _ = bulkhead::sys::process::kill(pid as i32, libc::SIGKILL);
    wait_for("crash noticed", || status(name)["state"] == "idle");
    assert_has(&serve.log(), "killed by signal 9");
    assert!(http_get(port).unwrap().contains("again"));
    wait_for("second cold start", || status(name)["cold_starts"] == 2);
}

#[test]
fn pass_mode_hands_over_the_listening_socket() {
    let Some(_suite) = crate::suite::cgroups_and(python_ok()) else {
        return;
    };
    let mut f = Served::new("activate", "pass");
    // A systemd-style socket-activated server: checks LISTEN_PID and serves on fd 3.
    f.unset("backend").set("mode", q("pass")).python(
        "pass.py",
        r#"
import os, socket
assert os.environ["LISTEN_PID"] == str(os.getpid()), "LISTEN_PID"
n = int(os.environ["LISTEN_FDS"])
names = os.environ.get("LISTEN_FDNAMES", "")
l = socket.socket(fileno=3)
for _ in range(2):
    c, _ = l.accept()
    c.sendall(f"fds={n} names={names} pid={os.getpid()}\n".encode())
    c.close()
"#,
    );
    let (name, port) = (&f.name, f.port);
    let serve = f.start();
    let read = || {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    };
    let a = read();
    assert!(
        a.starts_with(&format!("fds=1 names={name} pid=")),
        "{a}\n{}",
        serve.log()
    );
    let b = read();
    // Both connections went to the same process: bulkhead stepped aside.
    assert_eq!(a, b);
    // After it exits, the next connection starts it again.
    wait_for("target exit", || status(name)["state"] == "idle");
    let c = read();
    assert!(c.starts_with("fds=1"), "{c}");
    assert_ne!(a, c, "a new process serves after the restart");
}

#[test]
fn per_connection_mode_gives_each_client_its_own_sandbox() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let t = common::TestRoot::new();
    let mut f = Served::new("activate", "inetd");
    // Every sandbox of the socket runs in a slice that bounds them (the plan refuses one
    // without).
    f.per_connection()
        .slice("inetd", "TasksMax = 256\nMemoryMax = \"1G\"")
        .command(&[
            "/bin/sh",
            "-c",
            "read line; ls /root; touch /root/mark; echo \"$line pid=$$ from=$REMOTE_ADDR\"",
        ]);
    let (s, name, port) = (&f.s, &f.name, f.port);
    let before = sandbox_entries();
    let mut serve = f.start_in(&t);
    let talk = |msg: &str| {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(format!("{msg}\n").as_bytes()).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    };
    for i in 0..3 {
        let out = talk(&format!("hello{i}"));
        // A fresh root each time (no mark left by the previous client), PID 2 under the init.
        assert_eq!(
            out,
            format!("hello{i} pid=2 from=127.0.0.1\n"),
            "{}",
            serve.log()
        );
    }
    assert!(!s.root().join("root/mark").exists(), "wrote into the image");
    wait_for("three starts", || status(name)["cold_starts"] == 3);
    assert_eq!(serve.stop(), Some(0));
    assert_eq!(sandbox_entries(), before);
}

#[test]
fn half_close_and_proxy_protocol_pass_through() {
    let Some(_suite) = crate::suite::cgroups_and(python_ok()) else {
        return;
    };
    let mut f = Served::new("activate", "half");
    let backend = f.backend;
    // Reads the PROXY line, then everything until EOF, then answers: only possible when the
    // client's shutdown(SHUT_WR) travels through the proxy as a half-close.
    f.set("accept_proxy_protocol", "true")
        .set("proxy_protocol", q("v1"))
        .set("pipe_size", q("1M"))
        .python(
            "echo.py",
            &format!(
                r#"
import socket
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", {backend})); l.listen(16)
while True:
    c, _ = l.accept()
    f = c.makefile("rb")
    header = f.readline().decode().strip()
    body = f.read()
    c.sendall(f"{{header}}|{{len(body)}}\n".encode())
    f.close()
    c.close()
"#
            ),
        );
    let port = f.port;
    let serve = f.start();
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // A load balancer's v2 header: the client 192.0.2.7:4242 connected to 198.51.100.1:443.
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    h.extend([192, 0, 2, 7, 198, 51, 100, 1]);
    h.extend(4242u16.to_be_bytes());
    h.extend(443u16.to_be_bytes());
    c.write_all(&h).unwrap();
    let body = vec![b'x'; 3 << 20];
    c.write_all(&body).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut out = String::new();
    if let Err(e) = c.read_to_string(&mut out) {
        panic!("{e}: read {out:?}\n{}", serve.log());
    }
    assert_eq!(
        out,
        format!("PROXY TCP4 192.0.2.7 198.51.100.1 4242 443|{}\n", 3 << 20),
        "{}",
        serve.log()
    );
    // Without a PROXY header the connection is refused by the proxy, with a log line.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert_eq!(out, "");
    wait_for("log line", || serve.log().contains("PROXY protocol header"));
}

#[test]
fn udp_with_notify_readiness() {
    let Some(_suite) = crate::suite::cgroups_and(python_ok()) else {
        return;
    };
    let mut f = Served::new("activate", "udp");
    let (port, backend) = (f.port, f.backend);
    // Sleeps before READY=1: datagrams sent meanwhile must be held, not lost.
    f.set("listen", arr(&[format!("udp:127.0.0.1:{port}")]))
        .set("backend", q(format!("udp:127.0.0.1:{backend}")))
        .set("ready", q("notify"))
        .python(
            "udp.py",
            &format!(
                r#"
import os, socket, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", {backend}))
time.sleep(0.3)
n = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
n.sendto(b"READY=1", os.environ["NOTIFY_SOCKET"])
while True:
    d, a = u.recvfrom(65536)
    u.sendto(d.upper(), a)
"#
            ),
        );
    let serve = f.start();
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    u.connect(("127.0.0.1", port)).unwrap();
    u.send(b"one").unwrap();
    u.send(b"two").unwrap();
    let mut buf = [0u8; 64];
    let n = u.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"ONE", "{}", serve.log());
    let n = u.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"TWO");
    wait_for("status", || f.status()["cold_starts"] == 1);
    let st = f.status();
    assert!(st["last_start_ms"].as_f64().unwrap() >= 300.0, "{st}");
}

/// `serve` on the fixture's plan (as `bad.toml`), expected to fail at once with exit code 2
/// and this text on stderr, with the file and line.
fn refused(f: &Served, expect: &[&str]) {
    let plan = f.s.write("bad.toml", &f.text());
    let mut child = bulkhead()
        .arg("-c")
        .arg(&plan)
        .arg("serve")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("serve did not refuse the plan:\n{}", f.text());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(st.code(), Some(2), "{err}");
    for e in expect {
        assert!(err.contains(e), "expected '{e}' in:\n{err}");
    }
    assert!(err.contains("bad.toml:"), "no file:line in:\n{err}");
}

/// A change to the common socket that makes its plan wrong.
type Edit<'a> = Box<dyn Fn(&mut Served) + 'a>;

#[test]
fn bad_input_is_refused_before_anything_listens() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_at = busy.local_addr().unwrap().to_string();
    let cases: Vec<(Edit, &[&str])> = vec![
        (
            Box::new(|f| {
                let listen = arr(&[format!("127.0.0.1:{}", f.port), busy_at.clone()]);
                f.set("listen", listen);
            }),
            &[
                "cannot listen on 127.0.0.1:",
                "Address already in use",
                "another process listens there",
            ],
        ),
        (
            Box::new(|f| {
                f.set("listen", arr(&["127.0.0.1:80:80"]));
            }),
            &["is not an address"],
        ),
        (
            Box::new(|f| {
                f.set("listen", arr(&["unix:/nonexistent/dir/app.sock"]));
            }),
            &["the directory /nonexistent/dir does not exist"],
        ),
        (
            Box::new(|f| {
                f.command(&["/no/such/server"]);
            }),
            &["the command '/no/such/server' does not exist"],
        ),
        (
            Box::new(|f| {
                f.unset("backend");
            }),
            &["proxy mode needs a backend address"],
        ),
        (
            Box::new(|f| {
                f.set("idle_timout", q("1s"));
            }),
            &["unknown key 'idle_timout'", "did you mean idle_timeout?"],
        ),
    ];
    for (edit, expect) in cases {
        let mut f = Served::new("activate", "bad");
        f.command(&["/bin/true"]);
        edit(&mut f);
        refused(&f, expect);
        // Nothing was left listening on the socket's own address.
        TcpListener::bind(("127.0.0.1", f.port)).expect("an address was left bound");
    }
    drop(busy);
}

#[test]
fn a_backend_that_never_listens_fails_the_start_and_closes_clients() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let mut f = Served::new("activate", "never");
    f.set("start_timeout", q("500ms"))
        .set("stop_timeout", q("500ms"))
        .sandboxed()
        .command(&["/bin/sleep", "600"]);
    let (port, backend) = (f.port, f.backend);
    let before = sandbox_entries();
    let mut serve = f.start();
    for _ in 0..3 {
        let t0 = Instant::now();
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut out = Vec::new();
        // Closed (after the 500 ms start_timeout and stop_timeout), not hung until the read
        // gives up.
        let _ = c.read_to_end(&mut out);
        assert!(out.is_empty());
        assert!(t0.elapsed() < Duration::from_secs(60));
    }
    let log = serve.log();
    assert!(
        log.contains(&format!("nothing accepted on 127.0.0.1:{backend}")),
        "{log}"
    );
    assert!(log.contains("3 starts failed in a row"), "{log}");
    // Backing off: the next client is closed at once, with the reason.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    wait_for("backoff log", || {
        serve.log().contains("failed in a row (last:")
    });
    wait_for("backoff state", || f.status()["state"] == "backoff");
    wait_for("failed sandboxes removed", || sandbox_entries() == before);
    wait_for("failed targets stopped", || {
        pids_of("/bin/sleep 600").is_empty()
    });
    assert_eq!(serve.stop(), Some(0));
}

/// systemd's socket activation of `serve` itself: a `.socket` unit (here its stand-in,
/// systemd-socket-activate) binds the port and passes it as LISTEN_FDS; serve matches it to
/// the plan's listen address, binds the plan's other addresses itself, and refuses a passed
/// socket that no plan address names.
#[test]
fn serve_takes_its_listening_sockets_from_a_socket_unit() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let activate = "/usr/bin/systemd-socket-activate";
    if !common::serve::have(activate, "systemd") {
        return;
    }
    let mut f = Served::new("passed", "web");
    let (port, own, stray) = (f.port, free_port(), free_port());
    f.set(
        "listen",
        arr(&[format!("127.0.0.1:{port}"), format!("127.0.0.1:{own}")]),
    )
    .httpd("served from a socket unit\n");
    let (s, plan) = (&f.s, f.plan());
    let mut cmd = Command::new(activate);
    cmd.arg("-l")
        .arg(format!("127.0.0.1:{port}"))
        .arg(common::bin())
        .arg("-c")
        .arg(&plan)
        .arg("serve")
        .env_remove("BULKHEAD_CONFIG")
        .env_remove("NOTIFY_SOCKET");
    let serve = Serve::spawn(cmd, s.dir.join("serve.log"));
    wait_for("systemd-socket-activate to listen", || {
        serve.log().contains("Listening on")
    });
    // systemd-socket-activate starts serve on the first connection, which serve then answers.
    let r = http_get(port).unwrap();
    assert!(
        r.contains("served from a socket unit"),
        "{r}\n{}",
        serve.log()
    );
    let log = serve.log();
    assert!(
        log.contains(&format!("127.0.0.1:{port} (from the socket unit)")),
        "{log}"
    );
    // The address the unit did not pass is bound by serve.
    assert!(http_get(own).unwrap().contains("served from a socket unit"));
    wait_for("the cold start counted", || f.status()["cold_starts"] == 1);
    drop(serve);

    // A passed socket that the plan does not name: an error that says which, before serving.
    let mut cmd = Command::new(activate);
    cmd.args(["-l", &format!("127.0.0.1:{port}")])
        .args(["-l", &format!("127.0.0.1:{stray}")])
        .arg(common::bin())
        .arg("-c")
        .arg(&plan)
        .arg("serve")
        .env_remove("BULKHEAD_CONFIG")
        .env_remove("NOTIFY_SOCKET");
    let mut serve = Serve::spawn(cmd, s.dir.join("stray.log"));
    wait_for("systemd-socket-activate to listen", || {
        serve.log().matches("Listening on").count() == 2
    });
    let _ = TcpStream::connect(("127.0.0.1", port));
    wait_for("serve to refuse the stray socket", || {
        serve.log().contains("that no [socket.*] listen names")
    });
    assert_eq!(serve.stop(), Some(2), "{}", serve.log());
    let log = serve.log();
    assert!(log.contains(&format!("127.0.0.1:{stray}")), "{log}");
    assert!(log.contains("remove that Listen line"), "{log}");
}

/// The seed's on-demand machine: a socket whose target boots the cached Debian root
/// (`boot = true`). The first connection starts the whole system and is held until its
/// systemd says READY=1 (passed on by `spawn --boot` to serve's notify socket), then proxied
/// to a service of the booted system (systemd's own socket activation inside, from units
/// bound into /usr/local/lib/systemd/system); idle, the system is powered off cleanly
/// (SIGTERM to spawn, SIGRTMIN+3 to its systemd), and the next connection boots it again.
/// A socket whose target boots the Debian root: its systemd answers on 127.0.0.1:8000 (a
/// socket unit bound in from the scratch directory), idle after 1 s.
fn booted(root: &str, base: &str) -> Served {
    let mut f = Served::new("activate", base);
    let units = f.s.dir.join("units");
    std::fs::create_dir_all(units.join("sockets.target.wants")).unwrap();
    bulkhead_testkit::write(
        units.join("hello.socket"),
        "[Socket]\nListenStream=127.0.0.1:8000\nAccept=yes\n[Install]\nWantedBy=sockets.target\n",
    );
    bulkhead_testkit::write(units.join("hello@.service"), "[Service]\nExecStart=/bin/sh -c 'printf \"HTTP/1.0 200 OK\\r\\n\\r\\nhello from the booted system $(cat /proc/1/comm)\\n\"'\nStandardInput=socket\n");
    std::os::unix::fs::symlink(
        "../hello.socket",
        units.join("sockets.target.wants/hello.socket"),
    )
    .unwrap();
    f.set("backend", q("127.0.0.1:8000"))
        .set("idle_timeout", q("1s"))
        .set("start_timeout", q("60s"))
        .set("stop_timeout", q("30s"))
        .target("rootfs", q(root))
        .target("boot", "true")
        .target("snapshot", q("overlay"))
        .target(
            "bind",
            arr(&[format!(
                "{}:/usr/local/lib/systemd/system:ro",
                units.display()
            )]),
        );
    f
}

#[test]
fn a_booted_system_starts_on_the_first_connection_and_powers_off_when_idle() {
    let _suite = crate::suite::shared();
    let Some(root) = common::container::debian_root() else {
        return;
    };
    let f = booted(root, "boot");
    let (name, port, plan) = (&f.name, f.port, f.plan());
    // The dry run shows the spawn --boot line with serve's notify socket for it.
    let o = bulkhead()
        .args(["-c", plan.to_str().unwrap(), "serve", "--dry-run"])
        .output()
        .unwrap();
    let dry = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{dry}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        dry.contains("NOTIFY_SOCKET=") && dry.contains(" spawn ") && dry.contains(" --boot"),
        "{dry}"
    );
    assert!(dry.contains("ready: on READY=1"), "{dry}");
    let mut serve = Serve::start(&plan, f.log());
    for round in 1..=2 {
        let t = Instant::now();
        let r = http_get(port).unwrap_or_else(|e| panic!("round {round}: {e}\n{}", serve.log()));
        assert!(
            r.contains("hello from the booted system systemd"),
            "round {round}: {r:?}\n{}",
            serve.log()
        );
        eprintln!("round {round}: first byte after {:?}", t.elapsed());
        assert_eq!(status(name)["cold_starts"], round, "{}", serve.log());
        // Idle: powered off through its systemd, well before the SIGKILL that would come
        // after stop_timeout (30 s) and its grace; wait_for gives up after 20 s.
        wait_for("the idle stop", || status(name)["state"] == "idle");
    }
    let log = serve.log();
    assert!(log.contains("booting /"), "{log}");
    assert!(
        !log.contains("killing it"),
        "the booted system was killed:\n{log}"
    );
    assert_eq!(serve.stop(), Some(0));
}

/// The freeze cell of socket `name` below the slice `slice` of the test's root, in the
/// unified hierarchy (pure v2, and hybrid hosts).
fn freeze_cell(t: &common::TestRoot, slice: &str, name: &str) -> std::path::PathBuf {
    let mount = &t.layout.unified.as_ref().expect("a cgroup2 mount").mount;
    mount
        .join(t.cgroup.trim_start_matches('/'))
        .join(format!("{slice}.slice/bulkhead-serve-{name}"))
}

/// `on_idle = "freeze"`: the idle target's processes move into the socket's freeze cell below
/// its slice, which the kernel freezes; the next connection thaws it (the same process, no
/// cold start) and is answered; serve's end thaws and stops it and removes the cell.
#[test]
fn an_idle_target_is_frozen_and_the_next_connection_thaws_it() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let t = common::TestRoot::new();
    let mut f = Served::new("activate", "frz");
    f.set("idle_timeout", q("300ms"))
        .set("on_idle", q("freeze"))
        .httpd("frozen target\n")
        .slice("frz", "CPUWeight = 50");
    let (name, port) = (f.name.clone(), f.port);
    let mut serve = f.start_in(&t);
    assert!(http_get(port).unwrap().contains("frozen target"));
    wait_for("the first freeze", || status(&name)["state"] == "frozen");
    let st = status(&name);
    let pid = st["target_pid"].as_u64().unwrap() as u32;
    assert_eq!(st["freezes"], 1, "{st}");
    assert!(st["frozen_memory_bytes"].as_u64().unwrap() > 0, "{st}");
    // The target's processes are in the cell below its slice, and the kernel says it is
    // frozen (on pure v2 `run` waits outside the slice; the command is what froze).
    let cell = freeze_cell(&t, "frz", &name);
    let read = |f: &str| std::fs::read_to_string(cell.join(f)).unwrap_or_default();
    let frozen_pids = read("cgroup.procs");
    assert!(!frozen_pids.trim().is_empty(), "{}", cell.display());
    assert_eq!(read("cgroup.freeze").trim(), "1");
    assert_has(&read("cgroup.events"), "frozen 1");
    // The next connection is answered by the same process: thawed, not started again.
    assert!(http_get(port).unwrap().contains("frozen target"));
    // The status file follows within a status tick.
    wait_for("the thaw in the status", || {
        status(&name)["thaws"].as_u64() >= Some(1)
    });
    let st = status(&name);
    assert_eq!(st["cold_starts"], 1, "{st}");
    assert!(st["thaws"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(st["target_pid"].as_u64(), Some(u64::from(pid)), "{st}");
    // The same processes (httpd forks one more per connection, briefly).
    let now = read("cgroup.procs");
    for p in frozen_pids.lines() {
        assert!(now.lines().any(|l| l == p), "{p} gone: {now}");
    }
    // Frozen again once idle; serve's end thaws it, stops it, and removes the cell.
    wait_for("the second freeze", || {
        let st = status(&name);
        st["state"] == "frozen" && st["freezes"].as_u64() >= Some(2)
    });
    assert_eq!(serve.stop(), Some(0), "{}", serve.log());
    assert!(!bulkhead::sys::process::alive(pid), "the target still runs");
    assert!(!cell.exists(), "the cell is left: {}", cell.display());
    let log = serve.log();
    assert_has(&log, "target frozen (");
    assert_has(&log, "target thawed in");
}

/// A sandboxed target frozen when idle: the sandbox (its supervisor and the processes in its
/// namespaces) freezes in the cell, a connection thaws it, and serve's end stops it with its
/// snapshot removed, as a stopped sandbox would be.
#[test]
fn a_sandboxed_target_is_frozen_thawed_and_stopped_cleanly() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let t = common::TestRoot::new();
    let mut f = Served::new("activate", "sbfrz");
    f.set("backend", q("127.0.0.1:8000"))
        .set("idle_timeout", q("300ms"))
        .set("on_idle", q("freeze"))
        .sandboxed()
        .command(&["/bin/httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"])
        .slice("sbfrz", "TasksMax = 64\nMemoryMax = \"256M\"");
    let (name, port) = (f.name.clone(), f.port);
    let before = sandbox_entries();
    let mut serve = f.start_in(&t);
    assert!(http_get(port).unwrap().contains("hello from the sandbox"));
    wait_for("frozen", || status(&name)["state"] == "frozen");
    let cell = freeze_cell(&t, "sbfrz", &name);
    let procs = std::fs::read_to_string(cell.join("cgroup.procs")).unwrap();
    // The supervisor and the sandbox's init and httpd at least.
    assert!(procs.lines().count() >= 2, "{procs}");
    assert_has(
        &std::fs::read_to_string(cell.join("cgroup.events")).unwrap(),
        "frozen 1",
    );
    assert!(http_get(port).unwrap().contains("hello from the sandbox"));
    wait_for("frozen again", || {
        let st = status(&name);
        st["state"] == "frozen" && st["freezes"].as_u64() >= Some(2)
    });
    assert_eq!(status(&name)["cold_starts"], 1);
    assert_eq!(serve.stop(), Some(0), "{}", serve.log());
    assert!(!cell.exists(), "the cell is left");
    assert_eq!(sandbox_entries(), before, "a sandbox was left behind");
}

/// A booted system frozen when idle: the container's own cgroups below the slice freeze with
/// the cell, and the next connection is answered by the same booted system, thawed, in a
/// fraction of its boot.
#[test]
fn a_booted_system_is_frozen_when_idle_and_thawed_not_booted_again() {
    let _suite = crate::suite::shared();
    let Some(root) = common::container::debian_root() else {
        return;
    };
    let t = common::TestRoot::new();
    let mut f = booted(root, "bootfrz");
    f.set("on_idle", q("freeze"))
        .slice("bootfrz", "TasksMax = 512\nMemoryMax = \"1G\"");
    let (name, port) = (f.name.clone(), f.port);
    let mut serve = f.start_in(&t);
    let t0 = Instant::now();
    let r = http_get(port).unwrap_or_else(|e| panic!("{e}\n{}", serve.log()));
    let cold = t0.elapsed();
    assert!(r.contains("hello from the booted system systemd"), "{r}");
    wait_for("frozen", || status(&name)["state"] == "frozen");
    let t0 = Instant::now();
    let r = http_get(port).unwrap_or_else(|e| panic!("{e}\n{}", serve.log()));
    let thawed = t0.elapsed();
    assert!(r.contains("hello from the booted system systemd"), "{r}");
    // Warm, for the figures: the container's own socket unit forks a service per connection.
    let t0 = Instant::now();
    assert!(http_get(port)
        .unwrap()
        .contains("hello from the booted system"));
    let warm = t0.elapsed();
    eprintln!("booted: first byte {cold:?} cold, {thawed:?} after a thaw, {warm:?} warm");
    wait_for("the thaw in the status", || {
        status(&name)["thaws"].as_u64() >= Some(1)
    });
    assert_eq!(status(&name)["cold_starts"], 1, "{}", serve.log());
    assert!(
        thawed < cold,
        "a thaw ({thawed:?}) is no faster than a boot ({cold:?})"
    );
    wait_for("frozen again", || {
        let st = status(&name);
        st["state"] == "frozen" && st["freezes"].as_u64() >= Some(2)
    });
    assert_eq!(serve.stop(), Some(0), "{}", serve.log());
    assert!(!serve.log().contains("killing it"), "{}", serve.log());
}

/// `freeze_timeout`: a target frozen for that long is thawed and stopped; the next
/// connection starts it again (a cold start), and its cell was removed with it.
#[test]
fn a_target_frozen_past_freeze_timeout_is_stopped() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let t = common::TestRoot::new();
    let mut f = Served::new("activate", "frzto");
    f.set("idle_timeout", q("200ms"))
        .set("on_idle", q("freeze"))
        .set("freeze_timeout", q("300ms"))
        .httpd("short freeze\n")
        .slice("frzto", "CPUWeight = 50");
    let (name, port) = (f.name.clone(), f.port);
    let mut serve = f.start_in(&t);
    assert!(http_get(port).unwrap().contains("short freeze"));
    wait_for("frozen, then stopped", || {
        let st = status(&name);
        st["state"] == "idle" && st["freezes"] == 1 && st["target_pid"].is_null()
    });
    let cell = freeze_cell(&t, "frzto", &name);
    assert!(!cell.exists(), "the cell is left");
    assert_has(&serve.log(), "stopping the target: frozen for 300ms");
    assert!(http_get(port).unwrap().contains("short freeze"));
    wait_for("a second cold start", || status(&name)["cold_starts"] == 2);
    assert_eq!(serve.stop(), Some(0), "{}", serve.log());
}
