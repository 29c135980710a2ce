//! The kernel's process events: the netlink proc connector (NETLINK_CONNECTOR, group
//! CN_IDX_PROC), as libcgroup's `cgrulesengd` and `forkstat` listen to it. The kernel says
//! when a task forks, execs, changes its IDs, session or command name, or exits; a listener
//! learns of new processes without scanning /proc.
//!
//! Only the initial namespaces have it: joining the group needs CAP_NET_ADMIN in the initial
//! user namespace, the socket must be in the initial network namespace, and the kernel
//! ignores the listen request of a process in another PID or user namespace (its PIDs would
//! not be the ones the events name). [`ProcEvents::open`] waits for the kernel's answer to
//! that request, so each of these fails there with an error that says which.
//!
//! The socket is non-blocking: [`ProcEvents::wait`] polls it with a timeout,
//! [`ProcEvents::read`] takes at most a given number of events and says when the kernel
//! dropped some (its receive buffer overran: ENOBUFS), after which only a rescan of /proc
//! knows what happened. The parsing ([`parse`]) is safe byte parsing of one datagram.

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// The connector's index and value of process events (`CN_IDX_PROC`, `CN_VAL_PROC`); the
/// index is also the multicast group.
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
/// `enum proc_cn_mcast_op`.
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_CN_MCAST_IGNORE: u32 = 2;
/// The netlink message type the connector sends and takes.
const NLMSG_DONE: u16 = 3;
/// `struct nlmsghdr`, `struct cn_msg`, and `struct proc_event` before its union.
const NLMSG_HDR: usize = 16;
const CN_MSG: usize = 20;
const EVENT_HDR: usize = 16;
/// `enum what` of `struct proc_event`.
const EV_NONE: u32 = 0;
const EV_FORK: u32 = 0x1;
const EV_EXEC: u32 = 0x2;
const EV_UID: u32 = 0x4;
const EV_GID: u32 = 0x40;
const EV_SID: u32 = 0x80;
const EV_COMM: u32 = 0x200;
const EV_EXIT: u32 = 0x8000_0000;
/// The receive buffer asked for: about 4,000 events between two reads.
const RCVBUF: usize = 4 << 20;
/// How long [`ProcEvents::open`] waits for the kernel's answer to the listen request (it is
/// sent within the request's own system call; a missing one means it was ignored).
const ACK_WAIT: Duration = Duration::from_secs(1);
/// One datagram is read into this many bytes (an event is 76).
const DATAGRAM: usize = 8 << 10;

/// One event, as the kernel reports it. `pid` is the task (thread) ID, `tgid` the process
/// ID; an event where they differ is a thread's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A new task: a process when `child_pid == child_tgid`, else a thread of `child_tgid`.
    /// The parent is the child's parent process (for a thread, its process's parent).
    Fork {
        parent_pid: i32,
        parent_tgid: i32,
        child_pid: i32,
        child_tgid: i32,
    },
    /// The task runs a new program.
    Exec { pid: i32, tgid: i32 },
    /// The real or effective UID changed.
    Uid {
        pid: i32,
        tgid: i32,
        ruid: u32,
        euid: u32,
    },
    /// The real or effective GID changed.
    Gid {
        pid: i32,
        tgid: i32,
        rgid: u32,
        egid: u32,
    },
    /// The task made a new session (setsid).
    Sid { pid: i32, tgid: i32 },
    /// The task's command name (`comm`) changed; for a thread, the thread's own name.
    Comm { pid: i32, tgid: i32, comm: [u8; 16] },
    /// The task exited.
    Exit {
        pid: i32,
        tgid: i32,
        code: u32,
        signal: u32,
    },
    /// The kernel's answer to a listen or ignore request: `ack` is the request's plus one,
    /// `err` an errno (0: done).
    Ack { ack: u32, err: u32 },
}

/// What one [`ProcEvents::read`] found besides its events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    /// The kernel dropped events since the last read (ENOBUFS): rescan.
    pub lost: bool,
    /// The read stopped at its bound with more perhaps waiting.
    pub more: bool,
}

