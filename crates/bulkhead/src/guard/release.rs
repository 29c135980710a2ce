//! Putting back what a guard changed when it is gone: `bulkhead guard --release`
//! (systemd's ExecStopPost), the watchdog a guard starts beside itself, and the next guard
//! at its start all read `holds.json` and give every sideload its plan's values again.
//!
//! The watchdog is a second process (`bulkhead guard --watchdog-of PID:START`) in its own
//! session, fed one byte per period through a pipe on its stdin. End of file means the guard
//! died (even by SIGKILL: the kernel closes its end); no byte for `hang` means it hangs, and
//! the watchdog kills it. Either way it then takes the guard's lock and releases.

use super::state::{self, Holds};
use crate::context::Context;
use bulkhead_cgroups::{Choice, Throttle};
use bulkhead_plan::{ResolvedSlice, SliceName};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::Host;
use bulkhead_sys::process;
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// What a release did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Released {
    /// The guard whose holds were released.
    pub pid: u32,
    pub sideloads: Vec<String>,
    /// Operations carried out (0: everything was already as planned).
    pub ops: usize,
    pub notes: Vec<String>,
}

/// Open (creating) the guard's lock file.
pub fn open_lock() -> Result<File> {
    let p = state::lock_path();
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d)
            .map_err(|e| bulkhead_sys::error::io_failed("cannot create", d, e))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .map_err(|e| bulkhead_sys::error::io_failed("cannot open", &p, e))
}

/// Take the lock within `patience`; `Ok(None)` when a live guard holds it.
pub fn take_lock(patience: Duration) -> Result<Option<File>> {
    let f = open_lock()?;
    let deadline = Instant::now() + patience;
    loop {
        match process::lock_file(&f, false) {
            Ok(true) => return Ok(Some(f)),
            Ok(false) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(false) => return Ok(None),
            Err(e) => {
                return Err(Error::failed(format!(
                    "cannot lock {}: {e}",
                    state::lock_path().display()
                )))
            }
        }
    }
}

/// Release what `holds.json` names, with the lock already held. `Ok(None)`: nothing held.
pub fn release_held() -> Result<Option<Released>> {
    let Some(h) = state::read_json::<Holds>(&state::holds_path()) else {
        return Ok(None);
    };
    let cx = Context {
        config: h.config.clone(),
        cgroup_root: h.cgroup_root.clone(),
        backend: Choice::parse(&h.backend).unwrap_or_default(),
    };
    let mut out = Released {
        pid: h.pid,
        sideloads: h.sideloads.clone(),
        ..Default::default()
    };
    let slices = plan_slices(&cx, &h.sideloads, &mut out.notes);
    let mut chosen = cx.choose()?;
    chosen.keep_caps();
    let disks = bulkhead_sys::host::disks();
    let mut first_error = None;
    for s in &slices {
        if !bulkhead_cgroups::Placement::slice_exists(&chosen, s.name()) {
            continue; // destroyed meanwhile: nothing to put back
        }
        let done = chosen
            .plan_throttle(s, &Throttle::none(), &disks)
            .and_then(|ops| chosen.execute_throttle(&ops));
        match done {
            Ok(o) => out.ops += o.done,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e.with_hint(format!(
            "the sideloads stay throttled; fix the cause and run `bulkhead guard --release` (the record is {})",
            state::holds_path().display()
        )));
    }
    let _ = std::fs::remove_file(state::holds_path());
    Ok(Some(out))
}

/// The sideloads as the plan has them now; without a readable plan, bare slices (no
/// limits), so a release still lifts every throttle.
fn plan_slices(cx: &Context, names: &[String], notes: &mut Vec<String>) -> Vec<ResolvedSlice> {
    let resolved = cx
        .load_plan()
        .and_then(|p| p.resolve(&Host::detect_for(p.device_paths())));
    let names: Vec<SliceName> = names
        .iter()
        .filter_map(|n| SliceName::parse(n).ok())
        .collect();
    names
        .into_iter()
        .map(|n| {
            let found = resolved.as_ref().ok().and_then(|r| r.slice(&n).cloned());
            found.unwrap_or_else(|| {
                notes.push(format!(
                    "{n}: not in the plan as it reads now; its CPU quota, idle scheduling and I/O limits were lifted entirely"
                ));
                ResolvedSlice {
                    name: Some(n),
                    ..Default::default()
                }
            })
        })
        .collect()
}

/// `bulkhead guard --release`: put back what a stopped guard left. Refused while a guard
/// runs (it releases by itself when it stops).
pub fn release() -> Result<Option<Released>> {
    let Some(_lock) = take_lock(Duration::from_secs(2))? else {
        let pid = state::read_json::<Holds>(&state::holds_path()).map(|h| h.pid);
        return Err(Error::invalid(
            Diagnostic::error(format!(
                "a guard is running{}; it puts the sideloads back itself when it stops",
                pid.map(|p| format!(" (PID {p})")).unwrap_or_default()
            ))
            .hint("stop it (SIGTERM, or systemctl stop bulkhead-guard)"),
        ));
    };
    release_held()
}

