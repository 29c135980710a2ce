//! Copying a connection's bytes both ways with splice(2): socket -> pipe -> socket, so the
//! data never enters user space. Half-close is honoured (EOF one way shuts down the writing
//! side of the other socket, the other way goes on), and a connection with no traffic either
//! way for `idle` is closed.
// System calls only through bulkhead-sys (clippy.toml's list, issue 27).
#![deny(clippy::disallowed_methods)]

use bulkhead_sys::net::{self, splice};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
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
    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Conn::Tcp(s) => s.as_fd(),
            Conn::Unix(s) => s.as_fd(),
        }
    }
    /// Write all of `buf` (a PROXY protocol header).
    pub async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            self.ready(Interest::WRITABLE).await?;
            match self.try_io(Interest::WRITABLE, || net::send_nosignal(self.fd(), buf)) {
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    /// Peek at what has arrived, without consuming it, once more than `have` bytes are
    /// there (0 at EOF). While no more came, the readiness is cleared, so the task sleeps
    /// until the kernel reports new data: no polling.
    pub async fn peek_more(&self, buf: &mut [u8], have: usize) -> io::Result<usize> {
        loop {
            self.ready(Interest::READABLE).await?;
            match self.try_io(Interest::READABLE, || {
                let n = net::peek(self.fd(), &mut *buf)?;
                if n > 0 && n <= have {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
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
        let got = net::recv_nowait(self.fd(), &mut buf[..])?;
        if got != n {
            return Err(io::Error::other("short read while consuming a header"));
        }
        Ok(())
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
        let (r, w) = net::splice_pipe(size)?;
        Ok(Pipe { r, w })
    }
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
    let (pr, pw) = (pipe.r.as_fd(), pipe.w.as_fd());
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
    let _ = net::shutdown_write(dst.fd());
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
