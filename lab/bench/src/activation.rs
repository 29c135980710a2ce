//! `bench activation`: socket activation measured against a direct connection and
//! systemd-socket-proxyd, side by side in one run.
//!
//! 1. Cold start: connect to an idle socket whose target is busybox httpd in an ephemeral
//!    sandbox (and, for reference, as a plain command); time to the first response byte.
//!    `idle_timeout = 0` stops the target after each request, so every sample is cold.
//!    Beside them the same two targets kept frozen when idle (`on_idle = "freeze"`, in a
//!    slice of the bench's own cgroup root): each sample a thaw. The floor of both is the
//!    direct connection's warm request (step 3).
//! 2. Bursts: 100 clients connect at once to the idle sandboxed socket; every one must get
//!    its answer (none refused, none reset).
//! 3. Warm request latency and 4. bulk throughput: the same backend server (this process's
//!    own, so all peers reach one server) reached directly, through `bulkhead serve` (proxy
//!    mode) and through systemd-socket-proxyd (started by systemd-socket-activate), in
//!    rotated order each round.

use crate::env::Env;
use crate::sockets::{get, status, wait_frozen, wait_idle};
use crate::stats;
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

pub const SOCKET_PROXYD: &str = "/lib/systemd/systemd-socket-proxyd";
pub const SOCKET_ACTIVATE: &str = "/usr/bin/systemd-socket-activate";