/// A listener of the kernel's process events. Dropping it tells the kernel to stop.
pub struct ProcEvents {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl ProcEvents {
    /// Join the proc connector's group and ask for events. Fails, saying why, without
    /// CAP_NET_ADMIN, outside the initial network namespace, and in another PID or user
    /// namespace than the initial ones (the kernel does not answer there).
    pub fn open() -> io::Result<ProcEvents> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            Some(netlink::CONNECTOR),
        )
        .map_err(|e| {
            explain(
                e.into(),
                "no NETLINK_CONNECTOR socket (a network namespace other than the initial one?)",
            )
        })?;
        // Larger than the default, so a burst of forks does not overrun it; the forced size
        // needs CAP_NET_ADMIN, which the bind below needs too.
        if rustix::net::sockopt::set_socket_recv_buffer_size_force(&fd, RCVBUF).is_err() {
            let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&fd, RCVBUF);
        }
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 1 << (CN_IDX_PROC - 1))).map_err(
            |e| {
                explain(
                    e.into(),
                    "joining the proc connector's group needs CAP_NET_ADMIN in the initial user namespace",
                )
            },
        )?;
        let mut me = ProcEvents {
            fd,
            buf: vec![0; DATAGRAM],
        };
        me.listen()?;
        Ok(me)
    }

    /// Ask for events and wait for the kernel's answer.
    fn listen(&mut self) -> io::Result<()> {
        let token = std::process::id().wrapping_mul(2_654_435_761) | 1;
        self.send(PROC_CN_MCAST_LISTEN, token)
            .map_err(|e| explain(e, "the listen request was not sent"))?;
        let deadline = Instant::now() + ACK_WAIT;
        let mut events = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::other(
                    "the kernel did not answer the request for process events: it ignores \
                     processes outside the initial PID and user namespaces",
                ));
            }
            self.wait(left)?;
            events.clear();
            self.read(&mut events, 1024)?;
            for e in &events {
                match *e {
                    Event::Ack { ack, err: 0 } if ack == token.wrapping_add(1) => return Ok(()),
                    Event::Ack { ack, err } if ack == token.wrapping_add(1) => {
                        let e = io::Error::from_raw_os_error(err as i32);
                        return Err(explain(
                            e,
                            "the kernel refused the request for process events",
                        ));
                    }
                    _ => {}
                }
            }
        }
    }

    fn send(&self, op: u32, ack: u32) -> io::Result<()> {
        let msg = control_message(op, ack);
        rustix::net::sendto(
            &self.fd,
            &msg,
            SendFlags::empty(),
            &SocketAddrNetlink::new(0, 0),
        )?;
        Ok(())
    }

    /// The socket, to poll it with other descriptors.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Wait until events (or an overrun) can be read, or `timeout` passes: whether there is
    /// something to read. A signal ends the wait early (false).
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let ts = Timespec::try_from(timeout).unwrap_or(Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        match poll(&mut fds, Some(&ts)) {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Append what has arrived to `out`, without waiting: at most `max` datagrams (an event
    /// each). Datagrams from anyone but the kernel are dropped.
    pub fn read(&mut self, out: &mut Vec<Event>, max: usize) -> io::Result<Received> {
        let mut got = Received::default();
        for _ in 0..max {
            match rustix::net::recvfrom(&self.fd, &mut self.buf[..], RecvFlags::empty()) {
                Ok((n, _, from)) => {
                    let kernel = from
                        .and_then(|a| SocketAddrNetlink::try_from(a).ok())
                        .is_some_and(|a| a.pid() == 0);
                    if kernel {
                        parse(&self.buf[..n.min(self.buf.len())], out);
                    }
                }
                Err(rustix::io::Errno::WOULDBLOCK) => return Ok(got),
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::NOBUFS) => got.lost = true,
                Err(e) => return Err(e.into()),
            }
        }
        got.more = true;
        Ok(got)
    }
}

impl Drop for ProcEvents {
    fn drop(&mut self) {
        let _ = self.send(PROC_CN_MCAST_IGNORE, 0);
    }
}

fn explain(e: io::Error, what: &str) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("the kernel's process events (proc connector): {what}: {e}"),
    )
}

