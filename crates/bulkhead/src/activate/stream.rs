//! Stream listeners (TCP and unix): the accept loop with its limits (max_connections in all,
//! max_connections_per_source per client), and each accepted connection proxied to the
//! target's backend or handed to a target of its own (per-connection mode).
// System calls only through bulkhead-sys (clippy.toml's list, issue 27).
#![deny(clippy::disallowed_methods)]

use super::proxy::{self, Conn};
use super::sources::{Slot, Source, Sources};
use super::target::{self, Activator};
use super::{launch, proxyproto};
use bulkhead_plan::socket::Mode;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::TryAcquireError;

enum AnyListener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl AnyListener {
    fn new(fd: OwnedFd) -> std::io::Result<AnyListener> {
        use std::os::fd::AsFd;
        Ok(if bulkhead_sys::net::is_unix(fd.as_fd())? {
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

/// The client a connection counts against: its address, or a unix peer's user.
fn source_of(conn: &Conn, peer: Option<SocketAddr>) -> Source {
    match (conn, peer) {
        (_, Some(p)) => Source::ip(p.ip()),
        (Conn::Unix(u), None) => u
            .peer_cred()
            .map_or(Source::Unknown, |c| Source::Uid(c.uid())),
        (Conn::Tcp(_), None) => Source::Unknown,
    }
}

pub async fn accept_loop(act: Arc<Activator>, fd: OwnedFd, mode: Mode) {
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
    let max = act.spec.max_connections;
    // The socket's, shared by its listeners: the limits hold per socket.
    let (sem, sources) = (act.slots.clone(), act.sources.clone());
    loop {
        // At max_connections, stop accepting: new clients wait in the kernel's backlog.
        let permit = match sem.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return,
            Err(TryAcquireError::NoPermits) => {
                act.hit(&act.hits.max_connections, || {
                    format!(
                        "max_connections ({max}) reached: new clients wait in the listen backlog"
                    )
                });
                match sem.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => return,
                }
            }
        };
        let (conn, peer, local) = match l.accept().await {
            Ok(c) => c,
            Err(e) => {
                act.hit(&act.hits.accept_errors, || format!("accept failed: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // One client cannot take every slot: past its share it is closed at once.
        let source = source_of(&conn, peer);
        let Some(slot) = sources.take(source) else {
            act.hit(&act.hits.per_source, || {
                format!(
                    "closed a connection from {source} at once: it holds max_connections_per_source ({}) already",
                    act.spec.max_connections_per_source
                )
            });
            continue;
        };
        let act = act.clone();
        let sources = sources.clone();
        tokio::spawn(async move {
            match mode {
                Mode::PerConnection => per_connection(&act, conn, peer, slot).await,
                _ => proxy_one(&act, &sources, slot, conn, peer, local).await,
            }
            drop(permit);
        });
    }
}

fn peer_text(a: Option<SocketAddr>) -> String {
    a.map_or("a unix client".into(), |a| a.to_string())
}

/// The PROXY header a load balancer sends first: the real client's addresses, and from then
/// on the connection counts against that client (the load balancer's own slot is given
/// back). None: the connection is to be closed (logged and counted).
async fn read_header(
    act: &Arc<Activator>,
    sources: &Arc<Sources>,
    slot: Slot,
    conn: &Conn,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
) -> Option<(Slot, Option<SocketAddr>, Option<SocketAddr>)> {
    match proxyproto::read(conn, act.spec.proxy_header_timeout).await {
        Ok(proxyproto::Header::Proxy { src: s, dst: d }) => {
            let client = Source::ip(s.ip());
            if client == slot.source {
                return Some((slot, Some(s), Some(d)));
            }
            drop(slot);
            match sources.take(client) {
                Some(slot) => Some((slot, Some(s), Some(d))),
                None => {
                    act.hit(&act.hits.per_source, || {
                        format!(
                            "closed a connection for {client} (PROXY header) at once: it holds max_connections_per_source ({}) already",
                            act.spec.max_connections_per_source
                        )
                    });
                    None
                }
            }
        }
        Ok(proxyproto::Header::Local) => Some((slot, src, dst)),
        Err(e) => {
            let counter = match e {
                proxyproto::ReadError::TimedOut => &act.hits.proxy_header_timeouts,
                proxyproto::ReadError::Invalid(_) => &act.hits.proxy_header_invalid,
                proxyproto::ReadError::Io(_) => return None,
            };
            act.hit(counter, || {
                format!("closed the connection from {}: {e}", peer_text(src))
            });
            None
        }
    }
}

async fn proxy_one(
    act: &Arc<Activator>,
    sources: &Arc<Sources>,
    slot: Slot,
    conn: Conn,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
) {
    let _guard = act.open_conn();
    let (_slot, src, dst) = if act.spec.accept_proxy_protocol {
        match read_header(act, sources, slot, &conn, src, dst).await {
            Some(x) => x,
            None => return,
        }
    } else {
        (slot, src, dst)
    };
    let Some(backend) = reach_backend(act, src).await else {
        return;
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
            act.hit(&act.hits.idle_closed, || {
                format!("closed the connection from {}: {e}", peer_text(src))
            });
        }
    }
}

/// A connection to the target's backend, starting the target if needed. None: the client
/// is to be closed (the reason is logged).
async fn reach_backend(act: &Arc<Activator>, src: Option<SocketAddr>) -> Option<Conn> {
    let backend_ep = act.spec.backend.as_ref().expect("proxy mode has a backend");
    let mut tries = 0;
    let t0 = Instant::now();
    loop {
        let dialer = match act.ensure_ready().await {
            Ok(d) => d,
            Err(m) => {
                act.refused();
                act.log.line(&format!(
                    "[{}] closing the connection from {}: {m}",
                    act.spec.name,
                    peer_text(src)
                ));
                return None;
            }
        };
        let why =
            match tokio::time::timeout(act.spec.connect_timeout, dialer.dial(backend_ep)).await {
                Ok(Ok(b)) => return Some(b),
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
            act.refused();
            act.log.line(&format!(
                "[{}] closing the connection from {}: cannot reach {backend_ep}: {why}",
                act.spec.name,
                peer_text(src)
            ));
            return None;
        }
        if tries > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// inetd / Accept=yes: a fresh target per connection, the connection on its stdin/stdout.
async fn per_connection(act: &Arc<Activator>, conn: Conn, peer: Option<SocketAddr>, slot: Slot) {
    let _guard = act.open_conn();
    let _slot = slot;
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
    let _ = bulkhead_sys::net::set_blocking(std::os::fd::AsFd::as_fd(&fd));
    let mut env = Vec::new();
    if let Some(p) = peer {
        env.push(("REMOTE_ADDR".to_string(), p.ip().to_string()));
        env.push(("REMOTE_PORT".to_string(), p.port().to_string()));
    }
    let target = act.launcher.target(&act.spec, 0, None, &env);
    let t0 = Instant::now();
    let mut child = match launch::start_process(&act.launcher, &target, &[], Some(fd)) {
        Ok(c) => c,
        Err(e) => {
            act.refused();
            act.log
                .line(&format!("[{}] cannot start the target: {e}", act.spec.name));
            return;
        }
    };
    {
        let mut g = act.inner.lock().unwrap();
        g.started(t0.elapsed());
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
