//! Binding the plan's listen addresses, before anything else starts: an address in use, a
//! unix path in a missing directory or in one others can change is an error that names the
//! plan line.

use super::inherited::Pool;
use super::sockfile;
use bulkhead_plan::socket::{Endpoint, SocketSpec};
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use bulkhead_sys::trusted::DirError;
use socket2::{Domain, SockAddr, Socket, Type};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// A bound, listening socket (or a bound UDP socket).
pub struct Listener {
    pub endpoint: Endpoint,
    pub fd: OwnedFd,
    /// A unix socket file this process created, removed on exit.
    pub created: Option<PathBuf>,
    /// Passed by a socket unit (LISTEN_FDS) rather than bound here.
    pub passed: bool,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(p) = &self.created {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Why an address could not be bound.
enum Fail {
    Io(std::io::Error),
    /// The unix socket's directory (or one above it) can be changed by others.
    Dir(DirError),
}

impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Fail {
        Fail::Io(e)
    }
}

fn bind_error(spec: &SocketSpec, at: &str, ep: &Endpoint, e: Fail) -> Error {
    let e = match e {
        Fail::Io(e) | Fail::Dir(DirError::Io(_, e)) => e,
        Fail::Dir(DirError::Untrusted { path, why }) => {
            return Error::invalid(
                Diagnostic::error(format!(
                    "cannot listen on {ep}: the directory {} {why}",
                    path.display()
                ))
                .at(at.to_string())
                .context(format!("[socket.{}] listen", spec.name))
                .hint(format!(
                    "someone else could swap the socket file while root sets its owner and mode: use a directory only root can change (such as /run/bulkhead), or take write access from group and others (chmod go-w {}); a sticky directory owned by root, like /tmp, is accepted",
                    path.display()
                )),
            )
        }
    };
    let hint = match (e.raw_os_error(), ep) {
        (Some(libc::EADDRINUSE), Endpoint::Unix(_)) => {
            "another process listens on this socket; stop it or pick another path".to_string()
        }
        (Some(libc::EADDRINUSE), _) => format!(
            "another process listens there (ss -ltnp 'sport = :{}' shows which); stop it or pick another port",
            match ep {
                Endpoint::Tcp(a) | Endpoint::Udp(a) => a.port(),
                Endpoint::Unix(_) => 0,
            }
        ),
        (Some(libc::EADDRNOTAVAIL), _) => {
            "this host has no such address; use 127.0.0.1, 0.0.0.0 or one of `ip -brief addr`".into()
        }
        (Some(libc::EACCES), _) => "ports below 1024 and most paths need root".into(),
        (Some(libc::ENOENT), Endpoint::Unix(p)) => format!(
            "the directory {} does not exist; create it first",
            p.parent().unwrap_or(Path::new("/")).display()
        ),
        _ => "check the address".into(),
    };
    Error::invalid(
        Diagnostic::error(format!("cannot listen on {ep}: {}", errno_text(&e)))
            .at(at.to_string())
            .context(format!("[socket.{}] listen", spec.name))
            .hint(hint),
    )
}

/// Bind every listen address of `spec`, or none. An address a socket unit already passed
/// (in `passed`) is taken from there instead; the unit owns its file and mode.
pub fn bind_all(spec: &SocketSpec, passed: &mut Pool) -> Result<Vec<Listener>> {
    let mut out = Vec::new();
    for (ep, at) in &spec.listen {
        let l = match passed.claim(ep) {
            Some(fd) => Listener {
                endpoint: ep.clone(),
                fd: fd.map_err(|e| bind_error(spec, at, ep, Fail::Io(e)))?,
                created: None,
                passed: true,
            },
            None => bind(spec, ep).map_err(|e| bind_error(spec, at, ep, e))?,
        };
        out.push(l);
    }
    Ok(out)
}

fn bind(spec: &SocketSpec, ep: &Endpoint) -> std::result::Result<Listener, Fail> {
    let (sock, place, created) = match ep {
        Endpoint::Tcp(a) | Endpoint::Udp(a) => {
            let ty = if matches!(ep, Endpoint::Tcp(_)) {
                Type::STREAM
            } else {
                Type::DGRAM
            };
            let s = Socket::new(Domain::for_address(*a), ty.cloexec(), None)?;
            s.set_reuse_address(true)?;
            if a.is_ipv6() {
                s.set_only_v6(false)?;
            }
            s.bind(&SockAddr::from(*a))?;
            (s, None, None)
        }
        Endpoint::Unix(p) => {
            let place = sockfile::place(p).map_err(Fail::Dir)?;
            clear_stale(p)?;
            let s = Socket::new(Domain::UNIX, Type::STREAM.cloexec(), None)?;
            sockfile::bind(&s, p, spec.socket_mode)?;
            (s, Some(place), Some(p.clone()))
        }
    };
    // From here the file is ours: the Listener removes it if anything below fails.
    let l = Listener {
        endpoint: ep.clone(),
        fd: sock.into(),
        created,
        passed: false,
    };
    if let Some(place) = &place {
        set_owner(spec, place)?;
    }
    let sock = socket2::SockRef::from(&l.fd);
    if ep.is_stream() {
        sock.listen(spec.backlog as i32)?;
    }
    sock.set_nonblocking(true)?;
    Ok(l)
}

/// A socket file left by a process that is gone (nothing accepts on it) is removed; a live one
/// is "in use"; anything else in the way is not touched.
fn clear_stale(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(std::io::Error::from_raw_os_error(libc::EEXIST));
    }
    match std::os::unix::net::UnixStream::connect(p) {
        Ok(_) => Err(std::io::Error::from_raw_os_error(libc::EADDRINUSE)),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => std::fs::remove_file(p),
        Err(e) => Err(e),
    }
}

/// systemd's SocketUser= and SocketGroup= (SocketMode= was set at bind).
fn set_owner(spec: &SocketSpec, place: &sockfile::Place) -> std::io::Result<()> {
    let uid = match &spec.socket_user {
        Some(u) => Some(lookup_user(u)?),
        None => None,
    };
    let gid = match &spec.socket_group {
        Some(g) => Some(lookup_group(g)?),
        None => None,
    };
    sockfile::chown(place, uid, gid)
}

fn lookup_user(u: &str) -> std::io::Result<u32> {
    if let Ok(n) = u.parse() {
        return Ok(n);
    }
    bulkhead_sys::users::user_by_name(u)
        .map(|x| x.uid)
        .ok_or_else(|| std::io::Error::other(format!("socket_user: no user '{u}' on this host")))
}

fn lookup_group(g: &str) -> std::io::Result<u32> {
    if let Ok(n) = g.parse() {
        return Ok(n);
    }
    bulkhead_sys::users::gid_by_name(g)
        .ok_or_else(|| std::io::Error::other(format!("socket_group: no group '{g}' on this host")))
}