pub struct Spec {
    pub bulkhead: PathBuf,
    /// This benchmarks binary (it is also the backend server every peer reaches).
    pub bench: PathBuf,
    pub cold_runs: usize,
    pub bursts: usize,
    pub burst_clients: usize,
    pub rounds: usize,
    pub requests: usize,
    pub bulk_bytes: u64,
    /// The warm socket's pipe_size (None: bulkhead's default).
    pub pipe_size: Option<String>,
    pub progress: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Dist {
    pub name: String,
    /// How many samples were taken.
    pub n: usize,
    /// The samples, sorted (left out of the report for the per-request latencies: thousands).
    pub samples: Vec<f64>,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Dist {
    fn new(name: &str, mut samples: Vec<f64>) -> Dist {
        samples.sort_by(|a, b| a.total_cmp(b));
        let q = |f: f64| stats::rank(&samples, f);
        Dist {
            name: name.into(),
            n: samples.len(),
            median: q(0.5),
            p10: q(0.1),
            p90: q(0.9),
            p99: q(0.99),
            samples,
        }
    }
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Burst {
    pub rounds: usize,
    pub clients: usize,
    pub answered: usize,
    pub refused: usize,
    pub reset: usize,
    pub other: usize,
    /// The slowest client of each burst, ms.
    pub slowest_ms: Vec<f64>,
}

pub use crate::report::Check;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: String,
    /// Time to first byte of a cold start, ms: sandboxed httpd, plain httpd.
    pub cold: Vec<Dist>,
    /// The target's own start-to-ready time as `serve` measured it, ms.
    pub cold_ready_ms: Vec<Dist>,
    pub burst: Burst,
    /// Warm request latency (connect, GET, read to EOF), µs: direct, bulkhead, socket-proxyd.
    pub warm_us: Vec<Dist>,
    /// Bulk throughput per round, GB/s.
    pub bulk_gbps: Vec<Dist>,
    /// Per-round throughput ratios between peers (p10/p90 as the spread).
    pub bulk_ratios: Vec<Dist>,
    pub bulk_bytes: u64,
    pub checks: Vec<Check>,
    pub skipped: Vec<String>,
}

/// Everything the run made, removed on drop (also on an error or a panic).
struct Setup {
    dir: PathBuf,
    children: Vec<Child>,
    names: Vec<String>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        // Last started first: serve (which stops its targets) before the backend.
        for c in self.children.iter_mut().rev() {
            crate::child::stop(c, libc::SIGTERM, Duration::from_secs(20));
        }
        for n in &self.names {
            let _ = std::fs::remove_file(format!("/run/bulkhead/sockets/{n}.json"));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const SMALL: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Length: 13\r\n\r\nhello, world\n";

/// The backend for warm and bulk runs (`bulkhead bench backend`): `GET /bulk` streams zeros
/// until the client closes, anything else gets a small response; a thread per connection.
/// Serves on `listener` until the process ends.
pub fn serve_backend(listener: TcpListener) -> ! {
    for c in listener.incoming() {
        let Ok(mut c) = c else { continue };
        std::thread::spawn(move || {
            let _ = c.set_nodelay(true);
            let mut buf = [0u8; 1024];
            let Ok(n) = c.read(&mut buf) else { return };
            if buf[..n].starts_with(b"GET /bulk") {
                let chunk = vec![0u8; 256 << 10];
                while c.write_all(&chunk).is_ok() {}
            } else {
                let _ = c.write_all(SMALL);
            }
        });
    }
    std::process::exit(0)
}

fn busybox_root(dir: &Path) -> Result<PathBuf, String> {
    let root = dir.join("root");
    for d in ["bin", "etc", "proc", "sys", "dev", "tmp", "www"] {
        std::fs::create_dir_all(root.join(d)).map_err(|e| e.to_string())?;
    }
    let out = Command::new("ldd")
        .arg("/bin/busybox")
        .output()
        .map_err(|e| format!("ldd: {e}"))?;
    if String::from_utf8_lossy(&out.stdout).contains("=>") {
        return Err("/bin/busybox is not static (apt install busybox-static)".into());
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).map_err(|e| e.to_string())?;
    for a in ["httpd", "sh"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(a))
            .map_err(|e| e.to_string())?;
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n")
        .map_err(|e| e.to_string())?;
    std::fs::write(root.join("etc/group"), "root:x:0:\n").map_err(|e| e.to_string())?;
    std::fs::write(root.join("www/index.html"), "hello, world\n").map_err(|e| e.to_string())?;
    Ok(root)
}

fn bulk(port: u16, bytes: u64) -> std::io::Result<f64> {
    let mut c = TcpStream::connect(("127.0.0.1", port))?;
    c.set_read_timeout(Some(Duration::from_secs(60)))?;
    c.write_all(b"GET /bulk HTTP/1.0\r\n\r\n")?;
    let mut buf = vec![0u8; 256 << 10];
    let mut got = 0u64;
    let t0 = Instant::now();
    while got < bytes {
        let n = c.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "stream ended early",
            ));
        }
        got += n as u64;
    }
    Ok(got as f64 / t0.elapsed().as_secs_f64() / 1e9)
}

fn with_pdeathsig(cmd: &mut Command) -> &mut Command {
    bulkhead_sys::process::pdeathsig_before_exec(cmd, libc::SIGTERM);
    cmd
}

/// The ports of one run.
struct Ports {
    /// The bench's own backend server.
    backend: u16,
    sandbox: u16,
    plain: u16,
    /// The frozen-when-idle sockets.
    sandbox_frozen: u16,
    plain_frozen: u16,
    warm: u16,
    pass: u16,
    proxyd: u16,
    /// The plain cold target's httpd.
    plain_backend: u16,
    /// The plain frozen target's httpd.
    plain_frozen_backend: u16,
}

/// The sockets of one run, by name.
struct Names {
    sandbox: String,
    plain: String,
    sandbox_frozen: String,
    plain_frozen: String,
    warm: String,
    pass: String,
}

/// What a run started and how to reach it.
struct Rig {
    setup: Setup,
    /// The cgroup root of the frozen targets' slice: removed after `serve` stopped (fields
    /// drop in order).
    _env: Env,
    ports: Ports,
    names: Names,
    have_proxyd: bool,
    skipped: Vec<String>,
}

impl Rig {
    fn dir(&self) -> &Path {
        &self.setup.dir
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir().join(name)).unwrap_or_default()
    }
}

fn progress(spec: &Spec, m: &str) {
    if spec.progress {
        eprintln!("bench activation: {m}");
    }
}

/// The slice of the frozen-when-idle targets (a freeze needs the target in a slice).
const FROZEN_SLICE: &str = "bench-frozen";

/// How long a frozen-when-idle target runs after its last connection before it is frozen.
const FREEZE_AFTER: &str = "100ms";

