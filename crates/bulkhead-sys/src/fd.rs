//! File descriptors passed along by number.

use std::os::fd::{BorrowedFd, OwnedFd};

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

/// Standard input.
pub fn stdin() -> BorrowedFd<'static> {
    rustix::stdio::stdin()
}

/// Standard output.
pub fn stdout() -> BorrowedFd<'static> {
    rustix::stdio::stdout()
}

/// Whether `fd` is an open descriptor of this process.
pub fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only asks the kernel about the descriptor number; nothing is read or
    // written through it.
    fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0
}

/// A pipe whose ends close on exec: (read, write).
pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(Into::into)
}
