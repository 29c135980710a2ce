//! `bench spawn`: start-to-exit of `/bin/true` in an ephemeral sandbox, for every snapshot
//! method the machine offers, side by side in one run with `systemd-nspawn --ephemeral` on the
//! same roots, plain `unshare` with the same namespaces, and `/bin/true` alone.
//!
//! The Debian root is made once by debootstrap and cached; each run puts copies of it on a
//! btrfs loop file system (a subvolume: snapshots) and an XFS one with reflink=1, and uses the
//! cache on the host's own file system for overlayfs and for nspawn's full copy. Rounds run
//! every peer once in a rotated order; slow peers (nspawn copying the whole root) run in the
//! first `slow_runs` rounds only. Everything made is recorded and removed (see [`crate::env`]).

pub mod boot;
pub mod served;

use crate::env::Env;
use crate::stats;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub const DEFAULT_CACHE: &str = "/var/cache/bulkhead/bench/debian-bookworm";

pub struct Spec {
    pub bulkhead: PathBuf,
    pub runs: usize,
    pub slow_runs: usize,
    pub cache: PathBuf,
    pub suite: String,
    pub mirror: String,
    /// Include the full-copy method (seconds per start on a real root).
    pub with_copy: bool,
    /// Boot the root's systemd to power-off instead of starting `/bin/true` ([`boot`]).
    pub boot: bool,
    pub progress: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Peer {
    pub name: String,
    pub group: String,
    pub command: Vec<String>,
    pub samples_ms: Vec<f64>,
    pub median_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
    pub failures: usize,
}

pub use crate::report::Check;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What each start is: `/bin/true`, or a boot to power-off.
    pub what: String,
    pub machine: String,
    pub root: String,
    pub root_bytes: u64,
    pub root_files: u64,
    pub runs: usize,
    pub slow_runs: usize,
    pub peers: Vec<Peer>,
    pub checks: Vec<Check>,
    pub skipped: Vec<String>,
}

fn sh(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

const NO_NSPAWN: &str = "systemd-nspawn: not installed (apt-get install systemd-container)";

fn have(prog: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .any(|d| Path::new(d).join(prog).is_file())
}

/// Build the cached Debian root with debootstrap (once).
pub fn ensure_root(spec: &Spec, say: &mut dyn FnMut(&str)) -> Result<(), String> {
    if spec.cache.join("bin/true").exists() && spec.cache.join("etc/debian_version").exists() {
        if spec.boot && !spec.cache.join("lib/systemd/systemd").exists() {
            return Err(format!(
                "{}: a root without systemd (no lib/systemd/systemd) cannot boot: give --boot another --cache (a new one is made with debootstrap --include={})",
                spec.cache.display(),
                boot::INCLUDE
            ));
        }
        return Ok(());
    }
    if !have("debootstrap") {
        return Err("debootstrap is not installed (apt-get install debootstrap)".into());
    }
    let tmp = spec.cache.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let include = if spec.boot {
        format!("--include={}", boot::INCLUDE)
    } else {
        String::new()
    };
    say(&format!(
        "building the Debian root once: debootstrap --variant=minbase {include} {} {} (a few minutes)",
        spec.suite,
        spec.cache.display()
    ));
    let r = sh(Command::new("debootstrap")
        .arg("--variant=minbase")
        .args((!include.is_empty()).then_some(&include))
        .arg(&spec.suite)
        .arg(&tmp)
        .arg(&spec.mirror));
    if let Err(e) = r {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, &spec.cache).map_err(|e| format!("{}: {e}", spec.cache.display()))
}

fn tree_size(p: &Path) -> (u64, u64) {
    let (mut bytes, mut files) = (0, 0);
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if let Ok(m) = e.path().symlink_metadata() {
                    files += 1;
                    if m.is_dir() {
                        stack.push(e.path());
                    } else {
                        bytes += m.len();
                    }
                }
            }
        }
    }
    (bytes, files)
}

