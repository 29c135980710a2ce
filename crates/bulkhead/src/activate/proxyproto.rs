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

/// The longest header read: a v1 line is at most 107 bytes with its CRLF; a v2 header with
/// its TLVs at most 536, the size the spec tells receivers to expect.
const V1_MAX: usize = 107;
const V2_MAX: usize = 536;

/// Parse a header at the start of `buf` by the spec (haproxy.org proxy-protocol.txt):
/// `Ok(Some((header, length)))`, `Ok(None)` when more bytes are needed, an error when `buf`
/// does not start with a valid header.
pub fn parse(buf: &[u8]) -> Result<Option<(Header, usize)>, String> {
    let n = buf.len().min(V2_SIG.len());
    if buf[..n] == V2_SIG[..n] {
        return if n < V2_SIG.len() {
            Ok(None)
        } else {
            parse_v2(buf)
        };
    }
    let prefix = b"PROXY ";
    let n = buf.len().min(prefix.len());
    if buf[..n] != prefix[..n] {
        return Err("the connection does not start with a PROXY protocol header".into());
    }
    parse_v1(buf)
}

fn parse_v1(buf: &[u8]) -> Result<Option<(Header, usize)>, String> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        if buf.len() >= V1_MAX {
            return Err(format!("PROXY v1 header without CRLF in {V1_MAX} bytes"));
        }
        return Ok(None);
    };
    if end + 2 > V1_MAX {
        return Err(format!("PROXY v1 header longer than {V1_MAX} bytes"));
    }
    let line = std::str::from_utf8(&buf[..end]).map_err(|_| "PROXY v1 header is not text")?;
    let f: Vec<&str> = line.split(' ').collect();
    let h = match f.as_slice() {
        // The rest of an UNKNOWN line is ignored, as the spec says.
        ["PROXY", "UNKNOWN", ..] => Header::Local,
        ["PROXY", proto @ ("TCP4" | "TCP6"), s, d, sp, dp] => {
            let v4 = *proto == "TCP4";
            Header::Proxy {
                src: SocketAddr::new(v1_addr(s, v4)?, v1_port(sp)?),
                dst: SocketAddr::new(v1_addr(d, v4)?, v1_port(dp)?),
            }
        }
        _ => {
            return Err(format!(
                "malformed PROXY v1 header '{}'",
                line.escape_debug()
            ))
        }
    };
    Ok(Some((h, end + 2)))
}

fn v1_addr(s: &str, v4: bool) -> Result<IpAddr, String> {
    let a = if v4 {
        s.parse::<std::net::Ipv4Addr>().map(IpAddr::V4)
    } else {
        s.parse::<std::net::Ipv6Addr>().map(IpAddr::V6)
    };
    a.map_err(|_| {
        format!(
            "bad {} address '{}' in a PROXY v1 header",
            if v4 { "TCP4" } else { "TCP6" },
            s.escape_debug()
        )
    })
}

/// A port: 1 to 5 decimal digits, at most 65535 (no sign, no spaces).
fn v1_port(s: &str) -> Result<u16, String> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "bad port '{}' in a PROXY v1 header",
            s.escape_debug()
        ));
    }
    s.parse()
        .map_err(|_| format!("bad port '{s}' in a PROXY v1 header"))
}

fn parse_v2(buf: &[u8]) -> Result<Option<(Header, usize)>, String> {
    if buf.len() < 16 {
        return Ok(None);
    }
    let (ver, cmd) = (buf[12] >> 4, buf[12] & 0xf);
    if ver != 2 {
        return Err(format!("PROXY v2 header with version {ver}"));
    }
    if cmd > 1 {
        return Err(format!("PROXY v2 header with the unknown command {cmd}"));
    }
    let (fam, proto) = (buf[13] >> 4, buf[13] & 0xf);
    if fam > 3 || proto > 2 || (fam == 0) != (proto == 0) {
        return Err(format!(
            "PROXY v2 header with the unknown address family and protocol 0x{:02x}",
            buf[13]
        ));
    }
    let len = u16::from_be_bytes([buf[14], buf[15]]) as usize;
    if 16 + len > V2_MAX {
        return Err(format!("PROXY v2 header longer than {V2_MAX} bytes"));
    }
    if buf.len() < 16 + len {
        return Ok(None);
    }
    let body = &buf[16..16 + len];
    let need = [0, 12, 36, 216][fam as usize];
    if body.len() < need {
        return Err(format!(
            "PROXY v2 header with {} bytes of addresses where its family needs {need}",
            body.len()
        ));
    }
    let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
    let h = match (cmd, fam) {
        // LOCAL (a health check), and the families without an IP address: the connection's
        // own addresses stand.
        (0, _) | (_, 0) | (_, 3) => Header::Local,
        (_, 1) => {
            let ip = |o: usize| IpAddr::from([body[o], body[o + 1], body[o + 2], body[o + 3]]);
            Header::Proxy {
                src: SocketAddr::new(ip(0), port(8)),
                dst: SocketAddr::new(ip(4), port(10)),
            }
        }
        _ => {
            let ip = |o: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&body[o..o + 16]);
                IpAddr::from(a)
            };
            Header::Proxy {
                src: SocketAddr::new(ip(0), port(32)),
                dst: SocketAddr::new(ip(16), port(34)),
            }
        }
    };
    Ok(Some((h, 16 + len)))
}

