//! `bench spawn --boot`, behind a socket: the seed's on-demand machine. A burst of cold
//! clients at a socket whose first connection boots the Debian root and is answered by a
//! service of the booted system (systemd's own socket activation inside, on `WEB`):
//! - **bulkhead**: `serve` with a `[socket.web]` target `boot = true` (ready on the
//!   container's READY=1, proxied into its network namespace, powered off when idle);
//! - **the seed's chain**: `systemd-socket-activate` (the socket unit, where there is no
//!   systemd) starting what systemd would for the seed's proxy.service, which `Requires=` and
//!   is `After=` the `Type=notify` container unit ([`seed_chain`]): `systemd-nspawn --boot
//!   --notify-ready=yes`, and once it says READY=1, `systemd-socket-proxyd --exit-idle-time`
//!   on the passed socket; on the host's network as in the seed.
//!
//! Both boot the same root with an overlay snapshot and the same units. Each round is, per
//! peer (in alternating order), a cold start with one client (its time to first byte) and a
//! cold start with a burst of [`CLIENTS`] (how many got no answer, and their median time to
//! first byte); after each the peer powers the system off, untimed.
//!
//! Beside them, once per round: the same system kept **frozen** when idle (a second socket,
//! `on_idle = "freeze"`, its target in a slice of the bench's cgroup root), one client's
//! first byte after the thaw.

use super::{Check, Peer};
use crate::sockets::{get, status, wait_frozen, wait_idle};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Cold clients per burst.
pub const CLIENTS: usize = 100;
/// How long a system stays up after its last connection (stopped, or frozen).
const IDLE: &str = "1s";
/// The frozen system's slice.
const SLICE: &str = "bench-boot-frozen";

/// The units bound into the root at /usr/local/lib/systemd/system: a socket on `web` whose
/// every connection gets a small HTTP answer from a shell.
fn write_units(dir: &Path, web: u16) -> Result<PathBuf, String> {
    let units = dir.join("boot-units");
    let wants = units.join("sockets.target.wants");
    std::fs::create_dir_all(&wants).map_err(|e| format!("{}: {e}", wants.display()))?;
    let files = [
        (
            "hello.socket",
            // systemd's defaults (64 connections, 200 starts per 2 s) would refuse part of a
            // burst of 100 inside either peer.
            format!("[Socket]\nListenStream=127.0.0.1:{web}\nAccept=yes\nMaxConnections=1024\nBacklog=1024\nTriggerLimitBurst=10000\n[Install]\nWantedBy=sockets.target\n"),
        ),
        (
            "hello@.service",
            "[Service]\nExecStart=/bin/sh -c 'printf \"HTTP/1.0 200 OK\\r\\n\\r\\nhello from the booted system\\n\"'\nStandardInput=socket\n".to_string(),
        ),
    ];
    for (name, text) in files {
        let p = units.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let link = wants.join("hello.socket");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("../hello.socket", &link).map_err(|e| format!("{e}"))?;
    Ok(units)
}

struct Rig {
    serve: Child,
    name: String,
    serve_port: u16,
    /// The frozen-when-idle twin of `name`.
    frozen: String,
    frozen_port: u16,
    chain_port: u16,
    /// `bulkhead-bench seed-chain ...`, which systemd-socket-activate starts.
    chain: Vec<std::ffi::OsString>,
    /// The chain runs from this cgroup of the bench's (nspawn's cgroups go below it).
    peers_cg: Vec<PathBuf>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        crate::child::stop(&mut self.serve, libc::SIGTERM, Duration::from_secs(40));
    }
}

/// A `[socket.NAME]` of the booted system on `port`; `frozen`: kept frozen when idle, in
/// [`SLICE`].
fn socket_text(name: &str, port: u16, web: u16, root: &str, units: &str, frozen: bool) -> String {
    let (on_idle, slice) = if frozen {
        ("on_idle = \"freeze\"\n", format!("slice = \"{SLICE}\"\n"))
    } else {
        ("", String::new())
    };
    format!(
        "[socket.{name}]\nlisten = [\"127.0.0.1:{port}\"]\nbackend = \"127.0.0.1:{web}\"\nidle_timeout = \"{IDLE}\"\n{on_idle}start_timeout = \"60s\"\nstop_timeout = \"30s\"\n[socket.{name}.target]\nrootfs = \"{root}\"\nboot = true\nsnapshot = \"overlay\"\nbind = [\"{units}:/usr/local/lib/systemd/system:ro\"]\n{slice}"
    )
}

