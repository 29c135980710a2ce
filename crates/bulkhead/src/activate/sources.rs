//! Connections per client (systemd's MaxConnectionsPerSource=): a client is an IPv4 address,
//! an IPv6 /64 (one host's usual share, which it can fill with addresses at will) or, on a
//! unix socket, the peer's user. A slot is held while the connection lives.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// One client, as the per-source limit counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6([u8; 8]),
    /// A unix socket's peer.
    Uid(u32),
    /// A unix peer the kernel did not name.
    Unknown,
}

impl Source {
    pub fn ip(a: IpAddr) -> Source {
        match a {
            IpAddr::V4(v4) => Source::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4.octets()),
                None => {
                    let mut p = [0u8; 8];
                    p.copy_from_slice(&v6.octets()[..8]);
                    Source::V6(p)
                }
            },
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::V4(a) => write!(f, "{}", std::net::Ipv4Addr::from(*a)),
            Source::V6(p) => {
                let mut a = [0u8; 16];
                a[..8].copy_from_slice(p);
                write!(f, "{}/64", std::net::Ipv6Addr::from(a))
            }
            Source::Uid(u) => write!(f, "UID {u}"),
            Source::Unknown => write!(f, "an unknown unix peer"),
        }
    }
}

/// The connections each client holds, up to `cap`.
pub struct Sources {
    cap: u32,
    held: Mutex<HashMap<Source, u32>>,
}

/// One connection's place in its client's count; released on drop.
pub struct Slot {
    table: Arc<Sources>,
    pub source: Source,
}

impl Sources {
    pub fn new(cap: u32) -> Arc<Sources> {
        Arc::new(Sources {
            cap,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more connection of `source`, or None when it holds `cap` already.
    pub fn take(self: &Arc<Self>, source: Source) -> Option<Slot> {
        let mut held = self.held.lock().unwrap();
        let n = held.entry(source).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(Slot {
            table: self.clone(),
            source,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.table.held.lock().unwrap();
        if let Some(n) = held.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_gets_cap_slots_and_gets_them_back() {
        let t = Sources::new(2);
        let a = Source::ip("192.0.2.1".parse().unwrap());
        let s1 = t.take(a).unwrap();
        let _s2 = t.take(a).unwrap();
        assert!(t.take(a).is_none());
        // Another client is not affected.
        assert!(t.take(Source::ip("192.0.2.2".parse().unwrap())).is_some());
        drop(s1);
        assert!(t.take(a).is_some());
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let x = Source::ip("2001:db8:1:2::1".parse().unwrap());
        let y = Source::ip("2001:db8:1:2:ffff::9".parse().unwrap());
        let z = Source::ip("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert_eq!(x.to_string(), "2001:db8:1:2::/64");
        assert_eq!(
            Source::ip("::ffff:192.0.2.1".parse().unwrap()),
            Source::ip("192.0.2.1".parse().unwrap())
        );
    }
}