struct Planned {
    name: String,
    group: String,
    argv: Vec<String>,
    slow: bool,
    /// A btrfs file system this peer leaves background work on (the cleaner removing deleted
    /// subvolumes, a pool being topped up): waited for, untimed, before the next peer runs.
    settle: Option<PathBuf>,
    /// Timed to the READY=1 it sends to NOTIFY_SOCKET, then stopped ([`boot::time_ready`]),
    /// instead of to its exit.
    ready: bool,
}

/// Let a btrfs file system finish, untimed, the background work the last start left (a
/// read-only image's pool being topped up, the deleted snapshot's transaction): each start is
/// then timed on a quiet file system, whichever peer ran before it.
fn settle(fs: &Path) {
    let t0 = Instant::now();
    let pooled = || {
        std::fs::read_dir(fs)
            .map(|r| {
                r.flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .starts_with(".#bulkhead-pool.")
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    let want = if pooled() > 0 {
        bulkhead::actions::spawn::SNAPSHOT_POOL_SIZE
    } else {
        0
    };
    while pooled() < want && t0.elapsed() < std::time::Duration::from_secs(2) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Commit what is pending (BTRFS_IOC_SYNC), then give the cleaner a moment.
    let _ = Command::new("btrfs")
        .args(["-q", "filesystem", "sync"])
        .arg(fs)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    std::thread::sleep(std::time::Duration::from_millis(5));
}

impl Planned {
    fn new(name: impl Into<String>, group: &str, argv: Vec<String>) -> Planned {
        Planned {
            name: name.into(),
            group: group.into(),
            argv,
            slow: false,
            settle: None,
            ready: false,
        }
    }

    /// Runs in the first `slow_runs` rounds only.
    fn slow(mut self) -> Planned {
        self.slow = true;
        self
    }

    fn settle(mut self, fs: Option<PathBuf>) -> Planned {
        self.settle = fs;
        self
    }
}

/// `argv` started from a cgroup of the bench's own (its `cgroup.procs` files): systemd-nspawn
/// makes `payload` and `supervisor` cgroups beside its own in every hierarchy, so run from
/// the bench's cgroup they are made below it and removed with it, instead of being left at
/// the hierarchies' roots (issue 39). The shell that joins costs one exec (about 1 ms of a
/// 200 ms boot).
pub(crate) fn in_cgroup(procs: &[PathBuf], argv: Vec<String>) -> Vec<String> {
    if procs.is_empty() {
        return argv;
    }
    let mut a: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        r#"for f; do shift; [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; done; exec "$@""#
            .into(),
        "sh".into(),
    ];
    a.extend(procs.iter().map(|p| p.display().to_string()));
    a.push("--".into());
    a.extend(argv);
    a
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

/// The copies of the root on file systems with cheap snapshots (None: not on this machine).
struct Roots {
    /// A btrfs subvolume (and its read-only snapshot `debian-ro` beside it).
    btrfs: Option<PathBuf>,
    /// A directory on XFS with reflink=1.
    xfs: Option<PathBuf>,
}

/// A btrfs file system with the root as a subvolume, and an XFS one with reflink; what the
/// machine cannot make goes to `skipped`.
fn copy_roots(
    spec: &Spec,
    env: &mut Env,
    size: u64,
    skipped: &mut Vec<String>,
) -> Result<Roots, String> {
    let say = |m: &str| {
        if spec.progress {
            eprintln!("bench spawn: {m}");
        }
    };
    let mut roots = Roots {
        btrfs: None,
        xfs: None,
    };
    if have("mkfs.btrfs") {
        say("copying the root onto a btrfs loop file system (a subvolume)");
        let m = env.mkfs_loop("btrfs", size, &["mkfs.btrfs", "-q", "-f"])?;
        let sub = m.join("debian");
        sh(Command::new("btrfs")
            .args(["-q", "subvolume", "create"])
            .arg(&sub))?;
        sh(Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", spec.cache.display()))
            .arg(&sub))?;
        // The same root as a read-only image: bulkhead keeps snapshots of it ready.
        sh(Command::new("btrfs")
            .args(["-q", "subvolume", "snapshot", "-r"])
            .arg(&sub)
            .arg(m.join("debian-ro")))?;
        roots.btrfs = Some(sub);
    } else {
        skipped.push("btrfs: mkfs.btrfs missing (apt-get install btrfs-progs)".to_string());
    }
    // The boot is compared on overlayfs and btrfs only, the methods nspawn has too.
    if have("mkfs.xfs") && !spec.boot {
        say("copying the root onto an XFS loop file system with reflink=1");
        let m = env.mkfs_loop("xfs", size, &["mkfs.xfs", "-q", "-f", "-m", "reflink=1"])?;
        let d = m.join("debian");
        sh(Command::new("cp").arg("-a").arg(&spec.cache).arg(&d))?;
        roots.xfs = Some(d);
    } else if !spec.boot {
        skipped.push("reflink: mkfs.xfs missing (apt-get install xfsprogs)".to_string());
    }
    Ok(roots)
}

/// Every peer, in the order the report lists them: the references, bulkhead's methods,
/// then systemd-nspawn's.
fn plan(spec: &Spec, roots: &Roots, host_fs: &str, skipped: &mut Vec<String>) -> Vec<Planned> {
    let bh = spec.bulkhead.display().to_string();
    let cache = spec.cache.display().to_string();
    let spawn = |root: &str, method: &str| -> Vec<String> {
        argv(&[
            &bh,
            "spawn",
            "-q",
            "-D",
            root,
            "-x",
            "--snapshot",
            method,
            "--",
            "/bin/true",
        ])
    };
    let mut planned = vec![
        Planned::new("/bin/true", "reference", argv(&["/bin/true"])),
        Planned::new(
            "unshare (same namespaces)",
            "reference",
            argv(&[
                "unshare",
                "-m",
                "-p",
                "-f",
                "-u",
                "-i",
                "-C",
                "-n",
                "/bin/true",
            ]),
        ),
        Planned::new(
            format!("bulkhead overlay ({host_fs})"),
            "bulkhead",
            spawn(&cache, "overlay"),
        ),
        Planned::new(
            format!("bulkhead read-only root ({host_fs})"),
            "bulkhead",
            argv(&[&bh, "spawn", "-q", "-D", &cache, "--", "/bin/true"]),
        ),
    ];
    if let Some(b) = &roots.btrfs {
        planned.push(
            Planned::new(
                "bulkhead btrfs snapshot",
                "bulkhead",
                spawn(&b.display().to_string(), "btrfs"),
            )
            .settle(b.parent().map(Path::to_path_buf)),
        );
        let ro = b.with_file_name("debian-ro").display().to_string();
        planned.push(Planned::new(
            "bulkhead btrfs, read-only image",
            "bulkhead",
            spawn(&ro, "btrfs"),
        ));
    }
    if let Some(x) = &roots.xfs {
        let argv = spawn(&x.display().to_string(), "reflink");
        planned.push(Planned::new("bulkhead reflink (xfs)", "bulkhead", argv).slow());
    }
    if spec.with_copy {
        let name = format!("bulkhead full copy ({host_fs})");
        planned.push(Planned::new(name, "bulkhead", spawn(&cache, "copy")).slow());
    }
    if have("systemd-nspawn") {
        planned.extend(nspawn_peers(roots, host_fs, &cache));
    } else {
        skipped.push(NO_NSPAWN.to_string());
    }
    planned
}

/// systemd-nspawn --ephemeral on the btrfs copy (where made) and on the host's file system.
fn nspawn_peers(roots: &Roots, host_fs: &str, cache: &str) -> Vec<Planned> {
    let nspawn = |root: &str| -> Vec<String> {
        argv(&[
            "systemd-nspawn",
            "-q",
            "--register=no",
            "--keep-unit",
            "--ephemeral",
            "-D",
            root,
            "/bin/true",
        ])
    };
    let mut out = Vec::new();
    if let Some(b) = &roots.btrfs {
        out.push(
            Planned::new(
                "nspawn --ephemeral (btrfs)",
                "systemd-nspawn",
                nspawn(&b.display().to_string()),
            )
            .settle(b.parent().map(Path::to_path_buf)),
        );
    }
    out.push(
        Planned::new(
            format!("nspawn --ephemeral ({host_fs})"),
            "systemd-nspawn",
            nspawn(cache),
        )
        .slow(),
    );
    out
}

/// Every peer once, untimed: that it works at all.
fn warm_up(planned: &[Planned], dir: &Path) -> Result<(), String> {
    for p in planned {
        if p.ready {
            boot::time_ready(&p.argv, dir).ok_or_else(|| {
                format!(
                    "{} never said READY=1 within {:?}",
                    p.name,
                    boot::READY_WITHIN
                )
            })?;
            continue;
        }
        let st = Command::new(&p.argv[0])
            .args(&p.argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("{}: {e}", p.argv[0]))?;
        if !st.status.success() {
            return Err(format!(
                "{} does not work here: {}",
                p.name,
                String::from_utf8_lossy(&st.stderr).trim()
            ));
        }
    }
    Ok(())
}

fn progress_bar(spec: &Spec, planned: &[Planned]) -> indicatif::ProgressBar {
    if !spec.progress {
        return indicatif::ProgressBar::hidden();
    }
    let total: usize = planned
        .iter()
        .map(|p| {
            if p.slow {
                spec.slow_runs.min(spec.runs)
            } else {
                spec.runs
            }
        })
        .sum();
    let b = indicatif::ProgressBar::new(total as u64);
    b.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} starts {elapsed} {msg}")
            .unwrap(),
    );
    b
}

/// One start, timed (ms) to its exit or, for a `ready` peer, to its READY=1; None: failed.
fn time_one(p: &Planned, dir: &Path) -> Option<f64> {
    if p.ready {
        return boot::time_ready(&p.argv, dir);
    }
    let t = Instant::now();
    let st = Command::new(&p.argv[0])
        .args(&p.argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let el = t.elapsed();
    st.ok()
        .filter(|s| s.success())
        .map(|_| el.as_secs_f64() * 1e3)
}

/// The timed rounds, peers rotated: each peer's start-to-exit times (ms) and failures.
fn measure(spec: &Spec, planned: &[Planned], dir: &Path) -> (Vec<Vec<f64>>, Vec<usize>) {
    let bar = progress_bar(spec, planned);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); planned.len()];
    let mut failures = vec![0usize; planned.len()];
    for round in 0..spec.runs {
        if crate::stop::requested() {
            break;
        }
        for k in 0..planned.len() {
            let i = (k + round) % planned.len();
            let p = &planned[i];
            if p.slow && round >= spec.slow_runs {
                continue;
            }
            match time_one(p, dir) {
                Some(ms) => samples[i].push(ms),
                None => failures[i] += 1,
            }
            if let Some(fs) = &p.settle {
                settle(fs);
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    (samples, failures)
}

fn peer(p: &Planned, mut s: Vec<f64>, failures: usize) -> Peer {
    let raw = s.clone();
    s.sort_by(|a, b| a.total_cmp(b));
    Peer {
        name: p.name.clone(),
        group: p.group.clone(),
        command: p.argv.clone(),
        median_ms: stats::rank(&s, 0.5),
        p10_ms: stats::rank(&s, 0.1),
        p90_ms: stats::rank(&s, 0.9),
        samples_ms: raw,
        failures,
    }
}

pub fn run(spec: &Spec) -> Result<Report, String> {
    let mut say = |m: &str| {
        if spec.progress {
            eprintln!("bench spawn: {m}");
        }
    };
    ensure_root(spec, &mut say)?;
    let (root_bytes, root_files) = tree_size(&spec.cache);
    crate::env::clean_stale();
    let mut env = Env::create()?;
    let mut skipped = Vec::new();
    let size = (root_bytes * 3).max(1 << 30);
    let roots = copy_roots(spec, &mut env, size, &mut skipped)?;
    let host_fs = fs_name(&spec.cache);
    let planned = if spec.boot {
        let nspawn = have("systemd-nspawn");
        if !nspawn {
            skipped.push(NO_NSPAWN.into());
        }
        let peers_cg = env.plain_cgroup("peers")?;
        boot::plan(
            &spec.bulkhead,
            &spec.cache,
            &roots,
            &host_fs,
            nspawn,
            &peers_cg,
        )
    } else {
        plan(spec, &roots, &host_fs, &mut skipped)
    };
    warm_up(&planned, &env.dir)?;
    let (samples, failures) = measure(spec, &planned, &env.dir);
    let mut peers: Vec<Peer> = planned
        .iter()
        .zip(samples)
        .zip(failures)
        .map(|((p, s), f)| peer(p, s, f))
        .collect();
    if spec.boot && have("systemd-nspawn") {
        say("a booted web server behind a socket: bulkhead serve beside the seed's chain");
        let rounds = spec.runs.min(10);
        let peers_cg = env.plain_cgroup("peers")?;
        let s = served::run(
            &spec.bulkhead,
            &spec.cache,
            &env.dir,
            rounds,
            &peers_cg,
            &env.cgroup_root,
        )?;
        for (who, why) in ["bulkhead serve", "the seed's chain"].iter().zip(&s.why) {
            if let Some(w) = why {
                say(&format!("{who}: a client failed: {w}"));
            }
        }
        for (name, group, samples, failed) in served::peers(&s) {
            let p = Planned::new(name, group, Vec::new());
            peers.push(peer(&p, samples, failed));
        }
    }
    drop(env);
    let (what, checks) = if spec.boot {
        let mut c = boot::checks(&peers, &host_fs);
        c.extend(served::checks(&peers));
        (
            "boot of systemd: to ready, to power-off, behind a socket",
            c,
        )
    } else {
        ("start-to-exit of /bin/true", checks(&peers, &host_fs))
    };
    Ok(Report {
        what: what.into(),
        machine: crate::report::machine(),
        root: format!(
            "Debian {} minbase{} made by debootstrap ({})",
            spec.suite,
            if spec.boot { " + systemd" } else { "" },
            spec.cache.display()
        ),
        root_bytes,
        root_files,
        runs: spec.runs,
        slow_runs: spec.slow_runs,
        peers,
        checks,
        skipped,
    })
}

fn fs_name(p: &Path) -> String {
    let Some(magic) = bulkhead_testkit::host::fs_magic(p) else {
        return "host fs".into();
    };
    match magic as u64 {
        0xEF53 => "ext4".into(),
        0x9123683E => "btrfs".into(),
        0x58465342 => "xfs".into(),
        0x01021994 => "tmpfs".into(),
        0x794c7630 => "overlayfs".into(),
        t => format!("fs 0x{t:x}"),
    }
}

fn checks(peers: &[Peer], host_fs: &str) -> Vec<Check> {
    let m = |name: &str| {
        peers
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.median_ms)
            .filter(|v| v.is_finite())
    };
    let overlay = m(&format!("bulkhead overlay ({host_fs})"));
    let btrfs = m("bulkhead btrfs snapshot");
    let btrfs_ro = m("bulkhead btrfs, read-only image");
    let unshare = m("unshare (same namespaces)");
    let ns_btrfs = m("nspawn --ephemeral (btrfs)");
    let ns_host = m(&format!("nspawn --ephemeral ({host_fs})"));
    let mut out = Vec::new();
    let variants = [
        ("overlay", overlay),
        ("btrfs", btrfs),
        ("btrfs, read-only image", btrfs_ro),
    ];
    for (label, v) in variants {
        if let Some(v) = v {
            out.push(Check {
                what: format!("bulkhead {label}: median start-to-exit"),
                target: "< 5 ms".into(),
                measured: format!("{v:.2} ms"),
                met: v < 5.0,
            });
        }
    }
    for (label, b) in [("btrfs", btrfs), ("btrfs, read-only image", btrfs_ro)] {
        if let (Some(n), Some(b)) = (ns_btrfs, b) {
            out.push(Check {
                what: format!("nspawn --ephemeral on btrfs / bulkhead {label}"),
                target: ">= 10x".into(),
                measured: format!("{:.1}x", n / b),
                met: n / b >= 10.0,
            });
        }
    }
    if let (Some(n), Some(o)) = (ns_host, overlay) {
        out.push(Check {
            what: format!("nspawn --ephemeral on {host_fs} / bulkhead overlay"),
            target: ">= 200x".into(),
            measured: format!("{:.0}x", n / o),
            met: n / o >= 200.0,
        });
    }
    for (label, v) in variants {
        if let (Some(v), Some(u)) = (v, unshare) {
            out.push(Check {
                what: format!("bulkhead {label} / plain unshare"),
                target: "<= 2x".into(),
                measured: format!("{:.2}x", v / u),
                met: v / u <= 2.0,
            });
        }
    }
    out
}

/// The report as text: one line per peer, then the checks.
pub fn text(r: &Report) -> String {
    let mut s = format!(
        "bench spawn: {}; {} rounds (slow peers {}), peers rotated each round\nmachine: {}\nroot: {} ({:.0} MB, {} files)\n\n",
        r.what,
        r.runs,
        r.slow_runs.min(r.runs),
        r.machine,
        r.root,
        r.root_bytes as f64 / 1e6,
        r.root_files
    );
    let w = r
        .peers
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(0)
        .max(36);
    s.push_str(&format!(
        "{:<w$} {:>6} {:>10} {:>10} {:>10}\n",
        "peer", "runs", "median ms", "p10 ms", "p90 ms"
    ));
    for p in &r.peers {
        s.push_str(&format!(
            "{:<w$} {:>6} {:>10.2} {:>10.2} {:>10.2}{}\n",
            p.name,
            p.samples_ms.len(),
            p.median_ms,
            p.p10_ms,
            p.p90_ms,
            if p.failures > 0 {
                format!("  ({} failed)", p.failures)
            } else {
                String::new()
            }
        ));
    }
    s.push('\n');
    s.push_str(&crate::report::checks_text(&r.checks, &r.skipped));
    s
}

/// A PNG: median start-to-exit per peer on a log scale, with the p10-p90 range.
pub fn chart(r: &Report, path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    crate::report::register_font()?;
    let n = r.peers.len();
    let root = BitMapBackend::new(path, (1100, 160 + 40 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(
            &format!(
                "bulkhead bench spawn: {}, median ms (log scale; whisker p10-p90)",
                r.what
            ),
            ("sans-serif", 20),
        )
        .map_err(|e| e.to_string())?;
    let max = r
        .peers
        .iter()
        .map(|p| p.p90_ms)
        .filter(|v| v.is_finite())
        .fold(10.0f64, f64::max)
        * 3.0;
    let min = r
        .peers
        .iter()
        .map(|p| p.p10_ms)
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold(1.0f64, f64::min)
        / 2.0;
    let mut c = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(300)
        .build_cartesian_2d((min..max).log_scale(), (0..n).into_segmented())
        .map_err(|e| e.to_string())?;
    let labels: Vec<String> = r.peers.iter().map(|p| p.name.clone()).collect();
    crate::hbars::label_rows(&mut c, &labels, "ms")?;
    let color = |g: &str| match g {
        "bulkhead" => BLUE,
        "systemd-nspawn" => RED,
        _ => BLACK,
    };
    let bars: Vec<crate::hbars::Bar> = r
        .peers
        .iter()
        .map(|p| {
            let text = format!("{:.2} ms", p.median_ms);
            let at = p.p90_ms.max(p.median_ms) * 1.15;
            let whisker = (p.p10_ms, p.p90_ms);
            crate::hbars::Bar::new(p.median_ms, whisker, color(&p.group), text, at)
        })
        .collect();
    let style = crate::hbars::Style {
        base: min,
        margin: 6,
        font_size: 14,
    };
    crate::hbars::draw(&mut c, &bars, &style)?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
