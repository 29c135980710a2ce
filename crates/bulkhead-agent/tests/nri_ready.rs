//! The NRI plugin's readiness is the runtime's acceptance: `bulkhead-agent nri
//! --health-listen` answers /readyz 503 until the stub says the runtime synchronized with
//! the plugin, then 200 (the chart's readiness probe, docs/FLEET.md "When the plugin is not
//! running"). The stub here is a stand-in that sends `synchronized` when the test says so
//! (through a FIFO) and records the policy's answer; everything else is the real plugin
//! process and real HTTP.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WITHIN: Duration = Duration::from_secs(20);

/// The status code of GET `path` on 127.0.0.1:`port` (None: no answer).
fn status(port: u16, path: &str) -> Option<u16> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    c.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    c.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

/// Poll `f` every 10 ms until it gives a value, at most [`WITHIN`].
fn wait_for<T>(what: &str, f: impl Fn() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < WITHIN, "{what}: not within {WITHIN:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        // SIGTERM ends the plugin at once; its stub sees stdin closed.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// The stand-in stub: waits for a line on the FIFO, says `synchronized`, keeps the answer.
fn fake_stub(dir: &Path) -> PathBuf {
    let script = dir.join("stub.sh");
    let fifo = dir.join("go");
    let answer = dir.join("answer");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nread go < '{}'\necho '{{\"seq\":1,\"event\":\"synchronized\"}}'\nread a\necho \"$a\" > '{}.tmp'\nmv '{}.tmp' '{}'\nexec cat > /dev/null\n",
            fifo.display(),
            answer.display(),
            answer.display(),
            answer.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    script
}

#[test]
fn the_plugin_is_ready_once_the_runtime_synchronized() {
    let dir = std::env::temp_dir().join(format!("bulkhead-nri-ready-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let stub = fake_stub(&dir);
    let port = bulkhead_testkit::net::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_bulkhead-agent"))
        .arg("nri")
        .arg("--stub")
        .arg(&stub)
        .arg("--socket")
        .arg(dir.join("nri.sock"))
        .arg("--state-dir")
        .arg(&dir)
        .arg("--health-listen")
        .arg(format!("127.0.0.1:{port}"))
        .env_remove("NODE_NAME")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _plugin = Plugin(child);
    // Alive, and not ready: the runtime has not accepted it yet.
    wait_for("/healthz 200", || {
        (status(port, "/healthz")? == 200).then_some(())
    });
    assert_eq!(status(port, "/readyz"), Some(503));
    // The runtime synchronizes (the stub is told through its FIFO; opening it blocks until
    // the stub reads, so it is opened by a thread and awaited with a deadline).
    let fifo = dir.join("go");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .and_then(|mut f| f.write_all(b"go\n"));
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    rx.recv_timeout(WITHIN)
        .expect("the stub never opened its FIFO")
        .unwrap();
    wait_for("/readyz 200", || {
        (status(port, "/readyz")? == 200).then_some(())
    });
    let answer = wait_for("the stub's answer", || {
        std::fs::read_to_string(dir.join("answer")).ok()
    });
    let v: serde_json::Value = serde_json::from_str(answer.trim()).unwrap();
    assert_eq!(v, serde_json::json!({"seq": 1}), "{answer}");
    drop(_plugin);
    let _ = std::fs::remove_dir_all(&dir);
}
