//! /dev/console for a command that is the sandbox's PID 1 (`--as-pid1`): an init such as
//! systemd reopens /dev/console and writes its messages there, never to the stderr it was
//! given; with no /dev/console it writes them to /dev/null and the user sees nothing. As
//! systemd-nspawn does, the console is the terminal side of a pseudo-terminal bound over a
//! file on the sandbox's /dev: the `--pty` one, else one of its own whose output bulkhead
//! copies to its stderr. Never the caller's terminal itself, which an init would reset and
//! could type into.

use bulkhead_sys::error::{Error, Result};
use bulkhead_sys::launch::{HostRef, Op, Target};
use bulkhead_sys::pty::{self, Pty};
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::thread::JoinHandle;

/// A console of its own: the terminal side (bound into the sandbox, held here until the
/// sandbox has exited) and the copy of its output to bulkhead's stderr.
pub struct Console {
    slave: OwnedFd,
    output: JoinHandle<u64>,
}

impl Console {
    pub fn start() -> Result<Console> {
        let Pty { master, slave, .. } = Pty::open().map_err(|e| {
            Error::failed(format!(
                "cannot open a pseudo-terminal for /dev/console: {e}"
            ))
        })?;
        let to_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let output = std::thread::spawn(move || {
            if to_terminal {
                pty::copy_counted(master.as_fd(), bulkhead_sys::fd::stderr())
            } else {
                copy_lines(master.as_fd())
            }
        });
        Ok(Console { slave, output })
    }

    pub fn terminal(&self) -> RawFd {
        self.slave.as_raw_fd()
    }

    /// After the sandbox has exited: copy what was written last; how many bytes the
    /// console carried.
    pub fn finish(self) -> u64 {
        let Console { slave, output } = self;
        // Closing the last terminal side makes the master read EIO once drained.
        drop(slave);
        output.join().unwrap_or(0)
    }
}

/// The operations that make `/dev/console` in the sandbox's /dev (a tmpfs bulkhead mounted,
/// so the path is its own): an empty file, with the terminal `fd` bound over it.
pub fn ops(root: &[u8], fd: RawFd) -> Result<Vec<Op>> {
    let mut path = root.to_vec();
    path.extend_from_slice(b"/dev/console");
    let path = CString::new(path).map_err(|_| Error::failed("a root path with a NUL byte"))?;
    Ok(vec![
        Op::Mknod {
            path: path.clone(),
            mode: libc::S_IFREG | 0o600,
            dev: 0,
        },
        Op::BindTree {
            // The caller keeps `fd` open until the sandbox has exited.
            src: HostRef {
                fd,
                shown: c"the console's pseudo-terminal".to_owned(),
            },
            target: Target::Abs(path),
            read_only: false,
            noatime: false,
            nodev: false,
        },
    ])
}

/// The console's output to a stderr that is no terminal (a pipe, a log file): without the
/// carriage returns the terminal puts before each newline. How many bytes were read.
fn copy_lines(from: BorrowedFd<'_>) -> u64 {
    let mut buf = [0u8; 8192];
    let mut total = 0u64;
    let mut err = std::io::stderr();
    loop {
        let n = match bulkhead_sys::fd::read_once(from, &mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Ok(0) | Err(_) => return total,
            Ok(n) => n,
        };
        total += n as u64;
        let text = without_carriage_returns(&buf[..n]);
        if err.write_all(&text).is_err() {
            return total;
        }
    }
}

fn without_carriage_returns(b: &[u8]) -> Vec<u8> {
    b.iter().copied().filter(|&c| c != b'\r').collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn carriage_returns_are_dropped() {
        assert_eq!(
            super::without_carriage_returns(b"Failed\r\r\nExiting\r\n"),
            b"Failed\nExiting\n"
        );
    }
}