/// How the watchdog ended.
#[derive(Debug, serde::Serialize)]
pub enum WatchdogEnd {
    /// The guard exited or died (the pipe closed).
    GuardGone,
    /// The guard stopped sending heartbeats and was killed; where its threads were.
    GuardHung(String),
}

/// Where a process's threads are: name, state and what they wait in (the kernel stack's
/// first frames, when readable), one line per thread.
fn where_stuck(pid: u32) -> String {
    let mut lines = Vec::new();
    for tid in bulkhead_sys::sched::threads(pid as i32) {
        let base = format!("/proc/{pid}/task/{tid}");
        let read = |f: &str| std::fs::read_to_string(format!("{base}/{f}")).unwrap_or_default();
        let stat = read("stat");
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        let stack: Vec<String> = read("stack")
            .lines()
            .take(4)
            .map(|l| l.split_whitespace().nth(1).unwrap_or(l).to_string())
            .collect();
        let waited = bulkhead_sys::sched::schedstat(pid as i32, tid).map_or(String::new(), |s| {
            format!(
                ", ran {} ms, waited {} ms",
                s.run_ns / 1_000_000,
                s.wait_ns / 1_000_000
            )
        });
        lines.push(format!(
            "{tid} {} {state} in {} [{}]{waited}",
            read("comm").trim(),
            read("wchan"),
            stack.join(" < ")
        ));
    }
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let cpu = cg
        .lines()
        .find(|l| l.contains(":cpu,") || l.contains(":cpu:") || l.starts_with("0::"))
        .unwrap_or_default();
    format!("{} (cgroup {cpu})", lines.join("; "))
}

/// The watchdog's whole life: wait on the heartbeat pipe (stdin), then release.
pub fn watchdog(
    guard: u32,
    start_time: u64,
    hang: Duration,
) -> Result<(WatchdogEnd, Option<Released>)> {
    let _ = process::lock_memory();
    let mut end = wait_heartbeats(hang);
    if matches!(end, WatchdogEnd::GuardHung(_)) && process::start_time(guard) == Some(start_time) {
        end = WatchdogEnd::GuardHung(where_stuck(guard));
        let _ = process::kill(guard as i32, libc::SIGKILL);
    }
    // The guard's lock is free once it is gone; a hung one may take a moment to die.
    let Some(_lock) = take_lock(Duration::from_secs(10))? else {
        return Ok((end, None)); // a new guard took over: it releases at its start
    };
    Ok((end, release_held()?))
}

fn wait_heartbeats(hang: Duration) -> WatchdogEnd {
    let stdin = bulkhead_sys::fd::stdin();
    let mut buf = [0u8; 256];
    loop {
        if !process::poll_readable(stdin.as_fd(), hang.as_millis().min(i32::MAX as u128) as i32) {
            return WatchdogEnd::GuardHung(String::new());
        }
        match bulkhead_sys::fd::read_once(stdin, &mut buf) {
            Ok(0) => return WatchdogEnd::GuardGone,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::Interrupted | ErrorKind::WouldBlock) => {}
            Err(_) => return WatchdogEnd::GuardGone,
        }
    }
}

/// The guard's side of the watchdog: the child process and the pipe it feeds.
pub struct Heartbeat {
    child: std::process::Child,
    pipe: std::os::fd::OwnedFd,
}

impl Heartbeat {
    /// Start `bulkhead guard --watchdog-of PID:START:HANG_MS` in its own session (a Ctrl-C
    /// meant for the guard does not reach it), fed through a pipe on its stdin.
    pub fn spawn(hang: Duration) -> std::io::Result<Heartbeat> {
        use std::os::unix::process::CommandExt;
        let (read, write) = bulkhead_sys::fd::pipe()?;
        bulkhead_sys::fd::set_nonblocking(&write)?;
        let me = std::process::id();
        let start = process::start_time(me).unwrap_or(0);
        let exe = std::env::current_exe()?;
        let child = std::process::Command::new(exe)
            .args([
                "guard",
                "--watchdog-of",
                &format!("{me}:{start}:{}", hang.as_millis()),
            ])
            .stdin(std::process::Stdio::from(read))
            .process_group(0)
            .spawn()?;
        Ok(Heartbeat { child, pipe: write })
    }

    /// One beat; false when the watchdog is gone (then spawn another).
    pub fn beat(&mut self) -> bool {
        match bulkhead_sys::fd::write_once(&self.pipe, b".") {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
        !matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Close the pipe (the watchdog sees the end and takes over the release).
    /// It then waits for the guard's lock, finds nothing held (the guard released) and exits.
    pub fn finish(self) {
        drop(self.pipe);
    }
}

/// `--watchdog-of PID:START:HANG_MS`.
pub fn parse_watchdog_of(s: &str) -> Option<(u32, u64, Duration)> {
    let mut it = s.split(':');
    let pid = it.next()?.parse().ok()?;
    let start = it.next()?.parse().ok()?;
    let hang = Duration::from_millis(it.next()?.parse().ok()?);
    it.next().is_none().then_some((pid, start, hang))
}
