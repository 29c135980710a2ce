//! UDP proxy: one flow per client address, each with its own connected socket towards the
//! backend.

use super::target::Activator;
use bulkhead_plan::socket::Endpoint;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// UDP proxy: one flow per client address, each with its own connected socket towards the
/// backend; datagrams that arrive while the target starts are queued, not dropped.
pub async fn udp_loop(act: Arc<Activator>, fd: OwnedFd) {
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
