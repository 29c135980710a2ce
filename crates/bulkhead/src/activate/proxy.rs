//! Copying a connection's bytes both ways with splice(2): socket -> pipe -> socket, so the
//! data never enters user space. Half-close is honoured (EOF one way shuts down the writing
//! side of the other socket, the other way goes on), and a connection with no traffic either
//! way for `idle` is closed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// A connected stream socket, TCP or unix.
pub enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    pub async fn ready(&self, i: Interest) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.ready(i).await.map(|_| ()),
            Conn::Unix(s) => s.ready(i).await.map(|_| ()),
        }
    }
    pub fn try_io<R>(&self, i: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            Conn::Tcp(s) => s.try_io(i, f),
            Conn::Unix(s) => s.try_io(i, f),
        }
    }
    pub fn fd(&self) -> RawFd {
        match self {
            Conn::Tcp(s) => s.as_raw_fd(),
            Conn::Unix(s) => s.as_raw_fd(),
        }
    }
    /// Write all of `buf` (a PROXY protocol header).
    pub async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            self.ready(Interest::WRITABLE).await?;
            match self.try_io(Interest::WRITABLE, || {
                cvt(unsafe {
                    libc::send(
                        self.fd(),
                        buf.as_ptr().cast(),
                        buf.len(),
                        libc::MSG_NOSIGNAL,
                    )
                })
            }) {
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    /// Peek at what has arrived, without consuming it.
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.ready(Interest::READABLE).await?;
            match self.try_io(Interest::READABLE, || {
                cvt(unsafe {
                    libc::recv(
                        self.fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_PEEK,
                    )
                })
            }) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
    /// Consume exactly `n` bytes that `peek` has shown are there.
    pub fn consume(&self, n: usize) -> io::Result<()> {
        let mut buf = vec![0u8; n];
        let got =
            cvt(unsafe { libc::recv(self.fd(), buf.as_mut_ptr().cast(), n, libc::MSG_DONTWAIT) })?;
        if got != n {
            return Err(io::Error::other("short read while consuming a header"));
        }
        Ok(())
    }
}

fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Bytes moved, for the socket's counters.
#[derive(Default)]
pub struct Counters {
    /// Client -> target.
    pub bytes_in: AtomicU64,
    /// Target -> client.
    pub bytes_out: AtomicU64,
}

/// One direction's pipe.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl Pipe {
    fn new(size: Option<u64>) -> io::Result<Pipe> {
        let mut fds = [0; 2];
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 just returned these two fds.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        if let Some(s) = size {
            // Best effort: the kernel caps it at /proc/sys/fs/pipe-max-size for non-root.
            unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, s as libc::c_int) };
        }
        Ok(Pipe { r, w })
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    cvt(unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    })
}

/// Time since `base`, in microseconds, for the shared "last traffic" stamp.
fn stamp(base: Instant) -> u64 {
    base.elapsed().as_micros() as u64
}

/// Copy `src` -> `dst` until EOF on `src`, then shut down `dst` for writing.
async fn pump(
    src: &Conn,
    dst: &Conn,
    size: Option<u64>,
    count: &AtomicU64,
    last: &AtomicU64,
    base: Instant,
) -> io::Result<()> {
    let pipe = Pipe::new(size)?;
    let chunk = size.unwrap_or(1 << 16).max(1 << 16) as usize;
    let (pr, pw) = (pipe.r.as_raw_fd(), pipe.w.as_raw_fd());
    loop {
        // Fill the pipe from the source.
        src.ready(Interest::READABLE).await?;
        let n = match src.try_io(Interest::READABLE, || splice(src.fd(), pw, chunk)) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        last.store(stamp(base), Ordering::Relaxed);
        // Drain it into the destination.
        let mut left = n;
        while left > 0 {
            match dst.try_io(Interest::WRITABLE, || splice(pr, dst.fd(), left)) {
                Ok(m) => {
                    left -= m;
                    count.fetch_add(m as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    dst.ready(Interest::WRITABLE).await?;
                }
                Err(e) => return Err(e),
            }
        }
        last.store(stamp(base), Ordering::Relaxed);
    }
    // Half-close: the other direction goes on.
    unsafe { libc::shutdown(dst.fd(), libc::SHUT_WR) };
    Ok(())
}

/// Proxy `client` <-> `backend` until both directions reached EOF, one failed, or nothing
/// moved for `idle`.
pub async fn proxy(
    client: Conn,
    backend: Conn,
    pipe_size: Option<u64>,
    idle: Option<Duration>,
    counters: &Counters,
) -> io::Result<()> {
    let base = Instant::now();
    let last = AtomicU64::new(0);
    let both = async {
        let up = pump(
            &client,
            &backend,
            pipe_size,
            &counters.bytes_in,
            &last,
            base,
        );
        let down = pump(
            &backend,
            &client,
            pipe_size,
            &counters.bytes_out,
            &last,
            base,
        );
        // One direction failing (a reset) ends the connection; an EOF leaves the other going.
        tokio::try_join!(up, down).map(|_| ())
    };
    let watch = async {
        let Some(idle) = idle else {
            return std::future::pending::<()>().await;
        };
        loop {
            let quiet = Duration::from_micros(stamp(base) - last.load(Ordering::Relaxed));
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    };
    tokio::select! {
        r = both => r,
        _ = watch => Err(io::Error::new(io::ErrorKind::TimedOut, "no traffic for connection_idle_timeout")),
    }
}
