//! A pseudo-terminal for a command another process starts (systemd opens the terminal side
//! by its path): the controlling side, raw mode for our own terminal, window sizes, copying.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A new pseudo-terminal.
pub struct Pty {
    pub master: OwnedFd,
    /// Held open until the command has the terminal, so reads of the master do not fail.
    pub slave: OwnedFd,
    /// The terminal side's path (/dev/pts/N).
    pub path: String,
}

impl Pty {
    pub fn open() -> std::io::Result<Pty> {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
        grantpt(&master)?;
        unlockpt(&master)?;
        let name = ptsname(&master, Vec::new())?;
        let path = name.to_string_lossy().into_owned();
        let slave = rustix::fs::open(
            name.as_c_str(),
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        copy_window_size(rustix::stdio::stdin(), master.as_fd());
        Ok(Pty {
            master,
            slave,
            path,
        })
    }
}

/// Standard input switched to raw mode while it lives (when it is a terminal), so keys (Ctrl-C
/// too) reach the command's terminal as typed.
pub struct RawStdin(Option<rustix::termios::Termios>);

impl RawStdin {
    pub fn enter() -> RawStdin {
        use rustix::termios::{tcgetattr, tcsetattr, OptionalActions};
        let stdin = rustix::stdio::stdin();
        let Ok(saved) = tcgetattr(stdin) else {
            return RawStdin(None);
        };
        let mut raw = saved.clone();
        raw.make_raw();
        if tcsetattr(stdin, OptionalActions::Now, &raw).is_err() {
            return RawStdin(None);
        }
        RawStdin(Some(saved))
    }
}

impl Drop for RawStdin {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            let _ = rustix::termios::tcsetattr(
                rustix::stdio::stdin(),
                rustix::termios::OptionalActions::Now,
                t,
            );
        }
    }
}

/// Give `to` the window size of `from` (both terminals).
pub fn copy_window_size(from: BorrowedFd<'_>, to: BorrowedFd<'_>) {
    if let Ok(ws) = rustix::termios::tcgetwinsize(from) {
        let _ = rustix::termios::tcsetwinsize(to, ws);
    }
}

/// Copy from one descriptor to another until EOF or an error (EIO: the terminal closed).
pub fn copy(from: BorrowedFd<'_>, to: BorrowedFd<'_>) {
    copy_counted(from, to);
}

/// [`copy`], returning how many bytes were read from `from`.
pub fn copy_counted(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> u64 {
    let mut buf = [0u8; 8192];
    let mut total = 0u64;
    loop {
        let n = match rustix::io::read(from, &mut buf) {
            Err(rustix::io::Errno::INTR) => continue,
            Ok(0) | Err(_) => return total,
            Ok(n) => n,
        };
        total += n as u64;
        let mut off = 0;
        while off < n {
            match rustix::io::write(to, &buf[off..n]) {
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return total,
                Ok(w) => off += w,
            }
        }
    }
}

/// Make `uid`:`gid` the owner of the terminal side `fd` (the root of a user namespace, so
/// that it can reopen the terminal by its path, e.g. as /dev/console).
pub fn give_terminal(fd: std::os::fd::RawFd, uid: u32, gid: u32) -> std::io::Result<()> {
    // SAFETY: fchown with integer arguments; a bad descriptor is an error, not a fault.
    if unsafe { libc::fchown(fd, uid, gid) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
