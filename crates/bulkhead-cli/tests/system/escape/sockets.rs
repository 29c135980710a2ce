//! Escape tests: sockets. A sandboxed target, a local user and network clients against
//! `bulkhead serve` (issue 14, items 9 to 12).

use crate::common::serve::{
    as_nobody, bulkhead, connect_from, cpu_time, python_ok, serve_cmd, status, status_once_written,
    wait_for, want_fds, Serve, PY,
};
use crate::common::served::{arr, q, Served};
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A unix socket server on a thread that answers every connection with `reply`, until the
/// returned flag is set.
fn answer_on(path: &Path, reply: &'static str) -> Arc<AtomicBool> {
    let l = UnixListener::bind(path).unwrap();
    l.set_nonblocking(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut c, _)) => {
                    let _ = c.write_all(reply.as_bytes());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    stop
}

/// How many sockets process `pid` has open.
fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

fn read_all(mut c: TcpStream, timeout: Duration) -> String {
    c.set_read_timeout(Some(timeout)).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out
}

/// Item 9: the target's `unix:` backend is a symlink the sandbox made to a root-only socket
/// of the host. A TCP client must reach what the path names inside the sandbox, never the
/// host's socket.
#[test]
fn a_unix_backend_symlink_made_in_the_sandbox_does_not_reach_a_host_socket() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let mut f = Served::new("escape", "symlink");
    let s = &f.s;
    // The host's socket, in a directory only root may enter.
    let private = s.dir.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let host_sock = private.join("app.sock");
    let host = answer_on(&host_sock, "HOST-SECRET\n");
    // Inside the sandbox the same path is a directory of its own (a bind), where the
    // sandbox's own server listens: that is what the symlink names there.
    let inner = s.dir.join("inner");
    std::fs::create_dir(&inner).unwrap();
    let own = answer_on(&inner.join("app.sock"), "SANDBOX-OWN\n");
    let script = format!(
        "mkdir -p /run && ln -s {} /run/app.sock && exec sleep 600",
        host_sock.display()
    );
    let bind = format!("{}:{}", inner.display(), private.display());
    f.set("backend", q("unix:/run/app.sock"))
        .set("start_timeout", q("60s"))
        .set("stop_timeout", q("500ms"))
        .sandboxed()
        .target("bind", arr(&[bind]))
        .command(&["/bin/sh", "-c", &script]);
    let serve = f.start();
    let c = TcpStream::connect(("127.0.0.1", f.port)).unwrap();
    let out = read_all(c, Duration::from_secs(60));
    host.store(true, Ordering::Relaxed);
    own.store(true, Ordering::Relaxed);
    println!(
        "escape[sockets]: tried a unix backend /run/app.sock -> symlink to the host's root-only {} -> the client read {:?}",
        host_sock.display(),
        out.trim()
    );
    assert!(
        !out.contains("HOST-SECRET"),
        "the client reached the host's socket\n{}",
        serve.log()
    );
    assert_eq!(out, "SANDBOX-OWN\n", "{}", serve.log());
}

