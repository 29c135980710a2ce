//! The target behind a socket: started on demand, checked for readiness, stopped (or frozen,
//! [`super::freeze`]) when idle.
//!
//! A target runs as a child process of `serve`: `bulkhead spawn` (an ephemeral sandbox) or
//! `bulkhead run` (a plain command in a slice), so everything those commands guarantee (the
//! slice, the snapshot's cleanup, the exit codes) holds here too, and `ps` shows what runs.

use super::dial::{dialer_for, Dialer};
use super::launch::{start_process, Launcher};
use super::limits::Hits;
use super::notify::{self, NotifySocket, Sender};
use bulkhead_plan::socket::{Mode, OnIdle, Ready, SocketSpec};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How waiting for a started target to be ready ended.
enum Waited {
    Ready(Option<Dialer>),
    Exited(std::process::ExitStatus),
    TimedOut,
    /// The sandbox's network namespace could not be reached.
    Unreachable(String),
}

/// The state the socket shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Idle,
    Starting,
    Ready,
    Stopping,
    /// Its processes are being moved into the freeze cell (on_idle = "freeze").
    Freezing,
    /// Frozen by the kernel's freezer; a connection thaws it.
    Frozen,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Starting => "starting",
            State::Ready => "ready",
            State::Stopping => "stopping",
            State::Freezing => "freezing",
            State::Frozen => "frozen",
        }
    }
}

pub struct Inner {
    pub state: State,
    pub pid: Option<u32>,
    pub dialer: Option<Arc<Dialer>>,
    /// Bumped when a connection opens: an idle timer armed before is void.
    pub epoch: u64,
    pub active: u64,
    /// Start attempts; `failed_gen` is the last one that failed.
    pub start_gen: u64,
    pub failed_gen: u64,
    pub failures_in_row: u32,
    pub backoff_until: Option<Instant>,
    pub cold_starts: u64,
    pub failed_starts: u64,
    pub last_start: Option<Duration>,
    pub start_latency: super::latency::StartLatency,
    pub last_error: Option<String>,
    pub total: u64,
    /// Connections closed because no target could be started.
    pub refused: u64,
    /// The target's freeze cell once it froze (on_idle = "freeze"), kept while it runs.
    pub frozen: Option<super::frozen::Frozen>,
    pub freeze_counts: super::frozen::FreezeCounts,
}

impl Inner {
    /// A target started: count it and how long it took.
    pub fn started(&mut self, took: Duration) {
        self.cold_starts += 1;
        self.last_start = Some(took);
        self.start_latency.record(took.as_secs_f64());
    }
}

/// One socket's target supervisor, shared by its connection tasks.
pub struct Activator {
    pub spec: SocketSpec,
    pub launcher: Launcher,
    pub inner: Mutex<Inner>,
    pub changed: watch::Sender<u64>,
    /// Bumped when a connection opens or closes (for the status file only: waiters for a
    /// state change are not woken by it).
    pub conns_changed: watch::Sender<u64>,
    pub counters: super::proxy::Counters,
    /// How often each limit was hit.
    pub hits: Hits,
    pub notify_dir: Option<PathBuf>,
    pub log: super::Log,
    /// Set when `serve` stops: loops that own a target process stop it and return.
    pub stopping: watch::Sender<bool>,
    /// max_connections, shared by every listener of the socket (in per-connection mode:
    /// the socket's live sandboxes).
    pub slots: Arc<tokio::sync::Semaphore>,
    /// max_connections_per_source, shared by every listener of the socket.
    pub sources: Arc<super::sources::Sources>,
}

/// Counts a connection while it lives.
pub struct ConnGuard(Arc<Activator>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.close_conn();
    }
}

impl Activator {
    pub fn new(
        spec: SocketSpec,
        launcher: Launcher,
        notify_dir: Option<PathBuf>,
        log: super::Log,
    ) -> Arc<Activator> {
        let slots = Arc::new(tokio::sync::Semaphore::new(spec.max_connections as usize));
        let sources = super::sources::Sources::new(spec.max_connections_per_source);
        Arc::new(Activator {
            slots,
            sources,
            spec,
            launcher,
            inner: Mutex::new(Inner {
                state: State::Idle,
                pid: None,
                dialer: None,
                epoch: 0,
                active: 0,
                start_gen: 0,
                failed_gen: 0,
                failures_in_row: 0,
                backoff_until: None,
                cold_starts: 0,
                failed_starts: 0,
                last_start: None,
                start_latency: Default::default(),
                last_error: None,
                total: 0,
                refused: 0,
                frozen: None,
                freeze_counts: Default::default(),
            }),
            changed: watch::channel(0).0,
            conns_changed: watch::channel(0).0,
            counters: Default::default(),
            hits: Default::default(),
            notify_dir,
            log,
            stopping: watch::channel(false).0,
        })
    }

