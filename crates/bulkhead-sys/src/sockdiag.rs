//! Who holds a TCP socket of this network namespace, as the kernel says (NETLINK_SOCK_DIAG,
//! inet_diag, as `ss` asks it): the owner UID of the local end of a connection (one exact
//! lookup by its four addresses, a hash lookup in the kernel), the listening sockets of a port
//! (a dump of the listening table only), and whether a process holds a socket inode.

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::Duration;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HDR: usize = 16;
/// `struct inet_diag_msg` without attributes.
const DIAG_MSG: usize = 72;
const TCP_LISTEN: u8 = 10;
/// The most listening sockets a dump returns, whatever the kernel sends.
const MAX_LISTENERS: usize = 4096;

/// One TCP socket as the kernel's table has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The TCP state (1 established, 10 listen...).
    pub state: u8,
    /// The UID that made the socket.
    pub uid: u32,
    /// The socket's inode (`socket:[INODE]` in /proc/PID/fd); 0 before it is accepted.
    pub inode: u32,
}

/// The UID that owns the local socket at the other end of an accepted connection:
/// `peer` is the connection's remote address, `me` its local one. None when the peer is not
/// a socket of this network namespace (a remote host, a container with its own network).
pub fn local_peer_uid(peer: SocketAddr, me: SocketAddr) -> io::Result<Option<u32>> {
    let (peer, me) = (unmap(peer), unmap(me));
    if peer.is_ipv4() != me.is_ipv4() {
        return Ok(None);
    }
    let found = exact(peer, me)?;
    // The kernel's lookup falls back to a listener: only the very connection counts.
    Ok(found
        .filter(|s| s.state != TCP_LISTEN && s.local == peer && s.remote == me)
        .map(|s| s.uid))
}

/// The sockets listening on TCP `port`, IPv4 and IPv6.
pub fn listeners(port: u16) -> io::Result<Vec<TcpSocket>> {
    let mut out = Vec::new();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        let req = request(family, 1 << TCP_LISTEN, None);
        let fd = open()?;
        send(&fd, &req, NLM_F_REQUEST | NLM_F_DUMP)?;
        collect(&fd, true, &mut |s| {
            if s.local.port() == port && out.len() < MAX_LISTENERS {
                out.push(s);
            }
        })?;
    }
    Ok(out)
}

/// Whether process `pid` has the socket `inode` open (its /proc/PID/fd links).
pub fn holds(pid: i32, inode: u32) -> bool {
    let want = format!("socket:[{inode}]");
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    rd.flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
}

