//! UDP proxy: one flow per client address (address and port), each with its own connected
//! socket towards the backend; datagrams that arrive while the target starts are queued, not
//! dropped. The flow table is bounded ([`Flows`]: max_connections flows, and
//! max_connections_per_source per client), and so are the bytes queued in all flows.

use super::flows::Flows;
use super::target::Activator;
use bulkhead_plan::socket::Endpoint;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// Datagrams waiting in one flow's queue.
const FLOW_QUEUE: usize = 256;
/// Bytes waiting in all of a socket's flow queues; a datagram beyond is dropped (as a full
/// socket buffer would).
const QUEUED_BYTES: usize = 16 << 20;

/// A queued datagram; its bytes count against [`QUEUED_BYTES`] until it is sent or dropped.
struct Datagram {
    data: Vec<u8>,
    budget: Arc<AtomicUsize>,
}

impl Drop for Datagram {
    fn drop(&mut self) {
        self.budget.fetch_sub(self.data.len(), Relaxed);
    }
}

/// What the table keeps of a flow.
struct Handle {
    tx: mpsc::Sender<Datagram>,
    task: AbortHandle,
}

type Table = Arc<Mutex<Flows<Handle>>>;

pub async fn udp_loop(act: Arc<Activator>, fd: OwnedFd) {
    let sock = match tokio::net::UdpSocket::from_std(std::net::UdpSocket::from(fd)) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            act.log
                .line(&format!("[{}] cannot watch the socket: {e}", act.spec.name));
            return;
        }
    };
    let table: Table = Arc::new(Mutex::new(Flows::new(
        act.spec.max_connections,
        act.spec.max_connections_per_source,
    )));
    let budget = Arc::new(AtomicUsize::new(0));
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, peer) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(_) => continue,
        };
        if budget.fetch_add(n, Relaxed) + n > QUEUED_BYTES {
            budget.fetch_sub(n, Relaxed);
            dropped(&act);
            continue;
        }
        let d = Datagram {
            data: buf[..n].to_vec(),
            budget: budget.clone(),
        };
        let existing = table.lock().unwrap().get(&peer).map(|h| h.tx.clone());
        let d = match existing {
            Some(tx) => match tx.try_send(d) {
                Ok(()) => continue,
                // A full queue drops the datagram.
                Err(mpsc::error::TrySendError::Full(_)) => {
                    dropped(&act);
                    continue;
                }
                // The flow just ended: a new one takes the datagram.
                Err(mpsc::error::TrySendError::Closed(d)) => d,
            },
            None => d,
        };
        new_flow(&act, &sock, &table, peer, d);
    }
}

fn dropped(act: &Activator) {
    act.hit(&act.hits.udp_dropped, || {
        format!("dropped a datagram: the flow queues are full ({FLOW_QUEUE} datagrams per flow, {} MiB in all)", QUEUED_BYTES >> 20)
    });
}

/// Start a flow for `peer` with its first datagram, pushing out another if the table says so.
fn new_flow(
    act: &Arc<Activator>,
    sock: &Arc<tokio::net::UdpSocket>,
    table: &Table,
    peer: SocketAddr,
    first: Datagram,
) {
    let (tx, rx) = mpsc::channel(FLOW_QUEUE);
    let _ = tx.try_send(first);
    let (id_tx, id_rx) = tokio::sync::oneshot::channel::<u64>();
    let task = {
        let (act, sock, table) = (act.clone(), sock.clone(), table.clone());
        tokio::spawn(async move {
            udp_flow(&act, &sock, peer, rx).await;
            if let Ok(id) = id_rx.await {
                table.lock().unwrap().remove(&peer, id);
            }
        })
    };
    let handle = Handle {
        tx,
        task: task.abort_handle(),
    };
    let (id, evicted) = table.lock().unwrap().insert(peer, handle);
    let _ = id_tx.send(id);
    for h in evicted {
        h.task.abort();
        act.hit(&act.hits.udp_flows_evicted, || {
            format!(
                "dropped the least recently used UDP flow for one from {peer} (max_connections {}, max_connections_per_source {})",
                act.spec.max_connections, act.spec.max_connections_per_source
            )
        });
    }
}

async fn udp_flow(
    act: &Arc<Activator>,
    sock: &tokio::net::UdpSocket,
    peer: SocketAddr,
    mut rx: mpsc::Receiver<Datagram>,
) {
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
    let mut buf = vec![0u8; 65536];
    loop {
        tokio::select! {
            d = rx.recv() => {
                let Some(d) = d else { return };
                if up.send(&d.data).await.is_ok() {
                    act.counters.bytes_in.fetch_add(d.data.len() as u64, Relaxed);
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
            // Any datagram either way starts the idle time again.
            _ = idle(act.spec.connection_idle_timeout) => return,
        }
    }
}

/// Resolves after `t` (never with None).
async fn idle(t: Option<std::time::Duration>) {
    match t {
        Some(t) => tokio::time::sleep(t).await,
        None => std::future::pending().await,
    }
}
