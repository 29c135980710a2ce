//! Reaching a target's backend: from the host, or for a sandbox inside its network
//! namespace (a thread that lives there makes the sockets) and its root.
// System calls only through bulkhead-sys (clippy.toml's list, issue 27).
#![deny(clippy::disallowed_methods)]

use super::proxy::Conn;
use bulkhead_plan::socket::{Endpoint, SocketSpec};
use bulkhead_sys::inroot;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use tokio::net::{TcpSocket, UnixStream};

/// Connects to the target's backend, from the host or from inside the sandbox's network.
pub enum Dialer {
    Host,
    /// A sandbox: TCP sockets are made in its network namespace, unix paths are looked up
    /// in its root (a handle on it, held from the moment it was the sandbox's).
    Sandbox {
        root: OwnedFd,
        netns: Option<NetnsThread>,
    },
}

type SocketRequest = (
    libc::c_int,
    libc::c_int,
    std::sync::mpsc::Sender<io::Result<OwnedFd>>,
);

/// A thread that lives in another network namespace and makes sockets there (a socket
/// belongs to the namespace it was created in, whoever connects it later).
pub struct NetnsThread {
    tx: std::sync::mpsc::Sender<SocketRequest>,
}

impl NetnsThread {
    pub fn new(ns: OwnedFd) -> io::Result<NetnsThread> {
        let (tx, rx) = std::sync::mpsc::channel::<SocketRequest>();
        let (ok_tx, ok_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("bulkhead-netns".into())
            .spawn(move || {
                if let Err(e) = bulkhead_sys::net::enter_netns(ns.as_fd()) {
                    let _ = ok_tx.send(Err(e));
                    return;
                }
                let _ = ok_tx.send(Ok(()));
                drop(ns);
                for (domain, ty, reply) in rx {
                    let _ = reply.send(bulkhead_sys::net::socket_nonblocking(domain, ty));
                }
            })?;
        ok_rx
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("netns thread died")))?;
        Ok(NetnsThread { tx })
    }
    fn socket(&self, domain: libc::c_int, ty: libc::c_int) -> io::Result<OwnedFd> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tx
            .send((domain, ty, tx))
            .map_err(|_| io::Error::other("netns thread gone"))?;
        rx.recv()
            .unwrap_or_else(|_| Err(io::Error::other("netns thread gone")))
    }
}

impl Dialer {
    pub async fn dial(&self, ep: &Endpoint) -> io::Result<Conn> {
        match (self, ep) {
            (Dialer::Host, Endpoint::Tcp(a))
            | (Dialer::Sandbox { netns: None, .. }, Endpoint::Tcp(a)) => {
                let s = if a.is_ipv4() {
                    TcpSocket::new_v4()?
                } else {
                    TcpSocket::new_v6()?
                };
                let c = s.connect(*a).await?;
                c.set_nodelay(true)?;
                Ok(Conn::Tcp(c))
            }
            (Dialer::Sandbox { netns: Some(t), .. }, Endpoint::Tcp(a)) => {
                let domain = if a.is_ipv4() {
                    libc::AF_INET
                } else {
                    libc::AF_INET6
                };
                let fd = t.socket(domain, libc::SOCK_STREAM)?;
                let s = TcpSocket::from_std_stream(std::net::TcpStream::from(fd));
                let c = s.connect(*a).await?;
                c.set_nodelay(true)?;
                Ok(Conn::Tcp(c))
            }
            (Dialer::Host, Endpoint::Unix(p)) => Ok(Conn::Unix(UnixStream::connect(p).await?)),
            (Dialer::Sandbox { root, .. }, Endpoint::Unix(p)) => {
                // Resolved as the sandbox sees it: its symlinks cannot name a host path.
                let sock = inroot::open_in_root(root.as_fd(), p)?;
                if !inroot::is_socket(sock.as_fd())? {
                    return Err(io::Error::from_raw_os_error(libc::ECONNREFUSED));
                }
                let path = inroot::fd_path(sock.as_fd());
                Ok(Conn::Unix(UnixStream::connect(path).await?))
            }
            (_, Endpoint::Udp(_)) => Err(io::Error::other("a UDP backend is not a stream")),
        }
    }

    /// A UDP socket connected to the backend.
    pub fn udp(&self, a: std::net::SocketAddr) -> io::Result<tokio::net::UdpSocket> {
        let domain = if a.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        let fd = match self {
            Dialer::Sandbox { netns: Some(t), .. } => t.socket(domain, libc::SOCK_DGRAM)?,
            _ => bulkhead_sys::net::socket_nonblocking(domain, libc::SOCK_DGRAM)?,
        };
        let s = std::net::UdpSocket::from(fd);
        s.connect(a)?;
        tokio::net::UdpSocket::from_std(s)
    }
}

/// The sandbox's PID 1: the child of the `bulkhead spawn` process.
pub fn sandbox_init(spawn_pid: u32) -> Option<u32> {
    bulkhead_sys::process::first_child(spawn_pid)
}

/// The dialer for a running target.
pub fn dialer_for(spec: &SocketSpec, pid: u32) -> io::Result<Option<Dialer>> {
    if spec.target.rootfs.is_none() {
        return Ok(Some(Dialer::Host));
    }
    let Some(init) = sandbox_init(pid) else {
        return Ok(None);
    };
    let root = inroot::open_root(Path::new(&format!("/proc/{init}/root")))?;
    // Until the sandbox has pivoted into its own root, /proc/PID/root is the host's.
    if inroot::same_file(root.as_fd(), inroot::open_root(Path::new("/"))?.as_fd())? {
        return Ok(None);
    }
    let netns = if spec.target.network.as_deref() == Some("host") {
        None
    } else {
        Some(NetnsThread::new(bulkhead_sys::process::open_netns(init)?)?)
    };
    Ok(Some(Dialer::Sandbox { root, netns }))
}