/// An IPv4 address written as IPv6 (`::ffff:a.b.c.d`) as the IPv4 address it is.
fn unmap(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

fn open() -> io::Result<OwnedFd> {
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    // The kernel answers within sendto; a lost answer must not hang the caller.
    rustix::net::sockopt::set_socket_timeout(
        &fd,
        rustix::net::sockopt::Timeout::Recv,
        Some(Duration::from_secs(1)),
    )?;
    Ok(fd)
}

fn send(fd: &OwnedFd, body: &[u8], flags: u16) -> io::Result<()> {
    let mut msg = Vec::with_capacity(NLMSG_HDR + body.len());
    msg.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(body);
    rustix::net::sendto(
        fd,
        &msg,
        rustix::net::SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    Ok(())
}

/// `struct inet_diag_req_v2` for TCP: a dump of `states`, or one socket by its addresses
/// (`Some((local, remote))`).
fn request(family: u8, states: u32, one: Option<(SocketAddr, SocketAddr)>) -> Vec<u8> {
    let mut r = vec![family, libc::IPPROTO_TCP as u8, 0, 0];
    r.extend_from_slice(&states.to_ne_bytes());
    let (local, remote) = match one {
        Some((l, rm)) => (l, rm),
        None => {
            let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
            (any, any)
        }
    };
    r.extend_from_slice(&local.port().to_be_bytes());
    r.extend_from_slice(&remote.port().to_be_bytes());
    r.extend_from_slice(&addr_bytes(local.ip()));
    r.extend_from_slice(&addr_bytes(remote.ip()));
    r.extend_from_slice(&0u32.to_ne_bytes());
    // INET_DIAG_NOCOOKIE: any socket with these addresses.
    r.extend_from_slice(&[0xff; 8]);
    r
}

/// An address as inet_diag's four 32-bit words, network order.
fn addr_bytes(a: IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match a {
        IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
    }
    out
}

fn exact(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<TcpSocket>> {
    let family = if local.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    } as u8;
    let fd = open()?;
    send(
        &fd,
        &request(family, u32::MAX, Some((local, remote))),
        NLM_F_REQUEST,
    )?;
    let mut found = None;
    match collect(&fd, false, &mut |s| found = Some(s)) {
        Ok(()) => Ok(found),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Read the answers, calling `each` for every socket, until NLMSG_DONE (a dump) or the
/// first message (one socket).
fn collect(fd: &OwnedFd, dump: bool, each: &mut dyn FnMut(TcpSocket)) -> io::Result<()> {
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let (n, _) = rustix::net::recv(fd, &mut buf[..], rustix::net::RecvFlags::empty())?;
        if n == 0 {
            return Ok(());
        }
        let mut at = 0;
        while at + NLMSG_HDR <= n {
            let len = u32_at(&buf, at) as usize;
            let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
            if len < NLMSG_HDR || at + len > n {
                return Err(io::Error::other("malformed sock_diag answer"));
            }
            let body = &buf[at + NLMSG_HDR..at + len];
            match kind {
                NLMSG_DONE => return Ok(()),
                NLMSG_ERROR => {
                    let code = body
                        .get(..4)
                        .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                    return match code {
                        0 => Ok(()),
                        c => Err(io::Error::from_raw_os_error(-c)),
                    };
                }
                SOCK_DIAG_BY_FAMILY => {
                    if let Some(s) = parse(body) {
                        each(s);
                    }
                    if !dump {
                        return Ok(());
                    }
                }
                _ => {}
            }
            // Messages are 4-byte aligned.
            at += (len + 3) & !3;
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One `struct inet_diag_msg`.
fn parse(b: &[u8]) -> Option<TcpSocket> {
    if b.len() < DIAG_MSG {
        return None;
    }
    let ip = |at: usize| -> Option<IpAddr> {
        match b[0] as i32 {
            libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::new(
                b[at],
                b[at + 1],
                b[at + 2],
                b[at + 3],
            ))),
            libc::AF_INET6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&b[at..at + 16]);
                Some(IpAddr::V6(Ipv6Addr::from(o)))
            }
            _ => None,
        }
    };
    let sport = u16::from_be_bytes([b[4], b[5]]);
    let dport = u16::from_be_bytes([b[6], b[7]]);
    Some(TcpSocket {
        local: unmap(SocketAddr::new(ip(8)?, sport)),
        remote: unmap(SocketAddr::new(ip(24)?, dport)),
        state: b[1],
        uid: u32_at(b, 64),
        inode: u32_at(b, 68),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_local_peer_has_its_uid_and_a_remote_one_none() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        let uid = std::fs::metadata("/proc/self").unwrap().uid();
        assert_eq!(
            local_peer_uid(peer, s.local_addr().unwrap()).unwrap(),
            Some(uid)
        );
        // No socket of this host has this remote end.
        let nobody: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        assert_eq!(
            local_peer_uid(nobody, s.local_addr().unwrap()).unwrap(),
            None
        );
        drop(c);
    }

    #[test]
    fn listeners_of_a_port_and_who_holds_them() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let found = listeners(port).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].local, l.local_addr().unwrap());
        assert!(found[0].inode > 0);
        assert!(holds(std::process::id() as i32, found[0].inode));
        assert!(!holds(1, found[0].inode));
    }

    #[test]
    fn garbage_answers_do_not_panic() {
        for n in 0..80 {
            let _ = parse(&vec![0xa5; n]);
        }
    }
}
