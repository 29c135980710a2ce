//! What the activation benches read and do at `bulkhead serve`'s sockets: the plan's slices
//! applied under the bench's cgroup root, the state file a socket's status is in, waiting for
//! a state (stopped or frozen), and one timed GET.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// bulkhead's global options for a plan under the bench's own cgroup root.
pub fn scope(cgroup_root: &str) -> [&str; 4] {
    ["--backend", "cgroupfs", "--cgroup-root", cgroup_root]
}

/// `bulkhead apply` of `plan` under `cgroup_root` (the slices its frozen targets need).
pub fn apply(bulkhead: &Path, plan: &Path, cgroup_root: &str) -> Result<(), String> {
    let out = Command::new(bulkhead)
        .args(scope(cgroup_root))
        .arg("-c")
        .arg(plan)
        .args(["apply", "-q"])
        .output()
        .map_err(|e| format!("bulkhead apply: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("bulkhead apply of {}: {err}", plan.display()));
    }
    Ok(())
}

/// How long a socket may take to reach the state a wait asks for.
const WITHIN: Duration = Duration::from_secs(30);

/// The socket's status as `serve` writes it (/run/bulkhead/sockets/NAME.json).
pub fn status(name: &str) -> Option<serde_json::Value> {
    let t = std::fs::read_to_string(format!("/run/bulkhead/sockets/{name}.json")).ok()?;
    serde_json::from_str(&t).ok()
}

/// Poll the socket's status every 2 ms until `done` says so, or fail after [`WITHIN`]
/// saying `what` was awaited.
fn wait_for<T>(
    name: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> Option<T>,
) -> Result<T, String> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = status(name).as_ref().and_then(&done) {
            return Ok(v);
        }
        if t0.elapsed() > WITHIN {
            let now = status(name).map_or("no status file".into(), |s| s["state"].to_string());
            return Err(format!(
                "socket {name} did not {what} within {} s (state: {now})",
                WITHIN.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Wait until the socket's target is stopped (state idle, no process).
pub fn wait_idle(name: &str) -> Result<(), String> {
    wait_for(name, "go idle", |s| {
        (s["state"] == "idle" && s["target_pid"].is_null()).then_some(())
    })
}

/// Wait until the socket's target is frozen for the `seen + 1`th time or later (a thaw
/// since `seen` was read must be followed by a new freeze); returns the freezes counted.
pub fn wait_frozen(name: &str, seen: u64) -> Result<u64, String> {
    wait_for(name, "freeze its idle target", |s| {
        let n = s["freezes"].as_u64()?;
        (s["state"] == "frozen" && n > seen).then_some(n)
    })
}

/// Connect, send a GET, return (time to first byte, the whole answer).
pub fn get(port: u16, path: &str) -> std::io::Result<(Duration, Vec<u8>)> {
    let t0 = Instant::now();
    let mut c = TcpStream::connect(("127.0.0.1", port))?;
    c.set_read_timeout(Some(Duration::from_secs(30)))?;
    c.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())?;
    let mut first = [0u8; 1];
    let n = c.read(&mut first)?;
    let ttfb = t0.elapsed();
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed without an answer",
        ));
    }
    let mut rest = first.to_vec();
    c.read_to_end(&mut rest)?;
    Ok((ttfb, rest))
}