/// A request to the proc connector: nlmsghdr, cn_msg (idx/val CN_IDX_PROC/CN_VAL_PROC,
/// `ack` echoed back plus one in the answer) and the operation.
fn control_message(op: u32, ack: u32) -> [u8; NLMSG_HDR + CN_MSG + 4] {
    let mut m = [0u8; NLMSG_HDR + CN_MSG + 4];
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
    // flags, seq and port ID stay 0.
    let cn = NLMSG_HDR;
    m[cn..cn + 4].copy_from_slice(&CN_IDX_PROC.to_ne_bytes());
    m[cn + 4..cn + 8].copy_from_slice(&CN_VAL_PROC.to_ne_bytes());
    m[cn + 12..cn + 16].copy_from_slice(&ack.to_ne_bytes());
    m[cn + 16..cn + 18].copy_from_slice(&4u16.to_ne_bytes());
    m[cn + 20..cn + 24].copy_from_slice(&op.to_ne_bytes());
    m
}

/// The events of one datagram, appended to `out`: every netlink message in it that is a
/// process event of the connector. A short, odd or foreign message is skipped (never a
/// panic); an event of a kind not listed in [`Event`] is ignored.
pub fn parse(datagram: &[u8], out: &mut Vec<Event>) {
    let mut at = 0;
    while let Some(hdr) = datagram.get(at..at + NLMSG_HDR) {
        let len = u32_at(hdr, 0).unwrap_or(0) as usize;
        let kind = u16::from_ne_bytes([hdr[4], hdr[5]]);
        let Some(msg) = datagram.get(at..at.saturating_add(len)) else {
            return; // truncated
        };
        if len < NLMSG_HDR {
            return;
        }
        if kind == NLMSG_DONE {
            if let Some(e) = connector_event(&msg[NLMSG_HDR..]) {
                out.push(e);
            }
        }
        // NLMSG_ALIGN: messages start on 4-byte boundaries.
        at = at.saturating_add((len + 3) & !3);
    }
}

