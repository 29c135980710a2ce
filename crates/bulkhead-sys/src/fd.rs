//! File descriptors passed along by number.

use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};

/// Borrow a descriptor that stays open for as long as the process needs it: standard input,
/// output or error, or one the caller holds open itself (a pty it made).
///
/// Returns None for a descriptor that is not open now.
pub fn borrow_held(fd: i32) -> Option<BorrowedFd<'static>> {
    match fd {
        0 => Some(rustix::stdio::stdin()),
        1 => Some(rustix::stdio::stdout()),
        2 => Some(rustix::stdio::stderr()),
        _ if is_open(fd) => {
            // SAFETY: the caller keeps `fd` open while the borrow is used (see the doc); it is
            // open now (F_GETFD succeeded).
            Some(unsafe { BorrowedFd::borrow_raw(fd) })
        }
        _ => None,
    }
}

/// Take ownership of a socket this process inherited as descriptor `raw` and was told of on
/// its command line (`--listen-fd N`): an open socket numbered 3 or above. Call once per
/// descriptor, before the process opens anything of its own.
pub fn adopt_socket(raw: i32) -> std::io::Result<OwnedFd> {
    let invalid = |why: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("descriptor {raw} {why}"),
        )
    };
    if raw < 3 {
        return Err(invalid(
            "is standard input, output or error, not a passed socket",
        ));
    }
    let Some(fd) = borrow_held(raw) else {
        return Err(invalid("is not open in this process"));
    };
    let st = rustix::fs::fstat(fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(invalid("is not a socket"));
    }
    // SAFETY: `raw` is open (checked above) and was passed to this process for it to own
    // (the caller's contract, above): nothing else in the process holds it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Standard input.
pub fn stdin() -> BorrowedFd<'static> {
    rustix::stdio::stdin()
}

/// Standard output.
pub fn stdout() -> BorrowedFd<'static> {
    rustix::stdio::stdout()
}

/// Standard error.
pub fn stderr() -> BorrowedFd<'static> {
    rustix::stdio::stderr()
}

/// Whether `fd` is an open descriptor of this process.
pub fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only asks the kernel about the descriptor number; nothing is read or
    // written through it.
    fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0
}

/// One read(2): the bytes read (0: the end). EINTR and EAGAIN come back as errors of kind
/// `Interrupted` and `WouldBlock`.
pub fn read_once(fd: impl AsFd, buf: &mut [u8]) -> std::io::Result<usize> {
    rustix::io::read(fd, buf).map_err(Into::into)
}

/// One write(2) (EAGAIN on a full non-blocking pipe: `WouldBlock`).
pub fn write_once(fd: impl AsFd, buf: &[u8]) -> std::io::Result<usize> {
    rustix::io::write(fd, buf).map_err(Into::into)
}

/// Make reads and writes of `fd` return `WouldBlock` instead of waiting (O_NONBLOCK).
pub fn set_nonblocking(fd: impl AsFd) -> std::io::Result<()> {
    rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK).map_err(Into::into)
}

/// A pipe whose ends close on exec: (read, write).
pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(Into::into)
}

/// Whether any of the descriptors is readable now (poll with no wait).
pub fn any_readable(fds: &[BorrowedFd<'_>]) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut p: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut p, Some(&zero)).is_ok_and(|n| n > 0)
}

/// Register an owned descriptor with the tokio reactor for readiness (readable).
pub fn async_readable(fd: OwnedFd) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of `fd`, so the descriptor stays open and refers
    // to the same file for the AsyncFd's whole life, as register_with_interest requires.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// A duplicate of `fd` numbered at or above `min`, closed on exec.
pub fn dup_above(fd: impl AsFd, min: i32) -> std::io::Result<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(fd, min).map_err(Into::into)
}

/// Allocate `size` bytes of disk for the file open as `fd` (fallocate(2) mode 0: the file
/// grows to `size`, its blocks reserved).
pub fn allocate(fd: impl AsFd, size: u64) -> std::io::Result<()> {
    rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), 0, size).map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, IntoRawFd};

    #[test]
    fn only_an_open_socket_is_adopted() {
        assert!(super::adopt_socket(0).is_err());
        assert!(super::adopt_socket(-1).is_err());
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let e = super::adopt_socket(file.as_raw_fd()).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let raw = l.into_raw_fd();
        let back = std::net::TcpListener::from(super::adopt_socket(raw).unwrap());
        assert_eq!(back.local_addr().unwrap(), addr);
        drop(back);
        assert!(super::adopt_socket(i32::MAX).is_err());
    }

    #[test]
    fn allocate_grows_the_file_to_its_size() {
        let p = std::env::temp_dir().join(format!("bh-allocate-{}", std::process::id()));
        let f = std::fs::File::create(&p).unwrap();
        let r = super::allocate(&f, 1 << 20);
        let len = f.metadata().unwrap().len();
        let _ = std::fs::remove_file(&p);
        match r {
            Ok(()) => assert_eq!(len, 1 << 20),
            // tmpfs and ext4 have fallocate; a file system without it says so.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}"),
        }
    }
}
