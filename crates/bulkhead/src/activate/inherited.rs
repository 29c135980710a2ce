//! Listening sockets a `.socket` unit hands to `serve` (LISTEN_FDS): each is matched to the
//! plan's `listen` address it is bound to, and used instead of binding that address again.
//! A passed socket that no `[socket.*]` names is an error: systemd would hold a port that
//! nothing serves.

use bulkhead_plan::socket::{Endpoint, SocketSpec};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::listenfds::Passed;
use socket2::{SockRef, Type};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;

/// A passed socket and what it is bound to.
struct Socket {
    fd: OwnedFd,
    bound: Endpoint,
    name: Option<String>,
}

/// The sockets passed to this process and not yet claimed by a plan address.
#[derive(Default)]
pub struct Pool {
    left: Vec<Socket>,
}

impl Pool {
    /// Take what the service manager passed (nothing outside socket activation).
    pub fn from_env() -> Result<Pool> {
        let passed = bulkhead_sys::listenfds::take().unwrap_or_default();
        let mut left = Vec::new();
        for (i, p) in passed.into_iter().enumerate() {
            left.push(describe(p).map_err(|e| {
                Error::failed(format!(
                    "the socket passed as fd {} (LISTEN_FDS) is not one serve can use: {e}",
                    3 + i
                ))
            })?);
        }
        Ok(Pool { left })
    }

    /// How many passed sockets are still unclaimed.
    pub fn len(&self) -> usize {
        self.left.len()
    }

    pub fn is_empty(&self) -> bool {
        self.left.is_empty()
    }

    /// The passed socket bound to `ep`, if there is one; it is set non-blocking.
    pub fn claim(&mut self, ep: &Endpoint) -> Option<std::io::Result<OwnedFd>> {
        let i = self.left.iter().position(|s| same(&s.bound, ep))?;
        let s = self.left.swap_remove(i);
        Some(SockRef::from(&s.fd).set_nonblocking(true).map(|()| s.fd))
    }

    /// An error for the sockets no plan address claimed (Ok when none is left).
    pub fn check_all_claimed(&self, specs: &[SocketSpec]) -> Result<()> {
        let Some(s) = self.left.first() else {
            return Ok(());
        };
        let named = s
            .name
            .as_deref()
            .map(|n| format!(" (FileDescriptorName={n})"))
            .unwrap_or_default();
        let served: Vec<String> = specs
            .iter()
            .flat_map(|sp| sp.listen.iter().map(|(e, _)| e.to_string()))
            .collect();
        Err(Error::invalid(
            Diagnostic::error(format!(
                "the socket unit passed a socket on {}{named} that no [socket.*] listen names",
                s.bound
            ))
            .context(format!(
                "serve listens on: {}",
                if served.is_empty() {
                    "nothing".to_string()
                } else {
                    served.join(", ")
                }
            ))
            .hint(format!(
                "add `listen = [\"{}\"]` to the [socket.*] section it belongs to, or remove that Listen line from the .socket unit",
                s.bound
            )),
        ))
    }
}

/// What a passed socket is bound to.
fn describe(p: Passed) -> std::io::Result<Socket> {
    let sock = SockRef::from(&p.fd);
    let ty = sock.r#type()?;
    let addr = sock.local_addr()?;
    let bound = if let Some(a) = addr.as_socket() {
        if ty == Type::STREAM {
            Endpoint::Tcp(a)
        } else if ty == Type::DGRAM {
            Endpoint::Udp(a)
        } else {
            return Err(std::io::Error::other(
                "neither a stream nor a datagram socket",
            ));
        }
    } else if let (Some(path), true) = (addr.as_pathname(), ty == Type::STREAM) {
        Endpoint::Unix(path.to_path_buf())
    } else {
        return Err(std::io::Error::other(
            "only TCP, UDP and unix stream sockets with a path are served",
        ));
    };
    Ok(Socket {
        fd: p.fd,
        bound,
        name: p.name,
    })
}

/// Whether a socket bound to `have` serves the plan's `want`. systemd's `ListenStream=6379`
/// binds `[::]:6379` for both IPv4 and IPv6: it serves the plan's `6379` (0.0.0.0:6379).
fn same(have: &Endpoint, want: &Endpoint) -> bool {
    match (have, want) {
        (Endpoint::Tcp(h), Endpoint::Tcp(w)) | (Endpoint::Udp(h), Endpoint::Udp(w)) => {
            same_addr(h, w)
        }
        (Endpoint::Unix(h), Endpoint::Unix(w)) => h == w,
        _ => false,
    }
}

fn same_addr(h: &SocketAddr, w: &SocketAddr) -> bool {
    let any = |a: &SocketAddr| a.ip().is_unspecified();
    h == w || (h.port() == w.port() && any(h) && any(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(s: &str) -> Endpoint {
        Endpoint::Tcp(s.parse().unwrap())
    }

    #[test]
    fn addresses_match_as_systemd_binds_them() {
        assert!(same(&tcp("127.0.0.1:80"), &tcp("127.0.0.1:80")));
        assert!(same(&tcp("[::]:80"), &tcp("0.0.0.0:80")));
        assert!(!same(&tcp("[::]:80"), &tcp("127.0.0.1:80")));
        assert!(!same(&tcp("127.0.0.1:80"), &tcp("127.0.0.1:81")));
        assert!(!same(
            &Endpoint::Udp("127.0.0.1:80".parse().unwrap()),
            &tcp("127.0.0.1:80")
        ));
        assert!(same(
            &Endpoint::Unix("/run/x.sock".into()),
            &Endpoint::Unix("/run/x.sock".into())
        ));
    }
}