fn start(bulkhead: &Path, root: &Path, dir: &Path, cgroup_root: &str) -> Result<Rig, String> {
    let web = crate::redis::free_port()?;
    let units = write_units(dir, web)?;
    let (root, units) = (root.display().to_string(), units.display().to_string());
    let name = format!("bench-boot-{}", std::process::id());
    let frozen = format!("{name}-frozen");
    let serve_port = crate::redis::free_port()?;
    let frozen_port = crate::redis::free_port()?;
    let plan = dir.join("boot-serve.toml");
    let text = format!(
        "[slice.{SLICE}]\nCPUWeight = 100\n{}{}",
        socket_text(&name, serve_port, web, &root, &units, false),
        socket_text(&frozen, frozen_port, web, &root, &units, true)
    );
    std::fs::write(&plan, text).map_err(|e| format!("{}: {e}", plan.display()))?;
    crate::sockets::apply(bulkhead, &plan, cgroup_root)?;
    let log = dir.join("boot-serve.log");
    let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(bulkhead);
    cmd.args(crate::sockets::scope(cgroup_root))
        .arg("-c")
        .arg(&plan)
        .arg("serve");
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(out);
    bulkhead_sys::process::pdeathsig_before_exec(&mut cmd, libc::SIGTERM);
    let serve = cmd.spawn().map_err(|e| format!("bulkhead serve: {e}"))?;
    let me = std::env::current_exe().map_err(|e| format!("the bench's own path: {e}"))?;
    let chain = vec![
        me.into_os_string(),
        "seed-chain".into(),
        "--root".into(),
        root.to_string().into(),
        "--units".into(),
        units.to_string().into(),
        "--web".into(),
        web.to_string().into(),
        "--notify".into(),
        dir.join("chain-notify").into_os_string(),
    ];
    let rig = Rig {
        serve,
        name,
        serve_port,
        frozen,
        frozen_port,
        chain_port: crate::redis::free_port()?,
        chain,
        peers_cg: Vec::new(),
    };
    let t0 = Instant::now();
    while status(&rig.name).is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let l = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("bulkhead serve did not start: {l}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(rig)
}

/// Whether something listens on 127.0.0.1:`port` (from /proc/net/tcp: no connection made,
/// which would start the chain).
fn listening(port: u16) -> bool {
    let t = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let want = format!("0100007F:{port:04X}");
    t.lines().skip(1).any(|l| {
        l.split_whitespace().nth(1) == Some(want.as_str())
            && l.split_whitespace().nth(3) == Some("0A")
    })
}

/// The seed's chain for one cold start: systemd-socket-activate listening, not yet started.
fn start_chain(rig: &Rig) -> Result<Child, String> {
    let mut argv = vec![
        "systemd-socket-activate".to_string(),
        "-l".into(),
        format!("127.0.0.1:{}", rig.chain_port),
    ];
    argv.extend(rig.chain.iter().map(|a| a.to_string_lossy().into_owned()));
    let argv = super::in_cgroup(&rig.peers_cg, argv);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    bulkhead_sys::process::pdeathsig_before_exec(&mut cmd, libc::SIGTERM);
    let c = cmd
        .spawn()
        .map_err(|e| format!("systemd-socket-activate: {e}"))?;
    let t0 = Instant::now();
    while !listening(rig.chain_port) {
        if t0.elapsed() > Duration::from_secs(5) {
            return Err("systemd-socket-activate did not listen within 5 s".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(c)
}

/// proxyd leaves after IDLE, then the script stops the container: wait for that, untimed;
/// a chain that does not end is stopped as a whole (its process group).
fn stop_chain(chain: &mut Child) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(40) {
        if let Ok(Some(_)) = chain.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let group = -(chain.id() as i32);
    let _ = bulkhead_sys::process::kill(group, libc::SIGTERM);
    std::thread::sleep(Duration::from_secs(15));
    let _ = bulkhead_sys::process::kill(group, libc::SIGKILL);
    let _ = chain.wait();
}

/// `clients` clients at once: each one's time to first byte (ms) of a right answer, and how
/// many got none.
fn burst(port: u16, clients: usize) -> (Vec<f64>, usize, Option<String>) {
    let barrier = Arc::new(Barrier::new(clients));
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                get(port, "/")
            })
        })
        .collect();
    let mut ok = Vec::new();
    let mut failed = 0;
    let mut why = None;
    for h in handles {
        match h.join() {
            Ok(Ok((t, body))) if body.ends_with(b"hello from the booted system\n") => {
                ok.push(t.as_secs_f64() * 1e3)
            }
            Ok(Ok((_, body))) => {
                failed += 1;
                why.get_or_insert_with(|| format!("answered {:?}", String::from_utf8_lossy(&body)));
            }
            Ok(Err(e)) => {
                failed += 1;
                why.get_or_insert_with(|| e.to_string());
            }
            Err(_) => failed += 1,
        }
    }
    (ok, failed, why)
}