/// One `struct cn_msg` with its `struct proc_event`.
fn connector_event(cn: &[u8]) -> Option<Event> {
    if u32_at(cn, 0)? != CN_IDX_PROC || u32_at(cn, 4)? != CN_VAL_PROC {
        return None;
    }
    let ack = u32_at(cn, 12)?;
    let len = usize::from(u16::from_ne_bytes([*cn.get(16)?, *cn.get(17)?]));
    let ev = cn.get(CN_MSG..CN_MSG.checked_add(len)?)?;
    let what = u32_at(ev, 0)?;
    let d = ev.get(EVENT_HDR..)?;
    let int = |i: usize| i32_at(d, 4 * i);
    let word = |i: usize| u32_at(d, 4 * i);
    Some(match what {
        EV_NONE => Event::Ack { ack, err: word(0)? },
        EV_FORK => Event::Fork {
            parent_pid: int(0)?,
            parent_tgid: int(1)?,
            child_pid: int(2)?,
            child_tgid: int(3)?,
        },
        EV_EXEC => Event::Exec {
            pid: int(0)?,
            tgid: int(1)?,
        },
        EV_UID => Event::Uid {
            pid: int(0)?,
            tgid: int(1)?,
            ruid: word(2)?,
            euid: word(3)?,
        },
        EV_GID => Event::Gid {
            pid: int(0)?,
            tgid: int(1)?,
            rgid: word(2)?,
            egid: word(3)?,
        },
        EV_SID => Event::Sid {
            pid: int(0)?,
            tgid: int(1)?,
        },
        EV_COMM => Event::Comm {
            pid: int(0)?,
            tgid: int(1)?,
            comm: d.get(8..24)?.try_into().ok()?,
        },
        EV_EXIT => Event::Exit {
            pid: int(0)?,
            tgid: int(1)?,
            code: word(2)?,
            signal: word(3)?,
        },
        _ => return None,
    })
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    u32_at(b, at).map(|v| v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram of one connector message carrying a proc_event of kind `what` with
    /// `data` as its union (and `ack` in the cn_msg).
    fn message(what: u32, ack: u32, data: &[u8]) -> Vec<u8> {
        let mut ev = Vec::new();
        ev.extend_from_slice(&what.to_ne_bytes());
        ev.extend_from_slice(&1u32.to_ne_bytes()); // cpu
        ev.extend_from_slice(&123_456_789u64.to_ne_bytes()); // timestamp
        ev.extend_from_slice(data);
        let mut m = Vec::new();
        let len = (NLMSG_HDR + CN_MSG + ev.len()) as u32;
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        m.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        m.extend_from_slice(&ack.to_ne_bytes());
        m.extend_from_slice(&(ev.len() as u16).to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&ev);
        m
    }

    fn words(w: &[u32]) -> Vec<u8> {
        // The kernel's union is 24 bytes at least (the exit event's six words).
        let mut v: Vec<u8> = w.iter().flat_map(|x| x.to_ne_bytes()).collect();
        v.resize(v.len().max(24), 0);
        v
    }

    fn parsed(b: &[u8]) -> Vec<Event> {
        let mut out = Vec::new();
        parse(b, &mut out);
        out
    }

    #[test]
    fn each_kind_of_event_is_parsed() {
        let fork = message(EV_FORK, 0, &words(&[10, 10, 11, 11]));
        assert_eq!(
            parsed(&fork),
            [Event::Fork {
                parent_pid: 10,
                parent_tgid: 10,
                child_pid: 11,
                child_tgid: 11
            }]
        );
        assert_eq!(
            parsed(&message(EV_EXEC, 0, &words(&[12, 12]))),
            [Event::Exec { pid: 12, tgid: 12 }]
        );
        assert_eq!(
            parsed(&message(EV_UID, 0, &words(&[13, 13, 105, 0]))),
            [Event::Uid {
                pid: 13,
                tgid: 13,
                ruid: 105,
                euid: 0
            }]
        );
        assert_eq!(
            parsed(&message(EV_GID, 0, &words(&[14, 14, 7, 8]))),
            [Event::Gid {
                pid: 14,
                tgid: 14,
                rgid: 7,
                egid: 8
            }]
        );
        assert_eq!(
            parsed(&message(EV_SID, 0, &words(&[15, 15]))),
            [Event::Sid { pid: 15, tgid: 15 }]
        );
        let mut comm = words(&[16, 15]);
        comm[8..15].copy_from_slice(b"pg_dump");
        let mut want = [0u8; 16];
        want[..7].copy_from_slice(b"pg_dump");
        assert_eq!(
            parsed(&message(EV_COMM, 0, &comm)),
            [Event::Comm {
                pid: 16,
                tgid: 15,
                comm: want
            }]
        );
        assert_eq!(
            parsed(&message(EV_EXIT, 0, &words(&[17, 17, 256, 17, 1, 1]))),
            [Event::Exit {
                pid: 17,
                tgid: 17,
                code: 256,
                signal: 17
            }]
        );
        assert_eq!(
            parsed(&message(EV_NONE, 43, &words(&[0]))),
            [Event::Ack { ack: 43, err: 0 }]
        );
        // Another kind (ptrace, coredump) is ignored.
        assert!(parsed(&message(0x100, 0, &words(&[1, 1, 2, 2]))).is_empty());
        assert!(parsed(&message(0x4000_0000, 0, &words(&[1, 1, 2, 2]))).is_empty());
    }

    #[test]
    fn several_messages_in_one_datagram() {
        let mut b = message(EV_EXEC, 0, &words(&[1, 1]));
        b.extend(message(EV_EXIT, 0, &words(&[2, 2, 0, 17])));
        assert_eq!(parsed(&b).len(), 2);
    }

    #[test]
    fn short_odd_and_foreign_input_never_panics() {
        let full = message(EV_FORK, 0, &words(&[10, 10, 11, 11]));
        // Every truncation of a valid message: nothing, or (never) a partial event.
        for n in 0..full.len() {
            assert!(parsed(&full[..n]).is_empty(), "truncated at {n}");
        }
        // A nlmsghdr that says it is longer than the datagram, shorter than itself, or 0.
        for len in [0u32, 4, 15, u32::MAX, full.len() as u32 + 1] {
            let mut b = full.clone();
            b[0..4].copy_from_slice(&len.to_ne_bytes());
            assert!(parsed(&b).is_empty(), "len {len}");
        }
        // A cn_msg whose data length runs past the message.
        let mut b = full.clone();
        b[NLMSG_HDR + 16..NLMSG_HDR + 18].copy_from_slice(&u16::MAX.to_ne_bytes());
        assert!(parsed(&b).is_empty());
        // A cn_msg whose data length is too short for the union.
        let mut b = full.clone();
        b[NLMSG_HDR + 16..NLMSG_HDR + 18].copy_from_slice(&20u16.to_ne_bytes());
        assert!(parsed(&b).is_empty());
        // Another connector (idx), another message type.
        let mut b = full.clone();
        b[NLMSG_HDR..NLMSG_HDR + 4].copy_from_slice(&4u32.to_ne_bytes());
        assert!(parsed(&b).is_empty());
        let mut b = full.clone();
        b[4..6].copy_from_slice(&2u16.to_ne_bytes());
        assert!(parsed(&b).is_empty());
        // Noise of every length.
        let noise: Vec<u8> = (0..600u32).map(|i| (i * 37 % 251) as u8).collect();
        for n in 0..noise.len() {
            let _ = parsed(&noise[..n]);
        }
    }

    #[test]
    fn the_request_is_what_the_kernel_reads() {
        let m = control_message(PROC_CN_MCAST_LISTEN, 42);
        assert_eq!(u32_at(&m, 0), Some(40));
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), NLMSG_DONE);
        assert_eq!(u32_at(&m, 16), Some(CN_IDX_PROC));
        assert_eq!(u32_at(&m, 20), Some(CN_VAL_PROC));
        assert_eq!(u32_at(&m, 28), Some(42));
        assert_eq!(u16::from_ne_bytes([m[32], m[33]]), 4);
        assert_eq!(u32_at(&m, 36), Some(PROC_CN_MCAST_LISTEN));
    }

    /// As root: the fork, exec and exit of a child are heard. Otherwise opening fails and
    /// says why (skipped outside CI; CI runs this as root).
    #[test]
    fn a_childs_fork_exec_and_exit_are_heard_as_root() {
        if !rustix::process::geteuid().is_root() {
            let e = ProcEvents::open().err().expect("no events without root");
            assert!(e.to_string().contains("CAP_NET_ADMIN"), "{e}");
            bulkhead_testkit::prereq::missing("the kernel's process events (need CAP_NET_ADMIN)");
            return;
        }
        let mut ev = ProcEvents::open().unwrap();
        let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        let (mut fork, mut exec, mut exit) = (false, false, false);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut out = Vec::new();
        while !(fork && exec && exit) && Instant::now() < deadline {
            ev.wait(Duration::from_millis(100)).unwrap();
            out.clear();
            ev.read(&mut out, 256).unwrap();
            for e in &out {
                match *e {
                    Event::Fork { child_tgid, .. } if child_tgid == pid => fork = true,
                    Event::Exec { tgid, .. } if tgid == pid => exec = true,
                    Event::Exit { tgid, .. } if tgid == pid => exit = true,
                    _ => {}
                }
            }
        }
        assert!(
            fork && exec && exit,
            "fork {fork}, exec {exec}, exit {exit}"
        );
    }
}
