//! Socket activation: `bulkhead serve` listens on the plan's sockets, starts each socket's
//! target on the first connection, holds the connections that arrive meanwhile until it is
//! ready, proxies them (or hands the listening sockets over, or starts one target per
//! connection), and stops the target when it has been idle for `idle_timeout`.
//!
//! Flow: plan `[socket.NAME]` ([`bulkhead_plan::socket`]) -> [`check`] (targets exist, names
//! free) -> [`listen::bind_all`] (every address bound before anything runs) -> one
//! current-thread tokio runtime with an accept loop per listener and a [`target::Activator`]
//! per socket.

pub mod dial;
pub mod launch;
pub mod limits;
pub mod listen;
pub mod notify;
pub mod proxy;
pub mod proxyproto;
pub mod sockfile;
pub mod state;
pub mod target;

use bulkhead_plan::socket::{Endpoint, Mode, SocketSpec};
use bulkhead_plan::Plan;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use launch::Launcher;
use listen::Listener;
use proxy::Conn;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use target::Activator;
use tokio::io::unix::AsyncFd;
use tokio::sync::Semaphore;

pub use launch::Launcher as TargetLauncher;

/// Log lines on stderr, with the wall-clock time (UTC) like a journal.
#[derive(Debug, Clone, Copy)]
pub struct Log {
    pub quiet: bool,
}