/// Item 10: a local user who can write the socket's directory swaps the fresh socket file
/// for a symlink to a root-only file while `serve` sets the socket's owner and mode.
#[test]
fn a_socket_directory_writable_by_others_cannot_turn_chown_onto_a_host_file() {
    let Some(_suite) = crate::suite::cgroups_and(python_ok()) else {
        return;
    };
    let mut f = Served::new("escape", "swap");
    let shared = f.s.dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    // Writable by everyone, without the sticky bit.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let victim = f.s.dir.join("victim");
    std::fs::write(&victim, "root only\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let sock = shared.join("app.sock");
    f.set("listen", arr(&[format!("unix:{}", sock.display())]))
        .unset("backend")
        .set("mode", q("pass"))
        .set("socket_mode", q("0666"))
        .set("socket_user", q("nobody"))
        .command(&["/bin/true"]);
    let (s, plan) = (&f.s, f.plan());
    // The attacker: whenever the path is a socket, put a symlink to the victim in its place.
    let script = s.write(
        "swap.py",
        r#"
import os, stat, sys, time
path, victim, tmp, secs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
end = time.time() + secs
while time.time() < end:
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            try:
                os.symlink(victim, tmp)
            except FileExistsError:
                pass
            os.rename(tmp, path)
    except OSError:
        pass
"#,
    );
    let mut attacker = as_nobody(PY)
        .arg(&script)
        .arg(&sock)
        .arg(&victim)
        .arg(shared.join(".swap"))
        .arg("60")
        .spawn()
        .unwrap();
    let victim_ok = || {
        let m = std::fs::metadata(&victim).unwrap();
        m.uid() == 0 && m.mode() & 0o7777 == 0o600
    };
    let mut tries = 0;
    let mut refused = None;
    while tries < 40 && victim_ok() && refused.is_none() {
        tries += 1;
        let _ = std::fs::remove_file(&sock);
        let mut serve = Serve::spawn(serve_cmd(&plan), s.dir.join("serve.log"));
        let t0 = Instant::now();
        loop {
            if serve.log().contains("listening on") {
                break;
            }
            if let Ok(Some(st)) = serve.child.try_wait() {
                refused = Some((st.code(), serve.log()));
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "{}", serve.log());
            std::thread::sleep(Duration::from_millis(2));
        }
        serve.stop();
    }
    let _ = attacker.kill();
    let _ = attacker.wait();
    let m = std::fs::metadata(&victim).unwrap();
    println!(
        "escape[sockets]: tried swapping the socket file in a 0777 directory for a symlink to a root-only file ({tries} serve start(s)) -> victim uid {} mode {:o}; serve {}",
        m.uid(),
        m.mode() & 0o7777,
        match &refused {
            Some((code, _)) => format!("refused the directory (exit {code:?})"),
            None => "listened there".into(),
        }
    );
    assert!(
        victim_ok(),
        "serve changed the owner or mode of a host file"
    );
    let (code, log) = refused.expect("serve listened in a directory others can write");
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("writable by others"), "{log}");
}

/// Item 11: a local user sends READY=1 to a target's notify socket before the target is
/// ready: `serve` must not believe it.
#[test]
fn a_local_user_cannot_declare_a_target_ready() {
    let Some(_suite) = crate::suite::cgroups_and(python_ok()) else {
        return;
    };
    let mut f = Served::new("escape", "ready");
    let (port, backend) = (f.port, f.backend);
    // Comes up only once the test says so (the file `go`, made when serve has refused the
    // attacker's forged READY=1: the forgeries surely came while it was not ready), then
    // listens and says READY=1 itself.
    let go = f.s.dir.join("go");
    f.set("ready", q("notify"))
        .set("start_timeout", q("300s"))
        .python(
            "slow.py",
            &format!(
                r#"
import os, socket, time
while not os.path.exists("{go}"):
    time.sleep(0.01)
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", {backend})); l.listen(16)
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"READY=1", os.environ["NOTIFY_SOCKET"])
while True:
    c, _ = l.accept(); c.sendall(b"served by the ready target\n"); c.close()
"#,
                go = go.display()
            ),
        );
    let (s, name) = (&f.s, &f.name);
    let notify = format!("/run/bulkhead/sockets/{name}.notify/notify");
    let attack = s.write(
        "forge.py",
        r#"
import os, socket, sys, time
path, stop, sent, end = sys.argv[1], sys.argv[2], 0, time.time() + 300
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
while not os.path.exists(stop) and time.time() < end:
    try:
        s.sendto(b"READY=1", path)
        sent += 1
    except OSError:
        pass
    time.sleep(0.005)
print(sent)
"#,
    );
    let serve = f.start();
    let stop = s.dir.join("stop");
    let attacker = as_nobody(PY)
        .arg(&attack)
        .arg(&notify)
        .arg(&stop)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first client starts the target, which waits; serve refuses the forgeries
    // meanwhile; then the target comes up, and the client is served.
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    wait_for("refusals counted while the target starts", || {
        status_once_written(name)["limits"]["notify_refused"].as_u64() > Some(0)
    });
    std::fs::write(&go, "").unwrap();
    let out = read_all(c, Duration::from_secs(60));
    std::fs::write(&stop, "").unwrap();
    let sent = String::from_utf8_lossy(&attacker.wait_with_output().unwrap().stdout)
        .trim()
        .parse::<u64>()
        .unwrap_or(0);
    println!(
        "escape[sockets]: tried {sent} READY=1 datagrams from uid 65534 to {notify} during a start -> the client read {:?}",
        out.trim()
    );
    assert!(sent > 0, "the attacker never reached the notify socket");
    assert_eq!(
        out,
        "served by the ready target\n",
        "serve believed a forged READY=1\n{}",
        serve.log()
    );
}