/// Per round and peer: a cold start's first byte (one client) and a cold burst's median
/// time to first byte ([`CLIENTS`] at once); failures summed.
pub struct Served {
    pub first: [Vec<f64>; 2],
    /// The frozen system's first byte after a thaw, one client per round.
    pub thaw: Vec<f64>,
    pub thaw_failed: usize,
    pub median: [Vec<f64>; 2],
    pub failed: [usize; 2],
    /// What the first failed client of each peer met.
    pub why: [Option<String>; 2],
}

/// `rounds` cold starts of each peer.
pub fn run(
    bulkhead: &Path,
    root: &Path,
    dir: &Path,
    rounds: usize,
    peers_cg: &[PathBuf],
    cgroup_root: &str,
) -> Result<Served, String> {
    let mut rig = start(bulkhead, root, dir, cgroup_root)?;
    rig.peers_cg = peers_cg.to_vec();
    let mut out = Served {
        first: [Vec::new(), Vec::new()],
        thaw: Vec::new(),
        thaw_failed: 0,
        median: [Vec::new(), Vec::new()],
        failed: [0, 0],
        why: [None, None],
    };
    // The frozen twin's one boot, then its first freeze.
    let (_, failed, why) = burst(rig.frozen_port, 1);
    if failed > 0 {
        return Err(format!("the frozen-when-idle system's first boot: {why:?}"));
    }
    let mut seen = 0;
    for round in 0..rounds {
        if crate::stop::requested() {
            break;
        }
        seen = wait_frozen(&rig.frozen, seen)?;
        let (ms, failed, _) = burst(rig.frozen_port, 1);
        out.thaw.extend(ms);
        out.thaw_failed += failed;
        for k in 0..2 {
            let i = (k + round) % 2;
            // One cold client: the first byte. Then a cold burst: who is left without one.
            let (one, failed_one, why_one) = cold(&rig, i, 1)?;
            let (mut ms, failed, why) = cold(&rig, i, CLIENTS)?;
            out.failed[i] += failed + failed_one;
            if out.why[i].is_none() {
                out.why[i] = why_one.or(why);
            }
            out.first[i].extend(one);
            ms.sort_by(|a, b| a.total_cmp(b));
            if !ms.is_empty() {
                out.median[i].push(crate::stats::rank(&ms, 0.5));
            }
        }
    }
    wait_idle(&rig.name)?;
    Ok(out)
}

/// One cold start of peer `i` (0: serve, 1: the chain) with `clients` at once.
fn cold(rig: &Rig, i: usize, clients: usize) -> Result<(Vec<f64>, usize, Option<String>), String> {
    if i == 0 {
        wait_idle(&rig.name)?;
        return Ok(burst(rig.serve_port, clients));
    }
    let mut chain = start_chain(rig)?;
    let r = burst(rig.chain_port, clients);
    stop_chain(&mut chain);
    Ok(r)
}

pub const SERVE: &str = "bulkhead serve, boot = true: first byte";
pub const CHAIN: &str = "socket-activate + proxyd + nspawn --boot: first byte";
pub const THAW: &str = "bulkhead serve, boot = true, frozen when idle: first byte (thaw)";
const SERVE_MEDIAN: &str = "bulkhead serve, boot = true: burst median";
const CHAIN_MEDIAN: &str = "socket-activate + proxyd + nspawn: burst median";

/// The peers' lines for the report: name, group, samples (ms), failed clients. The burst's
/// median adds what the booted system's own service takes for 100 connections at once
/// (systemd starting an instance per connection), the same in both.
pub fn peers(s: &Served) -> Vec<(&'static str, &'static str, Vec<f64>, usize)> {
    vec![
        (SERVE, "bulkhead", s.first[0].clone(), s.failed[0]),
        (CHAIN, "systemd-nspawn", s.first[1].clone(), s.failed[1]),
        (THAW, "bulkhead", s.thaw.clone(), s.thaw_failed),
        (SERVE_MEDIAN, "bulkhead", s.median[0].clone(), 0),
        (CHAIN_MEDIAN, "systemd-nspawn", s.median[1].clone(), 0),
    ]
}

