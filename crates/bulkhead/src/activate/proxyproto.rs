//! The PROXY protocol (HAProxy's, versions 1 and 2): read on the listener when a load
//! balancer sends it, written towards the target so the client's address survives the proxy.

use super::proxy::Conn;
use bulkhead_plan::socket::ProxyVersion;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const V2_SIG: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The header announcing a connection from `src` to `dst` (`None`: not an IP connection).
pub fn header(v: ProxyVersion, src: Option<SocketAddr>, dst: Option<SocketAddr>) -> Vec<u8> {
    let pair = match (src, dst) {
        (Some(s), Some(d)) if s.is_ipv4() == d.is_ipv4() => Some((s, d)),
        (Some(s), Some(d)) => Some((to_v6(s), to_v6(d))),
        _ => None,
    };
    match v {
        ProxyVersion::V1 => match pair {
            Some((s, d)) => format!(
                "PROXY {} {} {} {} {}\r\n",
                if s.is_ipv4() { "TCP4" } else { "TCP6" },
                s.ip(),
                d.ip(),
                s.port(),
                d.port()
            )
            .into_bytes(),
            None => b"PROXY UNKNOWN\r\n".to_vec(),
        },
        ProxyVersion::V2 => {
            let mut h = V2_SIG.to_vec();
            match pair {
                Some((s, d)) => {
                    h.push(0x21); // version 2, PROXY
                    let mut addrs = Vec::new();
                    match (s.ip(), d.ip()) {
                        (IpAddr::V4(a), IpAddr::V4(b)) => {
                            h.push(0x11); // TCP over IPv4
                            addrs.extend(a.octets());
                            addrs.extend(b.octets());
                        }
                        (IpAddr::V6(a), IpAddr::V6(b)) => {
                            h.push(0x21); // TCP over IPv6
                            addrs.extend(a.octets());
                            addrs.extend(b.octets());
                        }
                        _ => unreachable!("both sides have the same family"),
                    }
                    addrs.extend(s.port().to_be_bytes());
                    addrs.extend(d.port().to_be_bytes());
                    h.extend((addrs.len() as u16).to_be_bytes());
                    h.extend(addrs);
                }
                None => {
                    h.push(0x20); // version 2, LOCAL
                    h.push(0x00);
                    h.extend(0u16.to_be_bytes());
                }
            }
            h
        }
    }
}

fn to_v6(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port()),
        v6 => v6,
    }
}

/// What a parsed header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// The real client and the address it connected to.
    Proxy { src: SocketAddr, dst: SocketAddr },
    /// A health check or a non-IP connection: use the connection's own addresses.
    Local,
}