/// Why a header could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// Not complete within the timeout.
    TimedOut,
    /// Not a header by the spec.
    Invalid(String),
    /// The connection failed or closed.
    Io(io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::TimedOut => write!(f, "no complete PROXY header in time"),
            ReadError::Invalid(m) => write!(f, "{m}"),
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Read and consume the PROXY header a load balancer sent first. It waits for bytes without
/// polling: after a partial header, the next wake-up is the next arrival of data.
pub async fn read(conn: &Conn, timeout: Duration) -> Result<Header, ReadError> {
    let fut = async {
        let mut buf = vec![0u8; V2_MAX];
        let mut have = 0;
        loop {
            let n = conn
                .peek_more(&mut buf, have)
                .await
                .map_err(ReadError::Io)?;
            if n == 0 {
                return Err(ReadError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before the PROXY header",
                )));
            }
            match parse(&buf[..n]) {
                Ok(Some((h, len))) => {
                    conn.consume(len).map_err(ReadError::Io)?;
                    return Ok(h);
                }
                Ok(None) if n == buf.len() => {
                    return Err(ReadError::Invalid("PROXY header too long".into()))
                }
                Ok(None) => have = n,
                Err(m) => return Err(ReadError::Invalid(m)),
            }
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or(Err(ReadError::TimedOut))
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
    fn v1_is_parsed_strictly() {
        let ok = |s: &str| parse(s.as_bytes()).map(|r| r.map(|(h, _)| h));
        assert_eq!(
            ok("PROXY UNKNOWN ignored stuff\r\n").unwrap(),
            Some(Header::Local)
        );
        assert!(ok("PROXY TCP6 2001:db8::1 ::1 1 65535\r\n")
            .unwrap()
            .is_some());
        for bad in [
            // A family that does not match its addresses.
            "PROXY TCP4 2001:db8::1 ::1 1 2\r\n",
            "PROXY TCP6 192.0.2.1 192.0.2.2 1 2\r\n",
            // Ports: signs, too large, empty.
            "PROXY TCP4 192.0.2.1 192.0.2.2 +1 2\r\n",
            "PROXY TCP4 192.0.2.1 192.0.2.2 65536 2\r\n",
            "PROXY TCP4 192.0.2.1 192.0.2.2  2\r\n",
            // Double spaces, missing or extra fields, another protocol.
            "PROXY  TCP4 192.0.2.1 192.0.2.2 1 2\r\n",
            "PROXY TCP4 192.0.2.1 192.0.2.2 1\r\n",
            "PROXY TCP4 192.0.2.1 192.0.2.2 1 2 3\r\n",
            "PROXY UDP4 192.0.2.1 192.0.2.2 1 2\r\n",
            "PROXY TCP4 192.0.2.01 192.0.2.2 1 2\r\n",
        ] {
            assert!(ok(bad).is_err(), "accepted {bad:?}");
        }
        // The line is at most 107 bytes with its CRLF, found or not.
        let long = format!("PROXY UNKNOWN {}\r\n", "x".repeat(92));
        assert_eq!(long.len(), 108);
        assert!(ok(&long).is_err());
        assert!(ok(&long[..long.len() - 1].replace('x', "y")).is_err());
        let fits = format!("PROXY UNKNOWN {}\r\n", "x".repeat(91));
        assert_eq!(ok(&fits).unwrap(), Some(Header::Local));
        assert_eq!(ok(&fits[..50]).unwrap(), None);
    }

    #[test]
    fn v2_is_parsed_strictly() {
        let v4 = |ver_cmd: u8, fam: u8, len: u16| {
            let mut h = V2_SIG.to_vec();
            h.extend([ver_cmd, fam]);
            h.extend(len.to_be_bytes());
            h.extend(vec![7u8; len as usize]);
            h
        };
        assert!(matches!(
            parse(&v4(0x21, 0x11, 12)),
            Ok(Some((Header::Proxy { .. }, 28)))
        ));
        // TLVs after the addresses are skipped.
        assert!(matches!(
            parse(&v4(0x21, 0x11, 40)),
            Ok(Some((Header::Proxy { .. }, 56)))
        ));
        // LOCAL ignores the addresses; PROXY with UNSPEC or UNIX uses the connection's own.
        assert_eq!(
            parse(&v4(0x20, 0x00, 0)).unwrap(),
            Some((Header::Local, 16))
        );
        assert_eq!(
            parse(&v4(0x21, 0x00, 0)).unwrap(),
            Some((Header::Local, 16))
        );
        assert_eq!(
            parse(&v4(0x21, 0x31, 216)).unwrap(),
            Some((Header::Local, 232))
        );
        // A partial signature waits for more.
        assert_eq!(parse(&V2_SIG[..5]).unwrap(), None);
        for (what, bad) in [
            ("command 2", v4(0x22, 0x11, 12)),
            ("command 15", v4(0x2f, 0x11, 12)),
            ("version 1", v4(0x11, 0x11, 12)),
            ("family 4", v4(0x21, 0x41, 12)),
            ("protocol 3", v4(0x21, 0x13, 12)),
            ("short IPv4 block", v4(0x21, 0x11, 8)),
            ("short IPv6 block", v4(0x21, 0x21, 12)),
            ("too long", v4(0x21, 0x11, 600)),
        ] {
            assert!(parse(&bad).is_err(), "accepted {what}");
        }
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