impl Log {
    pub fn line(&self, msg: &str) {
        if self.quiet {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let s = now.as_secs() % 86400;
        eprintln!(
            "{:02}:{:02}:{:02}.{:03} bulkhead serve: {msg}",
            s / 3600,
            s / 60 % 60,
            s % 60,
            now.subsec_millis()
        );
    }
}

/// The sockets to serve: all of the plan's, or those named.
pub fn select(plan: &Plan, only: &[String]) -> Result<Vec<SocketSpec>> {
    if plan.sockets.is_empty() {
        return Err(Error::invalid(
            Diagnostic::error("the plan has no sockets")
                .at(plan.source.label())
                .hint("add a [socket.NAME] section (see `bulkhead serve --help`)"),
        ));
    }
    if only.is_empty() {
        return Ok(plan.sockets.values().cloned().collect());
    }
    let mut out = Vec::new();
    for n in only {
        match plan.sockets.get(n) {
            Some(s) => out.push(s.clone()),
            None => {
                let names: Vec<&str> = plan.sockets.keys().map(|s| s.as_str()).collect();
                return Err(Error::invalid(
                    Diagnostic::error(format!("--socket {n}: the plan has no such socket"))
                        .at(plan.source.label())
                        .hint(format!("the plan's sockets: {}", names.join(", "))),
                ));
            }
        }
    }
    Ok(out)
}

/// Check what can be checked before anything starts: the target's command and root exist,
/// and no other `serve` owns the socket.
pub fn check(plan: &Plan, specs: &[SocketSpec]) -> Result<()> {
    let mut errors = Vec::new();
    for s in specs {
        let at = plan.source.at(s.loc);
        let ctx = format!("[socket.{}] target", s.name);
        if let Some(pid) = state::owner(&s.name) {
            errors.push(
                Diagnostic::error(format!(
                    "socket '{}' is already served by bulkhead serve (pid {pid})",
                    s.name
                ))
                .at(at.clone())
                .hint("stop that process first, or serve another socket"),
            );
        }
        let prog = &s.target.command[0];
        match &s.target.rootfs {
            Some(r) => match crate::image::resolve_image(r) {
                Ok(root) => {
                    if !root.is_dir() {
                        errors.push(
                            Diagnostic::error(format!(
                                "rootfs {}: not a directory",
                                root.display()
                            ))
                            .at(at.clone())
                            .context(ctx.clone()),
                        );
                    } else if !command_in(&root, prog) {
                        errors.push(
                            Diagnostic::error(format!(
                                "the command '{prog}' does not exist in the root {}",
                                root.display()
                            ))
                            .at(at.clone())
                            .context(ctx.clone())
                            .hint("the command runs inside the sandbox: give its path there"),
                        );
                    }
                }
                Err(e) => {
                    for d in e.diagnostics() {
                        errors.push(d.at(at.clone()).context(ctx.clone()));
                    }
                }
            },
            None => {
                if !command_in(Path::new("/"), prog) {
                    errors.push(
                        Diagnostic::error(format!("the command '{prog}' does not exist"))
                            .at(at.clone())
                            .context(ctx.clone())
                            .hint("give the full path of an executable, or a name found in PATH"),
                    );
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(errors))
    }
}

/// Whether `prog` names an executable file in `root` (a path, or a name in the usual PATH).
fn command_in(root: &Path, prog: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let inside = |p: &str| root.join(p.trim_start_matches('/'));
    if prog.contains('/') {
        // Absolute symlinks inside a root point into the root, not the host.
        return is_exec(&inside(prog)) || std::fs::symlink_metadata(inside(prog)).is_ok();
    }
    let path = if root == Path::new("/") {
        std::env::var("PATH").unwrap_or_else(|_| crate::sandbox::setup::DEFAULT_PATH.into())
    } else {
        crate::sandbox::setup::DEFAULT_PATH.into()
    };
    path.split(':').filter(|d| !d.is_empty()).any(|d| {
        let p = inside(&format!("{d}/{prog}"));
        is_exec(&p) || std::fs::symlink_metadata(&p).is_ok()
    })
}

/// What `serve --dry-run` prints.
pub fn describe(specs: &[SocketSpec], launcher: &Launcher) -> Vec<String> {
    let mut out = Vec::new();
    for s in specs {
        let listen: Vec<String> = s.listen.iter().map(|(e, _)| e.to_string()).collect();
        out.push(format!(
            "[socket.{}] listen on {} ({} mode{})",
            s.name,
            listen.join(", "),
            match s.mode {
                Mode::Proxy => "proxy",
                Mode::Pass => "pass",
                Mode::PerConnection => "per-connection",
            },
            match &s.backend {
                Some(b) => format!(", backend {b}"),
                None => String::new(),
            }
        ));
        let fds = if s.mode == Mode::Pass {
            s.listen.len() as u32
        } else {
            0
        };
        let notify = (s.ready == bulkhead_plan::socket::Ready::Notify).then(|| notify_dir(&s.name));
        let argv = launcher.command(s, fds, notify.as_deref(), &[]);
        out.push(format!(
            "  on the first connection: {}",
            argv.iter()
                .map(|a| shell_quote(&a.to_string_lossy()))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        out.push(format!(
            "  ready: {}; start_timeout {}; idle_timeout {}; stop: SIGTERM, SIGKILL after {}",
            match s.ready {
                bulkhead_plan::socket::Ready::Connect => "when the backend accepts a connection",
                bulkhead_plan::socket::Ready::Notify => "on READY=1",
            },
            target::show(s.start_timeout),
            s.idle_timeout.map_or("infinity".into(), target::show),
            target::show(s.stop_timeout)
        ));
    }
    out
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn notify_dir(name: &str) -> PathBuf {
    state::dir().join(format!("{name}.notify"))
}

/// Bind everything, then serve until SIGTERM or SIGINT. Returns once every target stopped.
pub fn serve(plan: &Plan, specs: Vec<SocketSpec>, launcher: Launcher, log: Log) -> Result<()> {
    check(plan, &specs)?;
    let mut bound = Vec::new();
    for s in specs {
        let l = listen::bind_all(&s)?;
        bound.push((s, l));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::failed(format!("cannot start the event loop: {e}")))?;
    rt.block_on(run(bound, launcher, log))
}

async fn run(bound: Vec<(SocketSpec, Vec<Listener>)>, launcher: Launcher, log: Log) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| Error::failed(e.to_string()))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| Error::failed(e.to_string()))?;
    let mut acts = Vec::new();
    // Accept loops are aborted at shutdown; owners of target processes stop them first.
    let mut tasks = Vec::new();
    let mut owners = Vec::new();
    let mut keep = Vec::new();
    for (spec, listeners) in bound {
        let notify =
            (spec.ready == bulkhead_plan::socket::Ready::Notify).then(|| notify_dir(&spec.name));
        let act = Activator::new(spec, launcher.clone(), notify, log);
        let listen: Vec<String> = act.spec.listen.iter().map(|(e, _)| e.to_string()).collect();
        log.line(&format!(
            "[{}] listening on {}",
            act.spec.name,
            listen.join(", ")
        ));
        let _ = state::write(&act.status());
        match act.spec.mode {
            Mode::Pass => {
                let fds: Vec<OwnedFd> = listeners
                    .iter()
                    .map(|l| l.fd.try_clone())
                    .collect::<std::io::Result<_>>()
                    .map_err(|e| {
                        Error::failed(format!("cannot share the listening sockets: {e}"))
                    })?;
                owners.push(tokio::spawn(pass_loop(act.clone(), fds)));
            }
            _ => {
                for l in &listeners {
                    let fd = l.fd.try_clone().map_err(|e| Error::failed(e.to_string()))?;
                    let t = match (&l.endpoint, act.spec.mode) {
                        (Endpoint::Udp(_), _) => tokio::spawn(udp_loop(act.clone(), fd)),
                        (_, m) => tokio::spawn(accept_loop(act.clone(), fd, m)),
                    };
                    tasks.push(t);
                }
            }
        }
        tasks.push(tokio::spawn(status_loop(act.clone())));
        acts.push(act);
        keep.push(listeners);
    }
    sd_notify("READY=1");
    let sig = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    log.line(&format!("{sig}: stopping"));
    sd_notify("STOPPING=1");
    for t in &tasks {
        t.abort();
    }
    for a in &acts {
        a.stopping.send_replace(true);
    }
    for o in owners {
        let _ = o.await;
    }
    // Stop accepting: the listening sockets close (unix socket files are removed).
    drop(keep);
    let stops: Vec<_> = acts
        .iter()
        .map(|a| {
            let a = a.clone();
            tokio::spawn(async move {
                a.shutdown().await;
                // Per-connection targets stop themselves; wait for them.
                let limit = Instant::now() + a.spec.stop_timeout + Duration::from_secs(6);
                while a.inner.lock().unwrap().active > 0 && Instant::now() < limit {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    for s in stops {
        let _ = s.await;
    }
    for a in &acts {
        state::remove(&a.spec.name);
        let _ = std::fs::remove_dir_all(notify_dir(&a.spec.name));
    }
    Ok(())
}

/// Tell systemd (when it started us as Type=notify) how we are.
fn sd_notify(msg: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(s) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let p = path.to_string_lossy();
    let _ = if let Some(abs) = p.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abs.as_bytes())
            .and_then(|a| s.send_to_addr(msg.as_bytes(), &a))
    } else {
        s.send_to(msg.as_bytes(), Path::new(&*p))
    };
}

async fn status_loop(act: Arc<Activator>) {
    let mut rx = act.changed.subscribe();
    let mut conns = act.conns_changed.subscribe();
    loop {
        let _ = state::write(&act.status());
        // At once after a state change; after a connection opened or closed at most ten times
        // a second; and once a second for the byte counters.
        tokio::select! {
            _ = rx.changed() => {}
            _ = conns.changed() => tokio::time::sleep(Duration::from_millis(100)).await,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

enum AnyListener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl AnyListener {
    fn new(fd: OwnedFd) -> std::io::Result<AnyListener> {
        let dom = socket2::SockRef::from(&fd).domain()?;
        Ok(if dom == socket2::Domain::UNIX {
            AnyListener::Unix(tokio::net::UnixListener::from_std(
                std::os::unix::net::UnixListener::from(fd),
            )?)
        } else {
            AnyListener::Tcp(tokio::net::TcpListener::from_std(
                std::net::TcpListener::from(fd),
            )?)
        })
    }
    async fn accept(&self) -> std::io::Result<(Conn, Option<SocketAddr>, Option<SocketAddr>)> {
        match self {
            AnyListener::Tcp(l) => {
                let (c, peer) = l.accept().await?;
                let _ = c.set_nodelay(true);
                let local = c.local_addr().ok();
                Ok((Conn::Tcp(c), Some(peer), local))
            }
            AnyListener::Unix(l) => {
                let (c, _) = l.accept().await?;
                Ok((Conn::Unix(c), None, None))
            }
        }
    }
}

async fn accept_loop(act: Arc<Activator>, fd: OwnedFd, mode: Mode) {
    let l = match AnyListener::new(fd) {
        Ok(l) => l,
        Err(e) => {
            act.log.line(&format!(
                "[{}] cannot watch the listener: {e}",
                act.spec.name
            ));
            return;
        }
    };
    let sem = Arc::new(Semaphore::new(act.spec.max_connections as usize));
    loop {
        // At max_connections, stop accepting: new clients wait in the kernel's backlog.
        let Ok(permit) = sem.clone().acquire_owned().await else {
            return;
        };
        let (conn, peer, local) = match l.accept().await {
            Ok(c) => c,
            Err(e) => {
                act.log
                    .line(&format!("[{}] accept failed: {e}", act.spec.name));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let act = act.clone();
        tokio::spawn(async move {
            match mode {
                Mode::PerConnection => per_connection(&act, conn, peer).await,
                _ => proxy_one(&act, conn, peer, local).await,
            }
            drop(permit);
        });
    }
}

fn peer_text(a: Option<SocketAddr>) -> String {
    a.map_or("a unix client".into(), |a| a.to_string())
}

async fn proxy_one(
    act: &Arc<Activator>,
    conn: Conn,
    mut src: Option<SocketAddr>,
    mut dst: Option<SocketAddr>,
) {
    let _guard = act.open_conn();
    if act.spec.accept_proxy_protocol {
        match proxyproto::read(&conn, Duration::from_secs(5)).await {
            Ok(proxyproto::Header::Proxy { src: s, dst: d }) => {
                src = Some(s);
                dst = Some(d);
            }
            Ok(proxyproto::Header::Local) => {}
            Err(e) => {
                act.log.line(&format!(
                    "[{}] closing the connection from {}: {e}",
                    act.spec.name,
                    peer_text(src)
                ));
                return;
            }
        }
    }
    let backend_ep = act.spec.backend.as_ref().expect("proxy mode has a backend");
    let mut tries = 0;
    let t0 = Instant::now();
    let backend = loop {
        let dialer = match act.ensure_ready().await {
            Ok(d) => d,
            Err(m) => {
                act.log.line(&format!(
                    "[{}] closing the connection from {}: {m}",
                    act.spec.name,
                    peer_text(src)
                ));
                return;
            }
        };
        let why =
            match tokio::time::timeout(act.spec.connect_timeout, dialer.dial(backend_ep)).await {
                Ok(Ok(b)) => break b,
                // The target may have just exited: the next round starts it again.
                Ok(Err(e)) => {
                    tries += 1;
                    e.to_string()
                }
                // A full accept queue drops the SYN: try again now rather than after the
                // kernel's 1 s retransmission.
                Err(_) => format!(
                    "no answer within {}",
                    target::show(act.spec.connect_timeout)
                ),
            };
        if tries >= 3 || t0.elapsed() >= act.spec.start_timeout {
            act.log.line(&format!(
                "[{}] closing the connection from {}: cannot reach {backend_ep}: {why}",
                act.spec.name,
                peer_text(src)
            ));
            return;
        }
        if tries > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if let Some(v) = act.spec.proxy_protocol {
        if backend
            .write_all(&proxyproto::header(v, src, dst))
            .await
            .is_err()
        {
            return;
        }
    }
    if let Err(e) = proxy::proxy(
        conn,
        backend,
        act.spec.pipe_size,
        act.spec.connection_idle_timeout,
        &act.counters,
    )
    .await
    {
        if e.kind() == std::io::ErrorKind::TimedOut {
            act.log.line(&format!(
                "[{}] closed the connection from {}: {e}",
                act.spec.name,
                peer_text(src)
            ));
        }
    }
}

/// inetd / Accept=yes: a fresh target per connection, the connection on its stdin/stdout.
async fn per_connection(act: &Arc<Activator>, conn: Conn, peer: Option<SocketAddr>) {
    let _guard = act.open_conn();
    let fd: OwnedFd = match conn {
        Conn::Tcp(c) => match c.into_std() {
            Ok(s) => s.into(),
            Err(_) => return,
        },
        Conn::Unix(c) => match c.into_std() {
            Ok(s) => s.into(),
            Err(_) => return,
        },
    };
    // The target reads and writes it with plain blocking calls.
    let _ = socket2::SockRef::from(&fd).set_nonblocking(false);
    let mut env = Vec::new();
    if let Some(p) = peer {
        env.push(("REMOTE_ADDR".to_string(), p.ip().to_string()));
        env.push(("REMOTE_PORT".to_string(), p.port().to_string()));
    }
    let argv = act.launcher.command(&act.spec, 0, None, &env);
    let t0 = Instant::now();
    let mut child = match launch::start_process(&argv, &[], Some(fd)) {
        Ok(c) => c,
        Err(e) => {
            act.log
                .line(&format!("[{}] cannot start the target: {e}", act.spec.name));
            return;
        }
    };
    {
        let mut g = act.inner.lock().unwrap();
        g.cold_starts += 1;
        g.last_start = Some(t0.elapsed());
    }
    act.changed.send_modify(|v| *v += 1);
    let st = tokio::select! {
        st = child.wait() => st,
        _ = act.stopped() => {
            act.terminate(&mut child).await;
            return;
        }
    };
    match st {
        Ok(st) if st.success() => {}
        Ok(st) => act.log.line(&format!(
            "[{}] the target for {} ended with {}",
            act.spec.name,
            peer_text(peer),
            target::status_text(st)
        )),
        Err(e) => act.log.line(&format!("[{}] wait: {e}", act.spec.name)),
    }
}

fn any_readable(fds: &[OwnedFd]) -> bool {
    let b: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
    bulkhead_sys::fd::any_readable(&b)
}

/// Pass mode: wait for a client without accepting, start the target with the listening
/// sockets as fds 3.., and watch again when it exits.
async fn pass_loop(act: Arc<Activator>, fds: Vec<OwnedFd>) {
    let watches: Vec<AsyncFd<OwnedFd>> = match fds
        .iter()
        .map(|fd| bulkhead_sys::fd::async_readable(fd.try_clone()?))
        .collect::<std::io::Result<_>>()
    {
        Ok(w) => w,
        Err(e) => {
            act.log.line(&format!(
                "[{}] cannot watch the sockets: {e}",
                act.spec.name
            ));
            return;
        }
    };
    let mut failures = 0u32;
    loop {
        while !any_readable(&fds) {
            let waits = watches.iter().map(|w| Box::pin(w.readable()));
            tokio::select! {
                r = futures_select(waits) => {
                    if let Ok(mut g) = r {
                        g.clear_ready();
                    }
                }
                _ = act.stopped() => return,
            }
        }
        let argv = act.launcher.command(&act.spec, fds.len() as u32, None, &[]);
        let t0 = Instant::now();
        let mut child = match launch::start_process(
            &argv,
            &fds.iter().map(|f| f.as_fd()).collect::<Vec<_>>(),
            None,
        ) {
            Ok(c) => c,
            Err(e) => {
                act.log
                    .line(&format!("[{}] cannot start the target: {e}", act.spec.name));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        {
            let mut g = act.inner.lock().unwrap();
            g.state = target::State::Ready;
            g.pid = child.id();
            g.cold_starts += 1;
            g.last_start = Some(t0.elapsed());
        }
        act.changed.send_modify(|v| *v += 1);
        act.log.line(&format!(
            "[{}] started the target (pid {}) with {} listening socket(s)",
            act.spec.name,
            child.id().unwrap_or(0),
            fds.len()
        ));
        let st = tokio::select! {
            st = child.wait() => st,
            _ = act.stopped() => {
                act.terminate(&mut child).await;
                act.inner.lock().unwrap().pid = None;
                return;
            }
        };
        let ran = t0.elapsed();
        {
            let mut g = act.inner.lock().unwrap();
            g.state = target::State::Idle;
            g.pid = None;
        }
        act.changed.send_modify(|v| *v += 1);
        let st_text = st
            .as_ref()
            .map(|s| target::status_text(*s))
            .unwrap_or_else(|e| e.to_string());
        let ok = st.as_ref().is_ok_and(|s| s.success());
        // A target that dies at once while clients wait would be restarted in a tight loop:
        // back off as systemd's start limit does.
        if ran < Duration::from_secs(1) && (!ok || any_readable(&fds)) {
            failures += 1;
            let wait = Duration::from_millis(100 << failures.min(8)).min(Duration::from_secs(30));
            {
                let mut g = act.inner.lock().unwrap();
                g.failed_starts += 1;
                g.last_error = Some(format!("exited after {} ms ({st_text})", ran.as_millis()));
            }
            act.log.line(&format!(
                "[{}] the target exited after {} ms ({st_text}); next start in {}",
                act.spec.name,
                ran.as_millis(),
                target::show(wait)
            ));
            tokio::time::sleep(wait).await;
        } else {
            failures = 0;
            act.log.line(&format!(
                "[{}] the target exited ({st_text})",
                act.spec.name
            ));
        }
    }
}

/// The first of several futures to finish (a tiny select_all, to avoid a dependency).
async fn futures_select<F: std::future::Future + Unpin>(
    futs: impl Iterator<Item = F>,
) -> F::Output {
    let mut futs: Vec<F> = futs.collect();
    std::future::poll_fn(move |cx| {
        for f in futs.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// UDP proxy: one flow per client address, each with its own connected socket towards the
/// backend; datagrams that arrive while the target starts are queued, not dropped.
async fn udp_loop(act: Arc<Activator>, fd: OwnedFd) {
    let sock = match tokio::net::UdpSocket::from_std(std::net::UdpSocket::from(fd)) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            act.log
                .line(&format!("[{}] cannot watch the socket: {e}", act.spec.name));
            return;
        }
    };
    let flows: Arc<std::sync::Mutex<HashMap<SocketAddr, tokio::sync::mpsc::Sender<Vec<u8>>>>> =
        Default::default();
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, peer) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(_) => continue,
        };
        let data = buf[..n].to_vec();
        let existing = flows.lock().unwrap().get(&peer).cloned();
        if let Some(tx) = existing {
            let _ = tx.try_send(data);
            continue;
        }
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let _ = tx.try_send(data);
        flows.lock().unwrap().insert(peer, tx);
        let (act, sock, flows) = (act.clone(), sock.clone(), flows.clone());
        tokio::spawn(async move {
            udp_flow(&act, &sock, peer, rx).await;
            flows.lock().unwrap().remove(&peer);
        });
    }
}

async fn udp_flow(
    act: &Arc<Activator>,
    sock: &tokio::net::UdpSocket,
    peer: SocketAddr,
    mut rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let _guard = act.open_conn();
    let Some(Endpoint::Udp(backend_addr)) = act.spec.backend.clone() else {
        return;
    };
    let dialer = match act.ensure_ready().await {
        Ok(d) => d,
        Err(m) => {
            act.log.line(&format!(
                "[{}] dropping datagrams from {peer}: {m}",
                act.spec.name
            ));
            return;
        }
    };
    let up = match dialer.udp(backend_addr) {
        Ok(s) => s,
        Err(e) => {
            act.log.line(&format!(
                "[{}] cannot reach {backend_addr}: {e}",
                act.spec.name
            ));
            return;
        }
    };
    let idle = act
        .spec
        .connection_idle_timeout
        .unwrap_or(Duration::from_secs(30));
    let mut buf = vec![0u8; 65536];
    loop {
        tokio::select! {
            d = rx.recv() => {
                let Some(d) = d else { return };
                if up.send(&d).await.is_ok() {
                    act.counters.bytes_in.fetch_add(d.len() as u64, Relaxed);
                }
            }
            r = up.recv(&mut buf) => {
                // ECONNREFUSED from an ICMP error: the backend is not there (yet); go on.
                if let Ok(n) = r {
                    if sock.send_to(&buf[..n], peer).await.is_ok() {
                        act.counters.bytes_out.fetch_add(n as u64, Relaxed);
                    }
                }
            }
            _ = tokio::time::sleep(idle) => return,
        }
    }
}
