//! Sockets: free loopback ports for the benchmarks' and the tests' servers, and the socket
//! calls of socket activation below the async runtime: send without SIGPIPE, peek and
//! consume, half-close, splice through a pipe (socket -> pipe -> socket, the data never in
//! user space), datagrams with their sender's credentials (SO_PASSCRED), non-blocking sockets
//! made in a network namespace a thread entered.

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags};
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::io;
use std::mem::MaybeUninit;
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// A free port on 127.0.0.1 below the ephemeral range (ip_local_port_range starts at
/// 32768), so that no outgoing connection takes it as its source port between this check and
/// the bind. Each call of a process tries a different place first, so parallel callers do
/// not race for one. None when 1000 tries between 20000 and 32000 found none free.
pub fn free_port() -> Option<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    (0..1000).find_map(|_| {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let port = 20000
            + (std::process::id()
                .wrapping_mul(7919)
                .wrapping_add(n.wrapping_mul(104729))
                % 12000) as u16;
        TcpListener::bind(("127.0.0.1", port))
            .is_ok()
            .then_some(port)
    })
}

/// Send `buf` on a connected socket without SIGPIPE (EPIPE instead); the bytes sent.
#[inline]
pub fn send_nosignal(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    rustix::net::send(fd, buf, SendFlags::NOSIGNAL).map_err(Into::into)
}

/// What has arrived, copied into `buf` and left in the socket; 0 at EOF.
#[inline]
pub fn peek(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let (n, _) = rustix::net::recv(fd, buf, RecvFlags::PEEK)?;
    Ok(n)
}

/// Read what has arrived into `buf` without waiting (EWOULDBLOCK when nothing has).
#[inline]
pub fn recv_nowait(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let (n, _) = rustix::net::recv(fd, buf, RecvFlags::DONTWAIT)?;
    Ok(n)
}

/// Shut down the sending side of a connection (the other direction goes on).
#[inline]
pub fn shutdown_write(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::net::shutdown(fd, rustix::net::Shutdown::Write).map_err(Into::into)
}

/// A non-blocking, close-on-exec pipe for splice: (read, write). With `size`, its buffer is
/// set to that many bytes where the kernel allows (it caps it at
/// /proc/sys/fs/pipe-max-size for non-root): best effort.
pub fn splice_pipe(size: Option<u64>) -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    if let Some(s) = size {
        let _ = rustix::pipe::fcntl_setpipe_size(&w, usize::try_from(s).unwrap_or(usize::MAX));
    }
    Ok((r, w))
}

/// Move up to `len` bytes from `from` to `to` (one of them a pipe) without waiting.
#[inline]
pub fn splice(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    rustix::pipe::splice(from, None, to, None, len, flags).map_err(Into::into)
}

/// Have the kernel attach each sender's credentials to the datagrams of a unix socket.
pub fn set_passcred(fd: impl AsFd) -> io::Result<()> {
    rustix::net::sockopt::set_socket_passcred(fd, true).map_err(Into::into)
}

/// A datagram's sender, as the kernel says (the PID in the receiver's PID namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials {
    pub pid: u32,
    pub uid: u32,
}

/// The next datagram into `buf`, without waiting: its length and its sender's credentials
/// (None unless SO_PASSCRED is on). Descriptors passed with it are closed.
#[inline]
pub fn recv_with_credentials(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Option<Credentials>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        fd,
        &mut [io::IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut sender = None;
    for m in control.drain() {
        // Anything else (descriptors someone passed) is dropped, and so closed, here.
        if let RecvAncillaryMessage::ScmCredentials(c) = m {
            sender = Some(Credentials {
                pid: c.pid.as_raw_nonzero().get().unsigned_abs(),
                uid: c.uid.as_raw(),
            });
        }
    }
    Ok((got.bytes, sender))
}

/// A non-blocking, close-on-exec socket of the calling thread's network namespace
/// (`domain`, `ty`: AF_* and SOCK_* as the socket(2) call takes them).
#[inline]
pub fn socket_nonblocking(domain: libc::c_int, ty: libc::c_int) -> io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let domain =
        u16::try_from(domain).map_err(|_| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))?;
    let ty = u32::try_from(ty).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    rustix::net::socket_with(
        AddressFamily::from_raw(domain),
        SocketType::from_raw(ty),
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(Into::into)
}

/// Whether the socket open as `fd` is a unix socket (SO_DOMAIN).
pub fn is_unix(fd: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(rustix::net::sockopt::socket_domain(fd)? == rustix::net::AddressFamily::UNIX)
}