/// Parse a header at the start of `buf`: `Ok(Some((header, length)))`, `Ok(None)` when more
/// bytes are needed, an error when `buf` does not start with a PROXY header.
pub fn parse(buf: &[u8]) -> Result<Option<(Header, usize)>, String> {
    if buf.len() >= 12 && buf[..12] == V2_SIG {
        if buf.len() < 16 {
            return Ok(None);
        }
        let len = u16::from_be_bytes([buf[14], buf[15]]) as usize;
        if buf.len() < 16 + len {
            return Ok(None);
        }
        let body = &buf[16..16 + len];
        if buf[12] >> 4 != 2 {
            return Err(format!("PROXY v2 header with version {}", buf[12] >> 4));
        }
        if buf[12] & 0xf == 0 {
            return Ok(Some((Header::Local, 16 + len)));
        }
        let h = match buf[13] >> 4 {
            1 if body.len() >= 12 => {
                let ip = |o: usize| IpAddr::from([body[o], body[o + 1], body[o + 2], body[o + 3]]);
                let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
                Header::Proxy {
                    src: SocketAddr::new(ip(0), port(8)),
                    dst: SocketAddr::new(ip(4), port(10)),
                }
            }
            2 if body.len() >= 36 => {
                let ip = |o: usize| {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(&body[o..o + 16]);
                    IpAddr::from(a)
                };
                let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
                Header::Proxy {
                    src: SocketAddr::new(ip(0), port(32)),
                    dst: SocketAddr::new(ip(16), port(34)),
                }
            }
            _ => Header::Local,
        };
        return Ok(Some((h, 16 + len)));
    }
    let prefix = b"PROXY ";
    let n = buf.len().min(prefix.len());
    if buf[..n] != prefix[..n] {
        return Err("the connection does not start with a PROXY protocol header".into());
    }
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        if buf.len() >= 107 {
            return Err("PROXY v1 header longer than 107 bytes".into());
        }
        return Ok(None);
    };
    let line = std::str::from_utf8(&buf[..end]).map_err(|_| "PROXY v1 header is not text")?;
    let f: Vec<&str> = line.split(' ').collect();
    let h = match f.as_slice() {
        ["PROXY", "UNKNOWN", ..] => Header::Local,
        ["PROXY", "TCP4" | "TCP6", s, d, sp, dp] => {
            let p = |ip: &str, port: &str| -> Result<SocketAddr, String> {
                Ok(SocketAddr::new(
                    ip.parse().map_err(|_| format!("bad address '{ip}'"))?,
                    port.parse().map_err(|_| format!("bad port '{port}'"))?,
                ))
            };
            Header::Proxy {
                src: p(s, sp)?,
                dst: p(d, dp)?,
            }
        }
        _ => return Err(format!("malformed PROXY v1 header '{line}'")),
    };
    Ok(Some((h, end + 2)))
}

/// Read and consume the PROXY header a load balancer sent first.
pub async fn read(conn: &Conn, timeout: Duration) -> io::Result<Header> {
    let fut = async {
        let mut buf = vec![0u8; 536];
        loop {
            let n = conn.peek(&mut buf).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before the PROXY header",
                ));
            }
            match parse(&buf[..n]) {
                Ok(Some((h, len))) => {
                    conn.consume(len)?;
                    return Ok(h);
                }
                Ok(None) if n == buf.len() => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "PROXY header too long",
                    ))
                }
                // Part of the header: the readiness stays set, so wait a little.
                Ok(None) => tokio::time::sleep(Duration::from_millis(1)).await,
                Err(m) => return Err(io::Error::new(io::ErrorKind::InvalidData, m)),
            }
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "no PROXY header")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_round_trip() {
        let s: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        let d: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let h = header(ProxyVersion::V1, Some(s), Some(d));
        assert_eq!(h, b"PROXY TCP4 192.0.2.1 127.0.0.1 40000 8080\r\n");
        let mut buf = h.clone();
        buf.extend(b"GET / HTTP/1.0\r\n");
        assert_eq!(
            parse(&buf).unwrap(),
            Some((Header::Proxy { src: s, dst: d }, h.len()))
        );
        assert_eq!(parse(&h[..10]).unwrap(), None);
        assert!(parse(b"GET / HTTP/1.0\r\n").is_err());
    }

    #[test]
    fn v2_round_trip() {
        for (s, d) in [
            ("192.0.2.1:40000", "127.0.0.1:8080"),
            ("[2001:db8::1]:5", "[::1]:80"),
        ] {
            let (s, d): (SocketAddr, SocketAddr) = (s.parse().unwrap(), d.parse().unwrap());
            let h = header(ProxyVersion::V2, Some(s), Some(d));
            assert_eq!(
                parse(&h).unwrap(),
                Some((Header::Proxy { src: s, dst: d }, h.len()))
            );
            assert_eq!(parse(&h[..h.len() - 1]).unwrap(), None);
        }
        let local = header(ProxyVersion::V2, None, None);
        assert_eq!(parse(&local).unwrap(), Some((Header::Local, 16)));
        // Mixed families are sent as IPv6.
        let h = header(
            ProxyVersion::V2,
            Some("192.0.2.1:1".parse().unwrap()),
            Some("[::1]:2".parse().unwrap()),
        );
        assert_eq!(h[13], 0x21);
    }
}
