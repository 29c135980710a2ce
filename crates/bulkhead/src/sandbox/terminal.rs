//! `spawn --pty`: the command gets a pseudo-terminal of its own (its controlling terminal, in
//! its own session), and bulkhead relays it to the caller's terminal, which is raw meanwhile
//! so that keys (Ctrl-C too) reach the command as typed. The command never holds the caller's
//! terminal itself, so it cannot type into it (TIOCSTI) or change its settings.

use bulkhead_sys::error::{Error, Result};
use bulkhead_sys::pty::{self, Pty, RawStdin};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::thread::JoinHandle;

pub struct Relay {
    /// The terminal side: the command's, held here until it has exited.
    slave: OwnedFd,
    raw: RawStdin,
    output: JoinHandle<()>,
}

impl Relay {
    /// Open the pseudo-terminal and start copying both ways.
    pub fn start() -> Result<Relay> {
        let Pty { master, slave, .. } = Pty::open()
            .map_err(|e| Error::failed(format!("cannot open a pseudo-terminal: {e}")))?;
        let dup = || {
            master
                .try_clone()
                .map_err(|e| Error::failed(format!("cannot duplicate the pseudo-terminal: {e}")))
        };
        let (m_in, m_out) = (dup()?, dup()?);
        let raw = RawStdin::enter();
        // Input: blocks in read(stdin) until bulkhead exits; never joined.
        std::thread::spawn(move || pty::copy(bulkhead_sys::fd::stdin(), m_in.as_fd()));
        let output =
            std::thread::spawn(move || pty::copy(m_out.as_fd(), bulkhead_sys::fd::stdout()));
        Ok(Relay { slave, raw, output })
    }

    /// The terminal side, for the command.
    pub fn terminal(&self) -> RawFd {
        self.slave.as_raw_fd()
    }

    /// After the command has exited: copy what it wrote last, give the caller's terminal its
    /// settings back.
    pub fn finish(self) {
        let Relay { slave, raw, output } = self;
        // Closing our terminal side makes the master read EIO once the output is drained.
        drop(slave);
        let _ = output.join();
        drop(raw);
    }
}