/// Make a socket's reads and writes wait again (FIONBIO off): for a program that uses plain
/// blocking calls on it.
#[inline]
pub fn set_blocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::io::ioctl_fionbio(fd, false).map_err(Into::into)
}

/// Move the calling thread into the network namespace open as `ns` (setns(CLONE_NEWNET)):
/// the sockets it makes afterwards belong to that namespace.
pub fn enter_netns(ns: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    move_into_link_name_space(ns, Some(LinkNameSpaceType::Network)).map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixDatagram, UnixStream};

    #[test]
    fn peek_leaves_the_bytes_and_recv_takes_them() {
        let (a, b) = UnixStream::pair().unwrap();
        assert_eq!(send_nosignal(a.as_fd(), b"hello").unwrap(), 5);
        let mut buf = [0u8; 16];
        assert_eq!(peek(b.as_fd(), &mut buf).unwrap(), 5);
        assert_eq!(recv_nowait(b.as_fd(), &mut buf[..3]).unwrap(), 3);
        assert_eq!(&buf[..3], b"hel");
        assert_eq!(peek(b.as_fd(), &mut buf).unwrap(), 2);
        shutdown_write(a.as_fd()).unwrap();
        assert_eq!(recv_nowait(b.as_fd(), &mut buf).unwrap(), 2);
        assert_eq!(
            recv_nowait(b.as_fd(), &mut buf).unwrap(),
            0,
            "EOF after the half-close"
        );
    }

    #[test]
    fn a_datagram_comes_with_its_senders_credentials() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let mut buf = [0u8; 8];
        a.send(b"x").unwrap();
        assert_eq!(
            recv_with_credentials(b.as_fd(), &mut buf).unwrap(),
            (1, None)
        );
        set_passcred(&b).unwrap();
        a.send(b"READY=1").unwrap();
        let (n, who) = recv_with_credentials(b.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let who = who.expect("credentials with SO_PASSCRED");
        assert_eq!(who.pid, std::process::id());
        assert_eq!(who.uid, rustix::process::getuid().as_raw());
    }

    #[test]
    fn splice_moves_bytes_through_the_pipe() {
        let (a, b) = UnixStream::pair().unwrap();
        let (c, d) = UnixStream::pair().unwrap();
        let (r, w) = splice_pipe(Some(1 << 16)).unwrap();
        send_nosignal(a.as_fd(), b"bytes").unwrap();
        assert_eq!(splice(b.as_fd(), w.as_fd(), 64).unwrap(), 5);
        assert_eq!(splice(r.as_fd(), c.as_fd(), 64).unwrap(), 5);
        let mut buf = [0u8; 8];
        assert_eq!(recv_nowait(d.as_fd(), &mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"bytes");
        let e = splice(b.as_fd(), w.as_fd(), 64).unwrap_err();
        assert_eq!(
            e.kind(),
            io::ErrorKind::WouldBlock,
            "nothing waiting: no wait"
        );
    }

    #[test]
    fn a_unix_socket_is_told_from_tcp_and_made_blocking() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert!(is_unix(a.as_fd()).unwrap());
        let s = socket_nonblocking(libc::AF_INET, libc::SOCK_STREAM).unwrap();
        assert!(!is_unix(s.as_fd()).unwrap());
        set_blocking(s.as_fd()).unwrap();
        let fl = rustix::fs::fcntl_getfl(&s).unwrap();
        assert!(!fl.contains(rustix::fs::OFlags::NONBLOCK));
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(is_unix(file.as_fd()).is_err(), "not a socket");
    }

    #[test]
    fn sockets_are_non_blocking_and_close_on_exec() {
        let s = socket_nonblocking(libc::AF_INET, libc::SOCK_STREAM).unwrap();
        let fl = rustix::fs::fcntl_getfl(&s).unwrap();
        assert!(fl.contains(rustix::fs::OFlags::NONBLOCK));
        let fd = rustix::io::fcntl_getfd(&s).unwrap();
        assert!(fd.contains(rustix::io::FdFlags::CLOEXEC));
        assert!(socket_nonblocking(-1, libc::SOCK_STREAM).is_err());
    }

    #[test]
    fn ports_are_free_below_the_ephemeral_range_and_differ() {
        let a = super::free_port().unwrap();
        let b = super::free_port().unwrap();
        assert!((20000..32000).contains(&a) && (20000..32000).contains(&b));
        assert_ne!(a, b);
        std::net::TcpListener::bind(("127.0.0.1", a)).unwrap();
    }
}