    /// Resolves once `serve` is stopping.
    pub async fn stopped(&self) {
        let mut rx = self.stopping.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    pub(super) fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    pub fn open_conn(self: &Arc<Self>) -> ConnGuard {
        let mut g = self.inner.lock().unwrap();
        g.active += 1;
        g.total += 1;
        g.epoch += 1;
        drop(g);
        self.conns_changed.send_modify(|v| *v += 1);
        ConnGuard(self.clone())
    }

    /// A connection closed at once: no target could serve it.
    pub fn refused(&self) {
        self.inner.lock().unwrap().refused += 1;
    }

    fn close_conn(self: &Arc<Self>) {
        let mut g = self.inner.lock().unwrap();
        g.active -= 1;
        if g.active == 0 && g.state == State::Ready {
            self.arm_idle(&g);
        }
        drop(g);
        self.conns_changed.send_modify(|v| *v += 1);
    }

    /// Stop the target `idle_timeout` from now unless a connection comes first.
    fn arm_idle(self: &Arc<Self>, g: &Inner) {
        let Some(idle) = self.spec.idle_timeout else {
            return;
        };
        if self.spec.mode != Mode::Proxy {
            return;
        }
        let epoch = g.epoch;
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(idle).await;
            let g = me.inner.lock().unwrap();
            if g.epoch == epoch && g.active == 0 && g.state == State::Ready {
                drop(g);
                match me.spec.on_idle {
                    OnIdle::Stop => me.stop(&format!("idle for {}", show(idle))),
                    OnIdle::Freeze => me.freeze(idle),
                }
            }
        });
    }

    /// Wait until the target is ready, starting it if needed.
    pub async fn ensure_ready(self: &Arc<Self>) -> Result<Arc<Dialer>, String> {
        let mut rx = self.changed.subscribe();
        let mut waiting_for = None;
        loop {
            {
                let mut g = self.inner.lock().unwrap();
                if let Some(gen) = waiting_for {
                    if g.failed_gen >= gen {
                        return Err(g.last_error.clone().unwrap_or_default());
                    }
                }
                match g.state {
                    State::Ready => {
                        if let Some(d) = &g.dialer {
                            return Ok(d.clone());
                        }
                    }
                    State::Idle => {
                        if let Some(until) = g.backoff_until {
                            let now = Instant::now();
                            if now < until {
                                return Err(format!(
                                    "not starting the target for another {}: {} starts failed in a row (last: {})",
                                    show(until - now),
                                    g.failures_in_row,
                                    g.last_error.as_deref().unwrap_or("?")
                                ));
                            }
                        }
                        g.state = State::Starting;
                        g.start_gen += 1;
                        waiting_for = Some(g.start_gen);
                        let gen = g.start_gen;
                        drop(g);
                        self.bump();
                        let me = self.clone();
                        tokio::spawn(async move { me.start(gen).await });
                    }
                    State::Starting => {
                        if waiting_for.is_none() {
                            waiting_for = Some(g.start_gen);
                        }
                    }
                    State::Frozen => {
                        drop(g);
                        self.thaw("a connection came");
                        continue;
                    }
                    // A freeze in progress ends with a thaw (it sees the connection).
                    State::Stopping | State::Freezing => {}
                }
            }
            if rx.changed().await.is_err() {
                return Err("shutting down".into());
            }
        }
    }

    async fn start(self: Arc<Self>, gen: u64) {
        let t0 = Instant::now();
        let notify = match self.open_notify() {
            Ok(n) => n,
            Err(e) => return self.fail(gen, None, format!("cannot make the notify socket: {e}")),
        };
        let notify_dir = notify.as_ref().and(self.notify_dir.as_deref());
        let target = self.launcher.target(&self.spec, 0, notify_dir, &[]);
        let argv = self.launcher.argv(&target);
        let mut child = match start_process(&self.launcher, &target, &[], None) {
            Ok(c) => c,
            Err(e) => {
                return self.fail(
                    gen,
                    None,
                    format!("cannot start {}: {e}", argv[0].to_string_lossy()),
                )
            }
        };
        let pid = child.id().unwrap_or(0);
        {
            let mut g = self.inner.lock().unwrap();
            g.pid = Some(pid);
        }
        self.log.line(&format!(
            "[{}] starting the target (pid {pid}): {}",
            self.spec.name,
            match (&self.spec.target.rootfs, self.spec.target.boot) {
                (Some(root), true) =>
                    format!("booting {root} {}", self.spec.target.command.join(" ")),
                _ => self.spec.target.command.join(" "),
            }
        ));
        let deadline = t0 + self.spec.start_timeout;
        let dialer = match self
            .wait_ready(&mut child, pid, notify.as_ref(), deadline)
            .await
        {
            Waited::Ready(d) => d,
            Waited::Unreachable(e) => {
                let _ = kill(pid, libc::SIGKILL);
                return self.fail(gen, Some(child), format!("cannot reach the sandbox: {e}"));
            }
            Waited::Exited(st) => {
                let why = format!(
                    "the target exited ({}) before it was ready",
                    status_text(st)
                );
                return self.fail(gen, None, why);
            }
            Waited::TimedOut => {
                let why = self.not_ready_within();
                return self.fail(gen, Some(child), why);
            }
        };
        self.mark_ready(dialer, t0.elapsed());
        self.watch_exit(child).await;
        // The notify socket lives as long as the target (later messages are not refused).
        drop(notify);
    }

    /// Wait until the target is ready (its backend accepts, or it sent READY=1), exits,
    /// or `deadline` passes.
    async fn wait_ready(
        &self,
        child: &mut tokio::process::Child,
        pid: u32,
        notify: Option<&NotifySocket>,
        deadline: Instant,
    ) -> Waited {
        let mut dialer: Option<Dialer> = None;
        let mut pause = Duration::from_micros(250);
        let mut notify_buf = [0u8; 4096];
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Waited::Exited(st);
            }
            if Instant::now() >= deadline {
                return Waited::TimedOut;
            }
            if dialer.is_none() {
                match dialer_for(&self.spec, pid) {
                    Ok(d) => dialer = d,
                    Err(e) => return Waited::Unreachable(e.to_string()),
                }
            }
            match self.spec.ready {
                Ready::Connect => match (&dialer, &self.spec.backend) {
                    (Some(d), Some(b)) => {
                        let probe = tokio::time::timeout(self.spec.connect_timeout, d.dial(b));
                        if matches!(probe.await, Ok(Ok(_))) {
                            return Waited::Ready(dialer);
                        }
                    }
                    // Nothing to connect to: started is ready.
                    (_, None) => return Waited::Ready(dialer),
                    // The sandbox's PID 1 is not there yet.
                    (None, Some(_)) => {}
                },
                Ready::Notify => {
                    if let Some(sock) = notify {
                        let got = tokio::time::timeout(pause, sock.recv(&mut notify_buf)).await;
                        if let Ok(Ok((n, sender))) = got {
                            if self.notify_says_ready(&notify_buf[..n], sender, pid) {
                                if dialer.is_none() {
                                    dialer = dialer_for(&self.spec, pid).ok().flatten();
                                }
                                return Waited::Ready(dialer);
                            }
                        }
                        pause = (pause * 2).min(Duration::from_millis(10));
                        continue;
                    }
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    /// Why a target that is still running is not ready after start_timeout.
    fn not_ready_within(&self) -> String {
        format!(
            "the target was not ready within start_timeout ({}){}",
            show(self.spec.start_timeout),
            match (&self.spec.ready, &self.spec.backend) {
                (Ready::Connect, Some(b)) => format!(": nothing accepted on {b}"),
                (Ready::Notify, _) => ": it never sent READY=1".into(),
                _ => String::new(),
            }
        )
    }

    fn mark_ready(self: &Arc<Self>, dialer: Option<Dialer>, took: Duration) {
        {
            let mut g = self.inner.lock().unwrap();
            g.state = State::Ready;
            g.dialer = dialer.map(Arc::new).or(Some(Arc::new(Dialer::Host)));
            g.started(took);
            g.failures_in_row = 0;
            g.backoff_until = None;
            if g.active == 0 {
                self.arm_idle(&g);
            }
        }
        self.bump();
        self.log.line(&format!(
            "[{}] target ready in {:.1} ms",
            self.spec.name,
            took.as_secs_f64() * 1e3
        ));
    }

    /// Wait for the ready target's exit, and say how it ended.
    async fn watch_exit(self: &Arc<Self>, mut child: tokio::process::Child) {
        let st = child.wait().await;
        self.drop_cell();
        let mut g = self.inner.lock().unwrap();
        let was = g.state;
        g.state = State::Idle;
        g.pid = None;
        g.dialer = None;
        drop(g);
        self.bump();
        let st = st.map(status_text).unwrap_or_else(|e| e.to_string());
        if was == State::Stopping {
            self.log
                .line(&format!("[{}] target stopped ({st})", self.spec.name));
        } else {
            self.log.line(&format!(
                "[{}] target exited ({st}); the next connection starts it again",
                self.spec.name
            ));
        }
    }

    fn fail(self: &Arc<Self>, gen: u64, child: Option<tokio::process::Child>, why: String) {
        self.log
            .line(&format!("[{}] start failed: {why}", self.spec.name));
        let mut g = self.inner.lock().unwrap();
        g.failed_gen = gen;
        g.failures_in_row += 1;
        g.failed_starts += 1;
        g.last_error = Some(why);
        if g.failures_in_row >= 3 {
            let wait = Duration::from_secs(1 << (g.failures_in_row - 3).min(6))
                .min(Duration::from_secs(60));
            g.backoff_until = Some(Instant::now() + wait);
            self.log.line(&format!(
                "[{}] {} starts failed in a row: connections are refused for {}",
                self.spec.name,
                g.failures_in_row,
                show(wait)
            ));
        }
        match child {
            Some(mut c) => {
                g.state = State::Stopping;
                drop(g);
                self.bump();
                let me = self.clone();
                tokio::spawn(async move {
                    me.terminate(&mut c).await;
                    me.inner.lock().unwrap().state = State::Idle;
                    me.inner.lock().unwrap().pid = None;
                    me.bump();
                });
            }
            None => {
                g.state = State::Idle;
                g.pid = None;
                drop(g);
                self.bump();
            }
        }
    }

    /// How long a stopping target gets before SIGKILL: stop_timeout, plus a little for a
    /// sandbox, which kills itself at stop_timeout and then removes its snapshot.
    fn grace(&self) -> Duration {
        self.spec.stop_timeout
            + if self.spec.target.rootfs.is_some() {
                Duration::from_secs(5)
            } else {
                Duration::ZERO
            }
    }

    /// SIGTERM, then SIGKILL after `Self::grace`.
    pub async fn terminate(&self, c: &mut tokio::process::Child) {
        if let Some(pid) = c.id() {
            let _ = kill(pid, libc::SIGTERM);
        }
        let grace = self.grace();
        if tokio::time::timeout(grace, c.wait()).await.is_err() {
            self.log.line(&format!(
                "[{}] the target did not stop within {}: killing it",
                self.spec.name,
                show(grace)
            ));
            let _ = c.kill().await;
        }
    }

    /// Ask a ready target to stop; `start` sees it exit.
    pub fn stop(self: &Arc<Self>, why: &str) {
        if self.inner.lock().unwrap().state == State::Frozen {
            // A frozen process does not act on SIGTERM: thaw it first.
            self.thaw(&format!("to stop it: {why}"));
        }
        let mut g = self.inner.lock().unwrap();
        if g.state != State::Ready {
            return;
        }
        g.state = State::Stopping;
        let pid = g.pid;
        drop(g);
        self.bump();
        self.log
            .line(&format!("[{}] stopping the target: {why}", self.spec.name));
        if let Some(pid) = pid {
            let _ = kill(pid, libc::SIGTERM);
            let me = self.clone();
            let grace = self.grace();
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                let g = me.inner.lock().unwrap();
                if g.state == State::Stopping && g.pid == Some(pid) {
                    let _ = kill(pid, libc::SIGKILL);
                }
            });
        }
    }

    /// A fresh notify socket for one start (READY=1 from an earlier run does not count).
    fn open_notify(&self) -> io::Result<Option<NotifySocket>> {
        match &self.notify_dir {
            Some(dir) if self.spec.ready == Ready::Notify => NotifySocket::open(dir).map(Some),
            _ => Ok(None),
        }
    }

    /// Whether a datagram on the notify socket says READY=1 from the target `pid` or its
    /// descendants. Anyone else's READY=1 is counted and logged, and changes nothing.
    fn notify_says_ready(&self, msg: &[u8], sender: Option<Sender>, pid: u32) -> bool {
        let text = String::from_utf8_lossy(msg);
        if !text.lines().any(|l| l == "READY=1") {
            return false;
        }
        if sender.is_some_and(|s| notify::in_tree(s.pid, pid)) {
            return true;
        }
        self.hit(&self.hits.notify_refused, || {
            format!(
                "ignored READY=1 from {}: not the target's process",
                sender.map_or("an unknown sender".into(), |s| format!(
                    "PID {} (UID {})",
                    s.pid, s.uid
                ))
            )
        });
        false
    }

    /// Count a limit hit, and log it the 1st, 2nd, 4th, 8th... time.
    pub fn hit(&self, counter: &AtomicU64, msg: impl FnOnce() -> String) {
        if let Some(n) = Hits::add(counter) {
            self.log.line(&format!(
                "[{}] {} ({n} so far; `bulkhead status` counts them)",
                self.spec.name,
                msg()
            ));
        }
    }

    pub fn status(&self) -> super::state::SocketStatus {
        let g = self.inner.lock().unwrap();
        let state = match (g.state, g.backoff_until) {
            (State::Idle, Some(u)) if Instant::now() < u => "backoff",
            (s, _) => s.name(),
        };
        super::state::SocketStatus {
            name: self.spec.name.clone(),
            pid: std::process::id(),
            mode: match self.spec.mode {
                Mode::Proxy => "proxy",
                Mode::Pass => "pass",
                Mode::PerConnection => "per-connection",
            }
            .into(),
            listen: self
                .spec
                .listen
                .iter()
                .map(|(e, _)| e.to_string())
                .collect(),
            backend: self.spec.backend.as_ref().map(|b| b.to_string()),
            state: state.into(),
            target_pid: g.pid,
            connections_active: g.active,
            connections_total: g.total,
            connections_refused: g.refused,
            bytes_in: self.counters.bytes_in.load(Relaxed),
            bytes_out: self.counters.bytes_out.load(Relaxed),
            cold_starts: g.cold_starts,
            last_start_ms: g.last_start.map(|d| d.as_secs_f64() * 1e3),
            start_latency: g.start_latency.clone(),
            failed_starts: g.failed_starts,
            last_error: g.last_error.clone(),
            limits: self.hits.snapshot(),
            on_idle: match self.spec.on_idle {
                OnIdle::Stop => "stop",
                OnIdle::Freeze => "freeze",
            }
            .into(),
            freezes: g.freeze_counts.freezes,
            thaws: g.freeze_counts.thaws,
            last_thaw_ms: g.freeze_counts.last_thaw.map(|d| d.as_secs_f64() * 1e3),
            frozen_memory_bytes: g
                .frozen
                .as_ref()
                .filter(|f| f.since.is_some())
                .and_then(|f| f.memory),
        }
    }

    /// Stop whatever runs, for shutdown.
    pub async fn shutdown(self: &Arc<Self>) {
        let pid = {
            let g = self.inner.lock().unwrap();
            g.pid
        };
        if pid.is_none() {
            return;
        }
        {
            let mut g = self.inner.lock().unwrap();
            if matches!(g.state, State::Ready | State::Frozen) {
                drop(g);
                self.stop("bulkhead serve is stopping");
            } else {
                g.state = State::Stopping;
                if let Some(p) = pid {
                    let _ = kill(p, libc::SIGTERM);
                }
            }
        }
        let mut rx = self.changed.subscribe();
        let limit = Instant::now() + self.spec.stop_timeout + Duration::from_secs(6);
        while self.inner.lock().unwrap().pid.is_some() && Instant::now() < limit {
            let _ = tokio::time::timeout(Duration::from_millis(100), rx.changed()).await;
        }
    }
}

pub fn kill(pid: u32, sig: libc::c_int) -> io::Result<()> {
    bulkhead_sys::process::kill(pid as i32, sig)
}

pub fn status_text(st: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(0), _) => "exit status 0".into(),
        (Some(c), _) => format!("exit status {c}"),
        (_, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown status".into(),
    }
}

/// A duration as systemd prints it.
pub fn show(d: Duration) -> String {
    if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else if d.as_secs() < 120 {
        format!("{:.3}", d.as_secs_f64())
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
            + "s"
    } else {
        format!("{}min {}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}
