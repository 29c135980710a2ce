//! Stream listeners (TCP and unix): the accept loop, and each accepted connection proxied to
//! the target's backend or handed to a target of its own (per-connection mode).

use super::proxy::{self, Conn};
use super::target::{self, Activator};
use super::{launch, proxyproto};
use bulkhead_plan::socket::Mode;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

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
