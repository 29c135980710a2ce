//! `bench spawn --boot`, behind a socket: the seed's on-demand machine. A burst of cold
//! clients at a socket whose first connection boots the Debian root and is answered by a
//! service of the booted system (systemd's own socket activation inside, on `WEB`):
//! - **bulkhead**: `serve` with a `[socket.web]` target `boot = true` (ready on the
//!   container's READY=1, proxied into its network namespace, powered off when idle);
//! - **the seed's chain**: `systemd-socket-activate` (the socket unit, where there is no
//!   systemd) starting `systemd-socket-proxyd --exit-idle-time` once `systemd-nspawn --boot`
//!   serves (the seed's `Requires=`/`After=` on a `Type=notify` container unit; here the
//!   proxy starts as soon as the port answers, which is never later than READY=1), on the
//!   host's network as in the seed.
//!
//! Both boot the same root with an overlay snapshot and the same units. Each round is one
//! cold start per peer (in alternating order): its clients' time to first byte and how many
//! failed; then the peer is left to power the system off, untimed.

use super::{Check, Peer};
use crate::activation::{get, status, wait_idle};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Cold clients per burst.
pub const CLIENTS: usize = 100;
/// How long a system stays up after its last connection.
const IDLE: &str = "1s";

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
    chain_port: u16,
    chain_script: String,
}

impl Drop for Rig {
    fn drop(&mut self) {
        crate::child::stop(&mut self.serve, libc::SIGTERM, Duration::from_secs(40));
    }
}

fn start(bulkhead: &Path, root: &Path, dir: &Path) -> Result<Rig, String> {
    let web = crate::redis::free_port()?;
    let units = write_units(dir, web)?;
    let (root, units) = (root.display(), units.display());
    let name = format!("bench-boot-{}", std::process::id());
    let serve_port = crate::redis::free_port()?;
    let plan = dir.join("boot-serve.toml");
    let text = format!(
        "[socket.{name}]\nlisten = [\"127.0.0.1:{serve_port}\"]\nbackend = \"127.0.0.1:{web}\"\nidle_timeout = \"{IDLE}\"\nstart_timeout = \"60s\"\nstop_timeout = \"30s\"\n[socket.{name}.target]\nrootfs = \"{root}\"\nboot = true\nsnapshot = \"overlay\"\nbind = [\"{units}:/usr/local/lib/systemd/system:ro\"]\n"
    );
    std::fs::write(&plan, text).map_err(|e| format!("{}: {e}", plan.display()))?;
    let log = dir.join("boot-serve.log");
    let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(bulkhead);
    cmd.arg("-c").arg(&plan).arg("serve");
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(out);
    bulkhead::sys::process::pdeathsig_before_exec(&mut cmd, libc::SIGTERM);
    let serve = cmd.spawn().map_err(|e| format!("bulkhead serve: {e}"))?;
    let chain_script = format!(
        "systemd-nspawn -q --register=no --keep-unit --volatile=overlay -D '{root}' --bind-ro='{units}:/usr/local/lib/systemd/system' --boot >/dev/null 2>&1 & ns=$!\n\
         until (exec 3<>/dev/tcp/127.0.0.1/{web}) 2>/dev/null; do kill -0 $ns || exit 1; sleep 0.005; done\n\
         sh -c 'LISTEN_PID=$$ exec /lib/systemd/systemd-socket-proxyd --exit-idle-time={IDLE} 127.0.0.1:{web}'\n\
         kill -TERM $ns; wait $ns\n"
    );
    let rig = Rig {
        serve,
        name,
        serve_port,
        chain_port: crate::redis::free_port()?,
        chain_script,
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
    let mut cmd = Command::new("systemd-socket-activate");
    cmd.arg("-l")
        .arg(format!("127.0.0.1:{}", rig.chain_port))
        .args(["bash", "-c", &rig.chain_script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    bulkhead::sys::process::pdeathsig_before_exec(&mut cmd, libc::SIGTERM);
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
    let _ = bulkhead::sys::process::kill(group, libc::SIGTERM);
    std::thread::sleep(Duration::from_secs(15));
    let _ = bulkhead::sys::process::kill(group, libc::SIGKILL);
    let _ = chain.wait();
}

/// `CLIENTS` clients at once: each one's time to first byte (ms) of a right answer, and how
/// many got none.
fn burst(port: u16) -> (Vec<f64>, usize, Option<String>) {
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
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

/// Per round and peer: the burst's median time to first byte; failures summed.
pub struct Served {
    pub samples: [Vec<f64>; 2],
    pub failed: [usize; 2],
    /// What the first failed client of each peer met.
    pub why: [Option<String>; 2],
}

/// `rounds` cold starts of each peer.
pub fn run(bulkhead: &Path, root: &Path, dir: &Path, rounds: usize) -> Result<Served, String> {
    let rig = start(bulkhead, root, dir)?;
    let mut out = Served {
        samples: [Vec::new(), Vec::new()],
        failed: [0, 0],
        why: [None, None],
    };
    for round in 0..rounds {
        if crate::stop::requested() {
            break;
        }
        for k in 0..2 {
            let i = (k + round) % 2;
            let (ms, failed, why) = if i == 0 {
                wait_idle(&rig.name)?;
                burst(rig.serve_port)
            } else {
                let mut chain = start_chain(&rig)?;
                let r = burst(rig.chain_port);
                stop_chain(&mut chain);
                r
            };
            out.failed[i] += failed;
            if out.why[i].is_none() {
                out.why[i] = why;
            }
            let mut ms = ms;
            ms.sort_by(|a, b| a.total_cmp(b));
            if !ms.is_empty() {
                out.samples[i].push(crate::stats::rank(&ms, 0.5));
            }
        }
    }
    wait_idle(&rig.name)?;
    Ok(out)
}

pub const SERVE: &str = "bulkhead serve, boot = true: first byte";
pub const CHAIN: &str = "socket-activate + proxyd + nspawn --boot: first byte";

/// The two peers' lines for the report: name, group, samples (ms), failed clients.
pub fn peers(s: &Served) -> Vec<(&'static str, &'static str, Vec<f64>, usize)> {
    vec![
        (SERVE, "bulkhead", s.samples[0].clone(), s.failed[0]),
        (CHAIN, "systemd-nspawn", s.samples[1].clone(), s.failed[1]),
    ]
}

/// First byte within 0.8x the chain's, and no client of bulkhead's left without an answer.
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
