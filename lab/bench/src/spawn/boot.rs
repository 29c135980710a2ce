//! `bench spawn --boot`: a whole Debian system booted to power-off, `bulkhead spawn --boot`
//! beside `systemd-nspawn --boot` on the same root with the same snapshot method (overlayfs
//! on the host's file system: `-x --snapshot overlay` against `--volatile=overlay`; a btrfs
//! snapshot: `--snapshot btrfs` against `--ephemeral` on the btrfs copy).
//!
//! The root is debootstrap's minbase plus systemd as its init (the seed's machine), cached
//! beside the plain one. Two phases per tool and method:
//! - **to ready**: the default target, timed from the exec of the tool to the `READY=1` it
//!   sends to the `NOTIFY_SOCKET` the bench gives it (nspawn with `--notify-ready=yes` sends
//!   it when the container's systemd does; so does `bulkhead spawn --boot`), then stopped
//!   with SIGTERM (both pass it on as SIGRTMIN+3, systemd's clean power-off), untimed;
//! - **to power-off**: `systemd.unit=poweroff.target`, timed from the exec to the exit: the
//!   whole boot and shutdown inside.

use super::{argv, Check, Peer, Planned, Roots};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where the bootable root is cached (minbase + systemd).
pub const DEFAULT_CACHE: &str = "/var/cache/bulkhead/bench/debian-bookworm-systemd";

/// What debootstrap adds to minbase for a root that boots: systemd as PID 1 and its bus.
pub const INCLUDE: &str = "systemd,systemd-sysv,dbus";

/// What PID 1 is told: boot, then power off at once.
const UNIT: &str = "systemd.unit=poweroff.target";

/// The target the issue sets: bulkhead's boot at most this share of nspawn's.
const TARGET: f64 = 0.8;

/// How long a boot may take to say READY=1 before the start counts as failed.
pub const READY_WITHIN: Duration = Duration::from_secs(30);
/// How long a stopped container may take to power off before it is killed.
const STOP_WITHIN: Duration = Duration::from_secs(15);

/// The two timed phases.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Ready,
    PowerOff,
}

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::Ready => "to ready",
            Phase::PowerOff => "to power-off",
        }
    }
}

fn bulkhead_name(method: &str, phase: Phase) -> String {
    format!("bulkhead spawn --boot ({method}) {}", phase.label())
}

fn nspawn_name(method: &str, phase: Phase) -> String {
    format!("systemd-nspawn --boot ({method}) {}", phase.label())
}