/// Item 11: a sandboxed target must not get a writable view of the host's /run through its
/// notify socket's bind mount.
#[test]
fn a_sandbox_cannot_write_into_the_hosts_run_through_its_notify_socket() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let mut f = Served::new("escape", "notifyrun");
    f.set("backend", q("127.0.0.1:8000"))
        .set("ready", q("notify"))
        .set("start_timeout", q("60s"))
        .set("stop_timeout", q("500ms"))
        .sandboxed()
        .command(&[
            "/bin/sh",
            "-c",
            "touch /run/bulkhead/notify/planted 2>/dev/null; echo touch-exit=$? >&2; exec sleep 600",
        ]);
    let name = &f.name;
    let serve = f.start();
    let _c = TcpStream::connect(("127.0.0.1", f.port)).unwrap();
    // The log shows the command line too: look for what the shell printed.
    let said = |v: &str| serve.log().contains(&format!("touch-exit={v}"));
    wait_for("the target's script", || said("0") || said("1"));
    let planted = Path::new("/run/bulkhead/sockets")
        .join(format!("{name}.notify"))
        .join("planted");
    let written = said("0") || planted.exists();
    println!(
        "escape[sockets]: tried creating a file in the notify socket's directory from inside the sandbox -> {}",
        if written {
            format!("written to the host's {}", planted.display())
        } else {
            "refused (read-only)".into()
        }
    );
    assert!(
        !written,
        "the sandbox wrote into the host's /run\n{}",
        serve.log()
    );
}

/// The limit tests' socket: its backend answers "pong LINE" to the first line of every
/// connection and holds idle connections as long as they stay open; it never idles out.
fn pong(base: &str) -> Served {
    let mut f = Served::new("escape", base);
    let backend = f.backend;
    f.set("idle_timeout", q("infinity")).python(
        "pong.py",
        &format!(
            r#"
import asyncio
async def handle(r, w):
    line = await r.readline()
    if line:
        w.write(b"pong " + line)
        await w.drain()
    w.close()
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", {backend}, backlog=4096)
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
"#
        ),
    );
    f
}

/// Send `msg` from 127.0.0.2 and read the answer, or an empty string after `timeout`.
fn other_client(port: u16, msg: &[u8], timeout: Duration) -> String {
    match connect_from([127, 0, 0, 2], port) {
        Ok(mut c) => {
            let _ = c.write_all(msg);
            read_all(c, timeout)
        }
        Err(e) => format!("connect failed: {e}"),
    }
}

/// Item 12: one client opens 1100 idle connections (more than max_connections); another
/// client must still be served.
#[test]
fn a_thousand_idle_connections_from_one_client_do_not_lock_out_another() {
    let Some(_suite) = crate::suite::cgroups_and(python_ok() && want_fds(4096)) else {
        return;
    };
    // Every limit at its default.
    let f = pong("idle");
    let (name, port) = (&f.name, f.port);
    let serve = f.start();
    let mut idle = Vec::new();
    for _ in 0..1100 {
        idle.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    wait_for("the target", || status(name)["state"] == "ready");
    // The other client comes once serve has taken the first client's share (not after a
    // pause in which it may not have got that far).
    wait_for("the first client at its share", || {
        status_once_written(name)["limits"]["per_source"].as_u64() > Some(0)
    });
    let out = other_client(port, b"ping\n", Duration::from_secs(60));
    let st = status(name);
    println!(
        "escape[sockets]: tried 1100 idle connections from 127.0.0.1, then one from 127.0.0.2 -> {} (active {}, refused per source {})",
        if out == "pong ping\n" {
            "served".to_string()
        } else {
            format!("not served: {out:?}")
        },
        st["connections_active"],
        st["limits"]["per_source"]
    );
    assert_eq!(out, "pong ping\n", "{}", serve.log());
    assert!(st["limits"]["per_source"].as_u64() > Some(0), "{st}");
    let text = bulkhead().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("max_connections_per_source"),
        "status does not say a limit was hit:\n{text}"
    );
    drop(idle);
}

