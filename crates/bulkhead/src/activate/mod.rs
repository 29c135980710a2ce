//! Socket activation: `bulkhead serve` listens on the plan's sockets, starts each socket's
//! target on the first connection, holds the connections that arrive meanwhile until it is
//! ready, proxies them (or hands the listening sockets over, or starts one target per
//! connection), and stops the target when it has been idle for `idle_timeout`.
//!
//! Flow: plan `[socket.NAME]` ([`bulkhead_plan::socket`]) -> [`check`] (targets exist, names
//! free) -> [`listen::bind_all`] (every address bound before anything runs) -> one
//! current-thread tokio runtime with a loop per listener ([`stream`], [`udp`], [`pass`]) and
//! a [`target::Activator`] per socket.

pub mod command;
pub mod dial;
pub mod fds;
pub mod flows;
pub mod freeze;
pub mod frozen;
pub mod inherited;
pub mod latency;
pub mod launch;
pub mod limits;
pub mod listen;
pub mod notify;
pub mod pass;
pub mod proxy;
pub mod proxyproto;
pub mod sockfile;
pub mod sources;
pub mod state;
pub mod stream;
pub mod target;
pub mod udp;

use bulkhead_plan::socket::{Endpoint, Mode, SocketSpec};
use bulkhead_plan::Plan;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use launch::Launcher;
use listen::Listener;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use target::Activator;

pub use command::{GlobalArgs, How, RenderTarget, RunTarget, TargetCommand};
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
        // A booted target runs the root's init (spawn --boot finds it as nspawn does).
        let prog = match s.target.command.first() {
            Some(p) if !s.target.boot => p.as_str(),
            _ => "/sbin/init",
        };
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
                    } else if s.target.boot
                        && !command_in(&root, prog)
                        && !command_in(&root, "/lib/systemd/systemd")
                    {
                        errors.push(
                            Diagnostic::error(format!(
                                "boot = true, and the root {} has no init (/sbin/init or /lib/systemd/systemd)",
                                root.display()
                            ))
                            .at(at.clone())
                            .context(ctx.clone())
                            .hint("give a root with systemd (debootstrap --include=systemd-sysv), or boot = false and a command"),
                        );
                    } else if !s.target.boot && !command_in(&root, prog) {
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
        let target = launcher.target(s, fds, notify.as_deref(), &[]);
        let argv = launcher.argv(&target);
        let env = match &target.notify_socket {
            Some(p) => format!("NOTIFY_SOCKET={} ", shell_quote(&p.to_string_lossy())),
            None => String::new(),
        };
        out.push(format!(
            "  on the first connection: {env}{}",
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
        if s.on_idle == bulkhead_plan::socket::OnIdle::Freeze {
            out.push(format!(
                "  when idle: frozen {}, thawed by the next connection; stopped after {} frozen",
                match (&launcher.freezer, &s.target.slice) {
                    (Some(frozen::Freezer::Units(_)), _) => format!(
                        "by systemd ({} of the target: FreezeUnit)",
                        if s.target.rootfs.is_some() { "the scope bulkhead-spawn-PID.scope" } else { "the service bulkhead-run-PID.service" }
                    ),
                    (Some(frozen::Freezer::Cells(fs)), Some(slice)) => match fs.freezer(slice) {
                        Some((dir, file, ..)) => format!(
                            "in {}/bulkhead-serve-{} ({file})",
                            dir.display(),
                            s.name
                        ),
                        None => "(not on this host: no cgroup.freeze and no v1 freezer; stopped instead)".into(),
                    },
                    _ => "(no cgroup backend here; stopped instead)".into(),
                },
                s.freeze_timeout.map_or("infinity".into(), target::show)
            ));
        }
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

/// Bind everything (or take what a socket unit passed: LISTEN_FDS), then serve until
/// SIGTERM or SIGINT. Returns once every target stopped. Call it before any thread starts
/// (it takes the LISTEN_* variables out of the environment).
pub fn serve(plan: &Plan, specs: Vec<SocketSpec>, launcher: Launcher, log: Log) -> Result<()> {
    check(plan, &specs)?;
    fds::ensure(plan, &specs)?;
    let mut passed = inherited::Pool::from_env()?;
    let mut bound = Vec::new();
    for s in &specs {
        bound.push(listen::bind_all(s, &mut passed)?);
    }
    passed.check_all_claimed(&specs)?;
    let bound = specs.into_iter().zip(bound).collect();
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
        let listen: Vec<String> = listeners
            .iter()
            .map(|l| match l.passed {
                true => format!("{} (from the socket unit)", l.endpoint),
                false => l.endpoint.to_string(),
            })
            .collect();
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
                owners.push(tokio::spawn(pass::pass_loop(act.clone(), fds)));
            }
            _ => {
                for l in &listeners {
                    let fd = l.fd.try_clone().map_err(|e| Error::failed(e.to_string()))?;
                    let t = match (&l.endpoint, act.spec.mode) {
                        (Endpoint::Udp(_), _) => tokio::spawn(udp::udp_loop(act.clone(), fd)),
                        (_, m) => tokio::spawn(stream::accept_loop(act.clone(), fd, m)),
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