/// Start `argv` with a NOTIFY_SOCKET of the bench's in `dir`; the milliseconds until it
/// sent READY=1, after which it is stopped with SIGTERM (and killed after [`STOP_WITHIN`]).
/// None: it exited, or said nothing within [`READY_WITHIN`], or did not stop.
pub(super) fn time_ready(argv: &[String], dir: &Path) -> Option<f64> {
    let path = dir.join("notify");
    let _ = std::fs::remove_file(&path);
    let sock = UnixDatagram::bind(&path).ok()?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .ok()?;
    let t = Instant::now();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env("NOTIFY_SOCKET", &path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let ready = wait_ready(&sock, &mut child, t);
    let stopped = crate::child::stop(&mut child, libc::SIGTERM, STOP_WITHIN);
    let _ = std::fs::remove_file(&path);
    ready.filter(|_| stopped.is_some_and(|s| s.code().is_some()))
}

fn wait_ready(sock: &UnixDatagram, child: &mut std::process::Child, t: Instant) -> Option<f64> {
    let mut buf = [0u8; 4096];
    while t.elapsed() < READY_WITHIN {
        match sock.recv(&mut buf) {
            Ok(n) if buf[..n].split(|b| *b == b'\n').any(|l| l == b"READY=1") => {
                return Some(t.elapsed().as_secs_f64() * 1e3);
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if !matches!(child.try_wait(), Ok(None)) {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
    None
}

/// The peers: each snapshot method the machine has, bulkhead's then nspawn's (where
/// installed).
pub(super) fn plan(
    bulkhead: &Path,
    cache: &Path,
    roots: &Roots,
    host_fs: &str,
    with_nspawn: bool,
    peers_cg: &[std::path::PathBuf],
) -> Vec<Planned> {
    let bh = bulkhead.display().to_string();
    let cache = cache.display().to_string();
    let bulkhead = |root: &str, method: &str, phase: Phase| {
        let mut a = argv(&[
            &bh,
            "spawn",
            "-q",
            "--boot",
            "-D",
            root,
            "-x",
            "--snapshot",
            method,
        ]);
        if phase == Phase::PowerOff {
            a.extend(argv(&["--", UNIT]));
        }
        a
    };
    let nspawn = |root: &str, how: &str, phase: Phase| {
        let mut a = argv(&["systemd-nspawn", "-q", "--register=no", "--keep-unit", how]);
        a.extend(argv(&["-D", root, "--boot"]));
        match phase {
            Phase::Ready => a.push("--notify-ready=yes".into()),
            Phase::PowerOff => a.extend(argv(&["--", UNIT])),
        }
        a
    };
    let cache = (cache, None);
    let btrfs = roots
        .btrfs
        .as_ref()
        .map(|b| (b.display().to_string(), b.parent().map(Path::to_path_buf)));
    let methods = [
        Some((
            format!("overlay, {host_fs}"),
            cache,
            "overlay",
            "--volatile=overlay",
        )),
        btrfs.map(|b| ("btrfs snapshot".to_string(), b, "btrfs", "--ephemeral")),
    ];
    let mut planned = Vec::new();
    for phase in [Phase::Ready, Phase::PowerOff] {
        for (method, (root, settle), ours, theirs) in methods.iter().flatten() {
            let mut b = Planned::new(
                bulkhead_name(method, phase),
                "bulkhead",
                bulkhead(root, ours, phase),
            );
            let mut n = Planned::new(
                nspawn_name(method, phase),
                "systemd-nspawn",
                super::in_cgroup(peers_cg, nspawn(root, theirs, phase)),
            );
            b.ready = phase == Phase::Ready;
            n.ready = b.ready;
            planned.push(b.settle(settle.clone()));
            if with_nspawn {
                planned.push(n.settle(settle.clone()));
            }
        }
    }
    planned
}

/// bulkhead / nspawn per snapshot method, against [`TARGET`].
pub(super) fn checks(peers: &[Peer], host_fs: &str) -> Vec<Check> {
    let m = |name: &str| {
        peers
            .iter()
            .find(|p| p.name == name && !p.samples_ms.is_empty())
            .map(|p| p.median_ms)
    };
    let mut out = Vec::new();
    for phase in [Phase::Ready, Phase::PowerOff] {
        for method in [format!("overlay, {host_fs}"), "btrfs snapshot".to_string()] {
            let b = m(&bulkhead_name(&method, phase));
            let n = m(&nspawn_name(&method, phase));
            if let (Some(b), Some(n)) = (b, n) {
                out.push(Check {
                    what: format!("boot {} ({method}): bulkhead / nspawn", phase.label()),
                    target: format!("<= {TARGET}x"),
                    measured: format!("{:.2}x ({b:.0} ms / {n:.0} ms)", b / n),
                    met: b / n <= TARGET,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str, median_ms: f64, samples: usize) -> Peer {
        Peer {
            name: name.into(),
            group: String::new(),
            command: Vec::new(),
            samples_ms: vec![median_ms; samples],
            median_ms,
            p10_ms: median_ms,
            p90_ms: median_ms,
            failures: 0,
        }
    }

    #[test]
    fn a_method_is_checked_only_where_both_peers_booted() {
        let off = Phase::PowerOff;
        let peers = [
            peer(&bulkhead_name("overlay, ext4", off), 170.0, 3),
            peer(&nspawn_name("overlay, ext4", off), 200.0, 3),
            peer(&bulkhead_name("btrfs snapshot", off), 100.0, 3),
            peer(&nspawn_name("btrfs snapshot", off), f64::NAN, 0),
        ];
        let c = checks(&peers, "ext4");
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(!c[0].met, "0.85 is over 0.8: {c:?}");
        let peers = [
            peer(&bulkhead_name("overlay, ext4", off), 100.0, 3),
            peer(&nspawn_name("overlay, ext4", off), 200.0, 3),
        ];
        assert!(checks(&peers, "ext4")[0].met);
    }

    #[test]
    fn both_tools_boot_the_same_root_in_both_phases() {
        let roots = Roots {
            btrfs: Some("/mnt/b/debian".into()),
            xfs: None,
        };
        let bh = Path::new("/bin/bulkhead");
        let p = plan(bh, Path::new("/c"), &roots, "ext4", true, &[]);
        assert_eq!(p.len(), 8);
        let has = |x: &Planned, w: &str| x.argv.iter().any(|a| a == w);
        for x in &p {
            // Power-off peers name the unit and are timed to their exit; ready peers boot
            // the default target and are timed to READY=1.
            assert_eq!(has(x, UNIT), !x.ready, "{:?}", x.argv);
            let notify = x.ready && x.group != "bulkhead";
            assert_eq!(has(x, "--notify-ready=yes"), notify, "{:?}", x.argv);
        }
        assert_eq!(p.iter().filter(|x| x.ready).count(), 4);
        assert!(has(&p[0], "/c") && has(&p[1], "/c") && has(&p[1], "--volatile=overlay"));
        assert!(has(&p[2], "/mnt/b/debian") && has(&p[3], "--ephemeral"));
        let p = plan(bh, Path::new("/c"), &roots, "ext4", false, &[]);
        assert!(p.iter().all(|x| x.group == "bulkhead") && p.len() == 4);
    }
}