/// First byte within 0.8x the chain's, no client of bulkhead's left without an answer, and
/// a frozen system's first byte after its thaw within 20 ms.
pub fn checks(peers: &[Peer]) -> Vec<Check> {
    let m = |n: &str| {
        peers
            .iter()
            .find(|p| p.name == n && !p.samples_ms.is_empty())
    };
    let mut out = Vec::new();
    if let (Some(b), Some(c)) = (m(SERVE), m(CHAIN)) {
        out.push(Check {
            what: "booted web server, cold first byte: bulkhead serve / the seed's chain".into(),
            target: "<= 0.8x".into(),
            measured: format!(
                "{:.2}x ({:.0} ms / {:.0} ms)",
                b.median_ms / c.median_ms,
                b.median_ms,
                c.median_ms
            ),
            met: b.median_ms / c.median_ms <= 0.8,
        });
    }
    if let Some(t) = peers.iter().find(|p| p.name == THAW) {
        let cold = m(SERVE).map_or(f64::NAN, |c| c.median_ms);
        out.push(Check {
            what: "booted web server frozen when idle: first byte after a thaw (its cold start)"
                .into(),
            target: "<= 20 ms".into(),
            measured: format!(
                "{:.1} ms ({:.3}x of the cold start's {cold:.0} ms), {} failed",
                t.median_ms,
                t.median_ms / cold,
                t.failures
            ),
            met: t.median_ms <= 20.0 && t.failures == 0 && !t.samples_ms.is_empty(),
        });
    }
    if let Some(b) = peers.iter().find(|p| p.name == SERVE) {
        out.push(Check {
            what: format!("booted web server: clients of {CLIENTS}-client cold bursts left without an answer (bulkhead)"),
            target: "0".into(),
            measured: b.failures.to_string(),
            met: b.failures == 0 && !b.samples_ms.is_empty(),
        });
    }
    out
}

/// What the seed's chain runs after the first connection, as systemd would.
pub struct Chain {
    pub root: PathBuf,
    pub units: PathBuf,
    pub web: u16,
    pub notify: PathBuf,
}

/// The seed's proxy.service with its `Requires=`/`After=` on the `Type=notify` container
/// unit, for one socket activation (started by systemd-socket-activate with the listening
/// socket as fd 3): `systemd-nspawn --boot --notify-ready=yes`, READY=1 awaited on a notify
/// socket as systemd awaits it, then `systemd-socket-proxyd --exit-idle-time` on fd 3; when
/// proxyd leaves (idle), the container is stopped (StopWhenUnneeded=) and awaited.
pub fn seed_chain(c: &Chain) -> Result<(), String> {
    let _ = std::fs::remove_file(&c.notify);
    let sock = std::os::unix::net::UnixDatagram::bind(&c.notify)
        .map_err(|e| format!("{}: {e}", c.notify.display()))?;
    let mut ns = Command::new("systemd-nspawn");
    ns.args([
        "-q",
        "--register=no",
        "--keep-unit",
        "--volatile=overlay",
        "-D",
    ])
    .arg(&c.root)
    .arg(format!(
        "--bind-ro={}:/usr/local/lib/systemd/system",
        c.units.display()
    ))
    .args(["--boot", "--notify-ready=yes"])
    .env("NOTIFY_SOCKET", &c.notify)
    .env_remove("LISTEN_FDS")
    .env_remove("LISTEN_PID")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut ns = ns.spawn().map_err(|e| format!("systemd-nspawn: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 4096];
    loop {
        let n = sock
            .recv(&mut buf)
            .map_err(|e| format!("no READY=1 from nspawn: {e}"))?;
        if buf[..n].split(|b| *b == b'\n').any(|l| l == b"READY=1") {
            break;
        }
    }
    let _ = std::fs::remove_file(&c.notify);
    // LISTEN_PID must be proxyd's own PID: the shell sets it and becomes proxyd.
    let proxy = format!(
        "LISTEN_PID=$$ exec /lib/systemd/systemd-socket-proxyd --exit-idle-time={IDLE} 127.0.0.1:{}",
        c.web
    );
    let st = Command::new("sh")
        .args(["-c", &proxy])
        .env("LISTEN_FDS", "1")
        .stdin(Stdio::null())
        .status();
    crate::child::stop(&mut ns, libc::SIGTERM, Duration::from_secs(30));
    st.map_err(|e| format!("systemd-socket-proxyd: {e}"))?;
    Ok(())
}