/// The plan `bulkhead serve` runs: the two cold targets, the warm socket, pass mode and the
/// frozen targets ([`frozen_text`]).
fn plan_text(spec: &Spec, root: &Path, ports: &Ports, names: &Names) -> String {
    let (n_sb, n_plain, n_warm, n_pass) = (&names.sandbox, &names.plain, &names.warm, &names.pass);
    let (p_sb, p_plain, p_warm, p_pass) = (ports.sandbox, ports.plain, ports.warm, ports.pass);
    let (b, b_plain) = (ports.backend, ports.plain_backend);
    let frozen = frozen_text(root, ports, names);
    format!(
        r#"# bench activation
{frozen}
[socket.{n_sb}]
listen = ["127.0.0.1:{p_sb}"]
backend = "127.0.0.1:8000"
idle_timeout = "0"
[socket.{n_sb}.target]
rootfs = "{root}"
command = ["/bin/httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"]

[socket.{n_plain}]
listen = ["127.0.0.1:{p_plain}"]
backend = "127.0.0.1:{b_plain}"
idle_timeout = "0"
[socket.{n_plain}.target]
command = ["/bin/busybox", "httpd", "-f", "-p", "127.0.0.1:{b_plain}", "-h", "{www}"]

# The warm socket's backend is the bench's own server (all peers reach the same server); its
# target only has to exist.
[socket.{n_warm}]
listen = ["127.0.0.1:{p_warm}"]
backend = "127.0.0.1:{b}"
idle_timeout = "infinity"
{pipe}
[socket.{n_warm}.target]
command = ["/bin/sleep", "infinity"]

# Pass mode: the same backend program gets the listening socket; bulkhead is out of the path.
[socket.{n_pass}]
listen = ["127.0.0.1:{p_pass}"]
mode = "pass"
[socket.{n_pass}.target]
command = ["{bench}", "backend", "--listen-fd", "3"]
"#,
        bench = spec.bench.display(),
        root = root.display(),
        www = root.join("www").display(),
        pipe = spec
            .pipe_size
            .as_ref()
            .map_or(String::new(), |p| format!("pipe_size = \"{p}\"")),
    )
}

/// The frozen-when-idle twins of the two cold targets, in [`FROZEN_SLICE`]; one client at a
/// time, so few connections (serve's descriptors at its limits must fit RLIMIT_NOFILE).
fn frozen_text(root: &Path, ports: &Ports, names: &Names) -> String {
    let (n_sb, n_plain) = (&names.sandbox_frozen, &names.plain_frozen);
    let (p_sb, p_plain, b_plain) = (
        ports.sandbox_frozen,
        ports.plain_frozen,
        ports.plain_frozen_backend,
    );
    format!(
        r#"[slice.{FROZEN_SLICE}]
CPUWeight = 100

[socket.{n_sb}]
listen = ["127.0.0.1:{p_sb}"]
backend = "127.0.0.1:8000"
idle_timeout = "{FREEZE_AFTER}"
on_idle = "freeze"
max_connections = 64
[socket.{n_sb}.target]
rootfs = "{root}"
slice = "{FROZEN_SLICE}"
command = ["/bin/httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"]

[socket.{n_plain}]
listen = ["127.0.0.1:{p_plain}"]
backend = "127.0.0.1:{b_plain}"
idle_timeout = "{FREEZE_AFTER}"
on_idle = "freeze"
max_connections = 64
[socket.{n_plain}.target]
slice = "{FROZEN_SLICE}"
command = ["/bin/busybox", "httpd", "-f", "-p", "127.0.0.1:{b_plain}", "-h", "{www}"]
"#,
        root = root.display(),
        www = root.join("www").display(),
    )
}