/// Item 12: 400 connections that send half a PROXY header and wait: `serve` must not spin
/// on them, and another client must still be served.
#[test]
fn half_sent_proxy_headers_cost_no_cpu_and_are_timed_out() {
    let Some(_suite) = crate::suite::cgroups_and(python_ok() && want_fds(4096)) else {
        return;
    };
    let mut f = pong("slowloris");
    f.set("accept_proxy_protocol", "true");
    let (name, port) = (&f.name, f.port);
    let serve = f.start();
    let base = sockets_of(serve.pid());
    let mut slow = Vec::new();
    for _ in 0..400 {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"PROXY TCP4 192.0.2.1 ").unwrap();
        slow.push(c);
    }
    // The window opens once serve has taken all 400 (so it measures the wait, not the
    // accepts): it holds its share of them, and closed the rest at once (counted).
    wait_for("serve has taken the 400 connections", || {
        let closed = status_once_written(name)["limits"]["per_source"]
            .as_u64()
            .unwrap_or(0) as usize;
        sockets_of(serve.pid()).saturating_sub(base) + closed >= 400
    });
    let (c0, t0) = (cpu_time(serve.pid()), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let share = (cpu_time(serve.pid()) - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    let out = other_client(
        port,
        b"PROXY TCP4 192.0.2.9 192.0.2.1 5555 80\r\nping\n",
        Duration::from_secs(60),
    );
    // The default header timeout (5 s) closes them: long before the 60 s this waits.
    let t1 = Instant::now();
    let closed = read_all(slow.swap_remove(0), Duration::from_secs(60)).is_empty()
        && t1.elapsed() < Duration::from_secs(55);
    println!(
        "escape[sockets]: tried 400 half-sent PROXY headers from one client -> serve used {:.1}% of a CPU while they waited; another client {}; the first closed after {:.1} s",
        share * 100.0,
        if out == "pong ping\n" { "served" } else { "not served" },
        t1.elapsed().as_secs_f64()
    );
    assert!(
        share < 0.05,
        "serve spun on half-sent headers: {:.1}% CPU",
        share * 100.0
    );
    assert_eq!(out, "pong ping\n", "{}", serve.log());
    assert!(closed, "a half-sent header was not timed out");
    wait_for("timeouts counted", || {
        status(name)["limits"]["proxy_header_timeouts"].as_u64() > Some(0)
    });
}

/// Item 12: one client sends from 1500 source ports (serve's soft RLIMIT_NOFILE is the
/// common 1024); a fresh client must still get its answers.
#[test]
fn udp_from_1500_source_ports_does_not_drop_a_fresh_client() {
    let Some(_suite) = crate::suite::cgroups_and(python_ok() && want_fds(4096)) else {
        return;
    };
    let mut f = Served::new("escape", "udpflood");
    let (port, backend) = (f.port, f.backend);
    f.set("listen", arr(&[format!("udp:127.0.0.1:{port}")]))
        .set("backend", q(format!("udp:127.0.0.1:{backend}")))
        .set("ready", q("notify"))
        .set("idle_timeout", q("infinity"))
        .python(
            "echo.py",
            &format!(
                r#"
import os, socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", {backend}))
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"READY=1", os.environ["NOTIFY_SOCKET"])
while True:
    d, a = u.recvfrom(65536)
    u.sendto(d.upper(), a)
"#
            ),
        );
    let (name, plan) = (&f.name, f.plan());
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "ulimit -S -n 1024 && exec \"$@\"", "sh"])
        .arg(crate::common::bin())
        .arg("-c")
        .arg(&plan)
        .arg("serve")
        .env_remove("BULKHEAD_CONFIG")
        .env_remove("BULKHEAD_CGROUP_ROOT")
        .env_remove("NOTIFY_SOCKET");
    let serve = Serve::start_cmd(cmd, f.log());
    let mut flood = Vec::new();
    for i in 0..1500 {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        u.send_to(b"x", ("127.0.0.1", port)).unwrap();
        flood.push(u);
        // Paced, so that serve's receive buffer does not drop the datagrams.
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // The fresh client comes once the flood has pushed flows out (serve has worked through
    // it), not after a pause; it asks again while no answer comes (a datagram may be lost).
    wait_for("evictions counted", || {
        status_once_written(name)["limits"]["udp_flows_evicted"].as_u64() > Some(0)
    });
    let fresh = UdpSocket::bind("127.0.0.2:0").unwrap();
    fresh
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut answer = None;
    let mut buf = [0u8; 64];
    for _ in 0..120 {
        fresh.send_to(b"hello", ("127.0.0.1", port)).unwrap();
        if let Ok((n, _)) = fresh.recv_from(&mut buf) {
            answer = Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            break;
        }
    }
    println!(
        "escape[sockets]: tried UDP from 1500 source ports of 127.0.0.1, then a fresh client -> {}",
        match &answer {
            Some(a) => format!("answered {a:?}"),
            None => "no answer in 60 s".into(),
        }
    );
    assert_eq!(answer.as_deref(), Some("HELLO"), "{}", serve.log());
    drop(flood);
}