/// The backend, `bulkhead serve` with the plan, and systemd-socket-proxyd where installed;
/// returns once everything listens and the cold targets are idle.
fn start(spec: &Spec) -> Result<Rig, String> {
    let tag = std::process::id();
    let dir = PathBuf::from(format!("/var/tmp/bulkhead-bench-activation-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut setup = Setup {
        dir: dir.clone(),
        children: Vec::new(),
        names: Vec::new(),
    };
    let root = busybox_root(&dir)?;
    let ports = Ports {
        backend: crate::redis::free_port()?,
        sandbox: crate::redis::free_port()?,
        plain: crate::redis::free_port()?,
        warm: crate::redis::free_port()?,
        pass: crate::redis::free_port()?,
        proxyd: crate::redis::free_port()?,
        plain_backend: crate::redis::free_port()?,
        sandbox_frozen: crate::redis::free_port()?,
        plain_frozen: crate::redis::free_port()?,
        plain_frozen_backend: crate::redis::free_port()?,
    };
    // The one backend server every warm peer reaches (pass mode starts its own copy).
    setup.children.push(
        with_pdeathsig(
            Command::new(&spec.bench)
                .args(["backend", "--listen"])
                .arg(format!("127.0.0.1:{}", ports.backend))
                .stdout(Stdio::null()),
        )
        .spawn()
        .map_err(|e| format!("cannot start the backend: {e}"))?,
    );
    let names = Names {
        sandbox: format!("bench-cold-sandbox-{tag}"),
        plain: format!("bench-cold-plain-{tag}"),
        warm: format!("bench-warm-{tag}"),
        pass: format!("bench-pass-{tag}"),
        sandbox_frozen: format!("bench-frozen-sandbox-{tag}"),
        plain_frozen: format!("bench-frozen-plain-{tag}"),
    };
    setup.names = vec![
        names.sandbox.clone(),
        names.plain.clone(),
        names.warm.clone(),
        names.pass.clone(),
        names.sandbox_frozen.clone(),
        names.plain_frozen.clone(),
    ];
    let plan_path = dir.join("plan.toml");
    std::fs::write(&plan_path, plan_text(spec, &root, &ports, &names))
        .map_err(|e| e.to_string())?;
    // The frozen targets' slice, under a cgroup root of the bench's own.
    crate::env::clean_stale();
    let env = Env::create()?;
    crate::sockets::apply(&spec.bulkhead, &plan_path, &env.cgroup_root)?;
    let log = std::fs::File::create(dir.join("serve.log")).map_err(|e| e.to_string())?;
    setup.children.push(
        with_pdeathsig(
            Command::new(&spec.bulkhead)
                .args(crate::sockets::scope(&env.cgroup_root))
                .arg("-c")
                .arg(&plan_path)
                .arg("serve")
                .env_remove("NOTIFY_SOCKET")
                .stdout(Stdio::null())
                .stderr(log),
        )
        .spawn()
        .map_err(|e| format!("cannot start bulkhead serve: {e}"))?,
    );
    let mut rig = Rig {
        setup,
        _env: env,
        ports,
        names,
        have_proxyd: Path::new(SOCKET_PROXYD).exists() && Path::new(SOCKET_ACTIVATE).exists(),
        skipped: Vec::new(),
    };
    start_proxyd(&mut rig)?;
    wait_listening(&rig)?;
    // Those probe connections started nothing that lingers: wait for idle.
    wait_idle(&rig.names.sandbox)?;
    wait_idle(&rig.names.plain)?;
    // The frozen targets' one cold start, then their first freeze.
    for (name, port) in [
        (&rig.names.sandbox_frozen, rig.ports.sandbox_frozen),
        (&rig.names.plain_frozen, rig.ports.plain_frozen),
    ] {
        get(port, "/index.html")
            .map_err(|e| format!("first start of {name}: {e}\n{}", rig.log("serve.log")))?;
        wait_frozen(name, 0)?;
    }
    Ok(rig)
}

/// systemd-socket-proxyd in front of the backend, started as systemd would; skipped (and
/// said so) where it is not installed.
fn start_proxyd(rig: &mut Rig) -> Result<(), String> {
    if !rig.have_proxyd {
        rig.skipped.push(format!(
            "systemd-socket-proxyd: {SOCKET_PROXYD} or {SOCKET_ACTIVATE} missing (apt install systemd)"
        ));
        return Ok(());
    }
    let mut cmd = Command::new(SOCKET_ACTIVATE);
    // As systemd starts it (IgnoreSIGPIPE=yes): a client that closes mid-transfer must be
    // an EPIPE for the proxy, not its death.
    bulkhead_sys::process::ignore_before_exec(&mut cmd, libc::SIGPIPE);
    let log = std::fs::File::create(rig.dir().join("proxyd.log")).map_err(|e| e.to_string())?;
    rig.setup.children.push(
        with_pdeathsig(
            cmd.arg("-l")
                .arg(format!("127.0.0.1:{}", rig.ports.proxyd))
                .arg(SOCKET_PROXYD)
                .arg(format!("127.0.0.1:{}", rig.ports.backend))
                .stdout(Stdio::null())
                .stderr(log),
        )
        .spawn()
        .map_err(|e| format!("cannot start systemd-socket-activate: {e}"))?,
    );
    Ok(())
}

/// Wait until everything listens (10 s at the most).
fn wait_listening(rig: &Rig) -> Result<(), String> {
    let p = &rig.ports;
    let t0 = Instant::now();
    for p in [
        p.backend,
        p.sandbox,
        p.plain,
        p.warm,
        p.pass,
        p.sandbox_frozen,
        p.plain_frozen,
    ]
    .into_iter()
    .chain(rig.have_proxyd.then_some(p.proxyd))
    {
        while TcpStream::connect(("127.0.0.1", p)).is_err() {
            if t0.elapsed() > Duration::from_secs(10) {
                let log = rig.log("serve.log");
                return Err(format!("nothing listens on port {p} after 10 s:\n{log}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(())
}

/// A target of step 1: its socket, and whether it is frozen when idle (each sample a thaw)
/// or stopped (each sample a cold start).
struct Target<'a> {
    name: &'a str,
    port: u16,
    frozen: bool,
}

/// Step 1's targets, in the report's order: cold sandboxed, cold plain, then their frozen
/// twins.
fn targets(rig: &Rig) -> [Target<'_>; 4] {
    let (n, p) = (&rig.names, &rig.ports);
    let t = |name, port, frozen| Target { name, port, frozen };
    [
        t(n.sandbox.as_str(), p.sandbox, false),
        t(n.plain.as_str(), p.plain, false),
        t(n.sandbox_frozen.as_str(), p.sandbox_frozen, true),
        t(n.plain_frozen.as_str(), p.plain_frozen, true),
    ]
}

/// First bytes (ms) and what `serve` measured itself (ms: a cold target's start to ready, a
/// frozen one's thaw), per target of [`targets`].
type Starts = (Vec<Vec<f64>>, Vec<Vec<f64>>);

/// Step 1, cold starts and thaws, the targets rotated each round: each sample is taken with
/// its target stopped (or frozen anew since the last), and waits for that again after.
fn cold_starts(spec: &Spec, rig: &Rig) -> Result<Starts, String> {
    progress(
        spec,
        &format!("{} cold starts and thaws per target", spec.cold_runs),
    );
    let targets = targets(rig);
    let mut first = vec![Vec::new(); targets.len()];
    let mut own = vec![Vec::new(); targets.len()];
    // Per frozen target, the freezes counted before its last sample: the next sample waits
    // for one more (the freeze after that sample's thaw).
    let mut seen = vec![0u64; targets.len()];
    for i in 0..spec.cold_runs {
        if crate::stop::requested() {
            return Err("stopped".into());
        }
        for k in 0..targets.len() {
            let j = (i + k) % targets.len();
            let t = &targets[j];
            let settle = |seen: u64| -> Result<u64, String> {
                if t.frozen {
                    wait_frozen(t.name, seen)
                } else {
                    wait_idle(t.name).map(|_| 0)
                }
            };
            seen[j] = settle(seen[j])?;
            let (ttfb, body) = get(t.port, "/index.html")
                .map_err(|e| format!("first byte of {}: {e}\n{}", t.name, rig.log("serve.log")))?;
            if !String::from_utf8_lossy(&body).contains("hello, world") {
                return Err(format!("first byte of {}: unexpected answer", t.name));
            }
            first[j].push(ttfb.as_secs_f64() * 1e3);
            settle(seen[j])?;
            let key = if t.frozen {
                "last_thaw_ms"
            } else {
                "last_start_ms"
            };
            if let Some(ms) = status(t.name).and_then(|s| s[key].as_f64()) {
                own[j].push(ms);
            }
        }
    }
    Ok((first, own))
}

/// Step 2, bursts of clients on the idle sandboxed socket.
fn bursts(spec: &Spec, rig: &Rig) -> Result<Burst, String> {
    progress(
        spec,
        &format!(
            "{} bursts of {} clients at a cold start",
            spec.bursts, spec.burst_clients
        ),
    );
    let mut burst = Burst {
        rounds: spec.bursts,
        clients: spec.burst_clients,
        ..Default::default()
    };
    for _ in 0..spec.bursts {
        wait_idle(&rig.names.sandbox)?;
        one_burst(rig.ports.sandbox, spec.burst_clients, &mut burst)?;
    }
    Ok(burst)
}

/// `clients` connect at once; each outcome counted, the slowest client's time kept.
fn one_burst(port: u16, clients: usize, burst: &mut Burst) -> Result<(), String> {
    let barrier = Arc::new(Barrier::new(clients));
    let hs: Vec<_> = (0..clients)
        .map(|_| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                let t0 = Instant::now();
                (get(port, "/index.html"), t0.elapsed())
            })
        })
        .collect();
    let mut slowest = 0f64;
    for h in hs {
        let (r, took) = h.join().map_err(|_| "a client thread panicked")?;
        slowest = slowest.max(took.as_secs_f64() * 1e3);
        match r {
            Ok((_, body)) if String::from_utf8_lossy(&body).contains("hello, world") => {
                burst.answered += 1
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => burst.refused += 1,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                burst.reset += 1
            }
            _ => burst.other += 1,
        }
    }
    burst.slowest_ms.push(slowest);
    Ok(())
}

/// The warm peers: the same backend reached directly, through serve, socket-proxyd (where
/// installed) and pass mode.
fn peers(rig: &Rig) -> Vec<(&'static str, u16)> {
    let mut peers: Vec<(&str, u16)> = vec![
        ("direct", rig.ports.backend),
        ("bulkhead serve", rig.ports.warm),
    ];
    if rig.have_proxyd {
        peers.push(("systemd-socket-proxyd", rig.ports.proxyd));
    }
    peers.push(("bulkhead serve, pass mode", rig.ports.pass));
    peers
}

/// Per peer: warm request latencies (µs), and bulk throughput per round (GB/s).
type WarmAndBulk = (Vec<Vec<f64>>, Vec<Vec<f64>>);

/// Steps 3 and 4, warm latency and bulk throughput per peer, peers rotated each round.
fn warm_and_bulk(spec: &Spec, rig: &Rig, peers: &[(&str, u16)]) -> Result<WarmAndBulk, String> {
    // Warm up: the warm socket's target and socket-proxyd start on their first connection.
    for (_, p) in peers {
        for _ in 0..20 {
            get(*p, "/").map_err(|e| {
                let log = rig.log("proxyd.log");
                format!("warm-up of port {p}: {e}\nsystemd-socket-activate's log:\n{log}")
            })?;
        }
    }
    let mut warm: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    let mut thr: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    for r in 0..spec.rounds {
        if crate::stop::requested() {
            return Err("stopped".into());
        }
        progress(
            spec,
            &format!(
                "round {}/{}: {} requests and {} MB per peer",
                r + 1,
                spec.rounds,
                spec.requests,
                spec.bulk_bytes >> 20
            ),
        );
        for k in 0..peers.len() {
            let j = (r + k) % peers.len();
            let port = peers[j].1;
            for _ in 0..spec.requests {
                let t0 = Instant::now();
                let (_, body) = get(port, "/").map_err(|e| {
                    let logs = rig.log("serve.log") + &rig.log("proxyd.log");
                    format!("{}: {e}\n{logs}", peers[j].0)
                })?;
                warm[j].push(t0.elapsed().as_secs_f64() * 1e6);
                if body != SMALL {
                    return Err(format!("{}: unexpected answer", peers[j].0));
                }
            }
            thr[j].push(bulk(port, spec.bulk_bytes).map_err(|e| format!("{}: {e}", peers[j].0))?);
            if crate::stop::requested() {
                return Err("stopped".into());
            }
        }
    }
    Ok((warm, thr))
}

/// Ratios within each round (peers ran back to back there), then their median: the
/// machine's drift between rounds cancels out. Each with its check.
fn bulk_ratios(peers: &[(&str, u16)], thr: &[Vec<f64>], checks: &mut Vec<Check>) -> Vec<Dist> {
    let idx = |n: &str| peers.iter().position(|p| p.0 == n);
    let mut pairs = vec![(1, 0, 0.90)];
    if let Some(p) = idx("bulkhead serve, pass mode") {
        pairs.push((p, 0, 0.90));
    }
    if let Some(p) = idx("systemd-socket-proxyd") {
        pairs.push((1, p, 1.00));
    }
    let mut out = Vec::new();
    for (a, b, target) in pairs {
        let r: Vec<f64> = thr[a].iter().zip(&thr[b]).map(|(x, y)| x / y).collect();
        let d = Dist::new(&format!("{} / {}", peers[a].0, peers[b].0), r);
        checks.push(Check {
            what: format!("bulk throughput {}, median of per-round ratios", d.name),
            target: format!(">= {target:.2}"),
            measured: format!("{:.3} [{:.3}-{:.3}]", d.median, d.p10, d.p90),
            met: d.median >= target,
        });
        out.push(d);
    }
    out
}

/// Step 1's lines, in the order of [`targets`]: first byte, then `serve`'s own measure.
const COLD: [&str; 4] = [
    "sandboxed busybox httpd (ephemeral overlay root)",
    "plain busybox httpd",
    "sandboxed busybox httpd, frozen when idle: thaw",
    "plain busybox httpd, frozen when idle: thaw",
];
const OWN: [&str; 4] = [
    "sandboxed: target start to ready",
    "plain: target start to ready",
    "sandboxed, frozen: thaw (serve's own)",
    "plain, frozen: thaw (serve's own)",
];

/// The issue's targets for a thaw (a plain server's next first byte within 3 ms), each
/// beside its cold start in this run and the floor: a request to a running server over a
/// direct connection.
fn thaw_checks(cold: &[Dist], floor_us: &Dist, checks: &mut Vec<Check>) {
    let floor = floor_us.median / 1e3;
    for (thaw, start, what, target) in [
        (&cold[3], &cold[1], "plain", 3.0),
        (&cold[2], &cold[0], "sandboxed", 3.0),
    ] {
        checks.push(Check {
            what: format!("{what} busybox httpd frozen when idle: first byte after a thaw (cold start; floor a direct request)"),
            target: format!("<= {target:.0} ms"),
            measured: format!(
                "{:.2} ms ({:.3}x of the cold start's {:.2} ms; floor {floor:.2} ms)",
                thaw.median,
                thaw.median / start.median,
                start.median
            ),
            met: thaw.median <= target,
        });
    }
}

/// The cold start's and the bursts' checks.
fn cold_checks(spec: &Spec, cold: &Dist, burst: &Burst, checks: &mut Vec<Check>) {
    checks.push(Check {
        what: "cold start, sandboxed httpd, median time to first byte".into(),
        target: "< 30 ms".into(),
        measured: format!("{:.2} ms", cold.median),
        met: cold.median < 30.0,
    });
    checks.push(Check {
        what: format!(
            "{} clients at once during a cold start: refused or reset",
            spec.burst_clients
        ),
        target: "0".into(),
        measured: format!(
            "{} refused, {} reset, {} other of {}",
            burst.refused,
            burst.reset,
            burst.other,
            spec.bursts * spec.burst_clients
        ),
        met: burst.refused + burst.reset + burst.other == 0,
    });
}

pub fn run(spec: &Spec) -> Result<Report, String> {
    let mut rig = start(spec)?;
    let (first, own) = cold_starts(spec, &rig)?;
    let burst = bursts(spec, &rig)?;
    let peers = peers(&rig);
    let (warm, thr) = warm_and_bulk(spec, &rig, &peers)?;
    let cold: Vec<Dist> = COLD
        .iter()
        .zip(first)
        .map(|(n, s)| Dist::new(n, s))
        .collect();
    let cold_ready_ms: Vec<Dist> = OWN.iter().zip(own).map(|(n, s)| Dist::new(n, s)).collect();
    let warm_us: Vec<Dist> = peers
        .iter()
        .zip(warm)
        .map(|((n, _), s)| {
            let mut d = Dist::new(n, s);
            d.samples = Vec::new();
            d
        })
        .collect();
    let mut checks = Vec::new();
    let bulk_ratios = bulk_ratios(&peers, &thr, &mut checks);
    let bulk_gbps: Vec<Dist> = peers
        .iter()
        .zip(thr)
        .map(|((n, _), s)| Dist::new(n, s))
        .collect();
    cold_checks(spec, &cold[0], &burst, &mut checks);
    thaw_checks(&cold, &warm_us[0], &mut checks);
    let machine = crate::report::machine();
    let skipped = std::mem::take(&mut rig.skipped);
    drop(rig);
    Ok(Report {
        machine,
        cold,
        cold_ready_ms,
        burst,
        warm_us,
        bulk_gbps,
        bulk_ratios,
        bulk_bytes: spec.bulk_bytes,
        checks,
        skipped,
    })
}

/// Peers against the first (the direct connection): a header (what, the count, three
/// figure columns, "vs direct"), then per peer its name, count, the three figures
/// (`figures`: decimals and how to pick them) and its median over the first's (`ratio`
/// spells it).
fn against_direct(
    s: &mut String,
    head: [&str; 5],
    ds: &[Dist],
    figures: (usize, fn(&Dist) -> [f64; 3]),
    ratio: fn(f64) -> String,
) {
    let [what, count, a, b, c] = head;
    s.push_str(&format!(
        "\n{what:<28} {count:>8} {a:>10} {b:>10} {c:>10} {:>9}\n",
        "vs direct"
    ));
    let (prec, pick) = figures;
    let first = ds.first().map_or(f64::NAN, |d| d.median);
    for d in ds {
        let [x, y, z] = pick(d);
        s.push_str(&format!(
            "{:<28} {:>8} {x:>10.prec$} {y:>10.prec$} {z:>10.prec$} {}\n",
            d.name,
            d.n,
            ratio(d.median / first)
        ));
    }
}

pub fn text(r: &Report) -> String {
    let mut s = format!("bench activation\nmachine: {}\n\n", r.machine);
    s.push_str(&format!(
        "{:<52} {:>6} {:>9} {:>9} {:>9}\n",
        "cold start or thaw: connect to first byte (ms)", "runs", "median", "p10", "p90"
    ));
    for d in r.cold.iter().chain(&r.cold_ready_ms) {
        s.push_str(&format!(
            "{:<52} {:>6} {:>9.2} {:>9.2} {:>9.2}\n",
            d.name, d.n, d.median, d.p10, d.p90
        ));
    }
    if let Some(d) = r.warm_us.first() {
        s.push_str(&format!(
            "{:<52} {:>6} {:>9.2} {:>9.2} {:>9.2}\n",
            "floor: a running server, direct (warm request)",
            d.n,
            d.median / 1e3,
            d.p10 / 1e3,
            d.p90 / 1e3
        ));
    }
    let b = &r.burst;
    s.push_str(&format!(
        "\nbursts: {} x {} clients at once on the idle sandboxed socket: {} answered, {} refused, {} reset, {} other; slowest client per burst (ms): {}\n",
        b.rounds,
        b.clients,
        b.answered,
        b.refused,
        b.reset,
        b.other,
        b.slowest_ms.iter().map(|v| format!("{v:.1}")).collect::<Vec<_>>().join(" ")
    ));
    let warm = |d: &Dist| [d.median, d.p90, d.p99];
    let head = ["warm request (µs)", "requests", "median", "p90", "p99"];
    against_direct(&mut s, head, &r.warm_us, (1, warm), |x| {
        format!("{x:>8.2}x")
    });
    let bulk = |d: &Dist| {
        let end = |v: Option<&f64>| v.copied().unwrap_or(f64::NAN);
        [d.median, end(d.samples.first()), end(d.samples.last())]
    };
    let title = format!("bulk {} MB (GB/s)", r.bulk_bytes >> 20);
    let head = [title.as_str(), "rounds", "median", "min", "max"];
    against_direct(&mut s, head, &r.bulk_gbps, (2, bulk), |x| {
        format!("{x:>9.3}")
    });
    s.push('\n');
    s.push_str(&crate::report::checks_text(&r.checks, &r.skipped));
    s
}

/// A PNG with three panels: cold start, warm latency, bulk throughput.
pub fn chart(r: &Report, path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    crate::report::register_font()?;
    let root = BitMapBackend::new(path, (1200, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(
            "bulkhead bench activation (median; whisker p10-p90)",
            ("sans-serif", 20),
        )
        .map_err(|e| e.to_string())?;
    let panels = root.split_evenly((1, 3));
    let sets: [(&str, &[Dist]); 3] = [
        ("cold start, ms to first byte", &r.cold),
        ("warm request, µs", &r.warm_us),
        ("bulk throughput, GB/s", &r.bulk_gbps),
    ];
    for (area, (title, ds)) in panels.iter().zip(sets) {
        let n = ds.len();
        let max = ds
            .iter()
            .map(|d| d.p90)
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max)
            * 1.25;
        let mut c = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(60)
            .y_label_area_size(50)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..max.max(1e-9))
            .map_err(|e| e.to_string())?;
        let short = |name: &str| -> String {
            match name {
                n if n.ends_with("pass mode") => "pass mode".into(),
                n if n.starts_with("bulkhead") => "bulkhead".into(),
                n if n.starts_with("systemd-socket-proxyd") => "socket-proxyd".into(),
                n if n.contains("frozen") && n.starts_with("sandboxed") => "sandboxed, thaw".into(),
                n if n.contains("frozen") => "plain, thaw".into(),
                n if n.starts_with("sandboxed") => "sandboxed".into(),
                n if n.starts_with("plain") => "plain".into(),
                n => n.into(),
            }
        };
        let labels: Vec<String> = ds.iter().map(|d| short(&d.name)).collect();
        c.configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(|e| e.to_string())?;
        let color = |name: &str| {
            if name.starts_with("bulkhead") || name.starts_with("sandboxed") {
                BLUE
            } else if name.starts_with("systemd") {
                RED
            } else {
                BLACK
            }
        };
        c.draw_series(ds.iter().enumerate().map(|(i, d)| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), d.median),
                ],
                color(&d.name).mix(0.5).filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            bar
        }))
        .map_err(|e| e.to_string())?;
        c.draw_series(ds.iter().enumerate().map(|(i, d)| {
            PathElement::new(
                vec![
                    (SegmentValue::CenterOf(i), d.p10),
                    (SegmentValue::CenterOf(i), d.p90),
                ],
                BLACK.stroke_width(2),
            )
        }))
        .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
