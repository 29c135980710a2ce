//! Property tests of the PROXY protocol parser (issue 14: no network input may panic):
//! `activate::proxyproto::parse` on random bytes, on v1 lines with every field mutated
//! (protocols, addresses, ports, separators, line ends, lengths around the 107-byte limit)
//! and on v2 headers with every byte and the length field mutated, truncated at every byte.
//!
//! Properties: no panic; a header that is taken has a length within the bytes given (the
//! length its own fields say, for v2); a v1 header is taken only up to its CRLF and its
//! addresses are the ones written; what `header()` writes parses back to the same addresses,
//! and every prefix of it (past v2's 12-byte signature) asks for more bytes; a refusal has a
//! message.
//!
//! `cargo test` runs a fast subset; `scripts/props` runs 100,000 cases per property.

#[path = "../../bulkhead-sys/tests/props/support.rs"]
mod support;

use bulkhead::activate::proxyproto::{header, parse, Header};
use bulkhead::plan::socket::ProxyVersion;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use support::{check, ensure};

const SUITE: &str = "proxy";
const REGRESSIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/proptest-regressions/props_proxy.txt"
);
const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// What holds for any input.
fn sane(buf: &[u8]) -> Result<(), String> {
    match parse(buf) {
        Ok(Some((h, len))) => {
            ensure(len <= buf.len() && len >= 8, || {
                format!("took {len} of {} bytes: {h:?}", buf.len())
            })?;
            if buf.starts_with(V2_SIG) {
                let body = u16::from_be_bytes([buf[14], buf[15]]) as usize;
                ensure(len == 16 + body, || {
                    format!("v2 took {len}, says 16 + {body}")
                })
            } else {
                ensure(
                    buf[..len].ends_with(b"\r\n") && buf.starts_with(b"PROXY "),
                    || {
                        format!(
                            "v1 took {len} bytes: {:?}",
                            String::from_utf8_lossy(&buf[..len])
                        )
                    },
                )?;
                ensure(!buf[..len - 2].windows(2).any(|w| w == b"\r\n"), || {
                    "v1 took more than its first line".into()
                })
            }
        }
        Ok(None) => ensure(buf.len() < 536, || {
            format!(
                "asks for more than the 536 bytes a reader holds ({})",
                buf.len()
            )
        }),
        Err(m) => ensure(!m.is_empty(), || "a refusal without a message".into()),
    }
}

fn addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(Ipv4Addr::from(ip).into(), p)),
        (any::<[u16; 8]>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(Ipv6Addr::from(ip).into(), p)),
    ]
}

#[test]
fn random_bytes() {
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..600),
        (
            prop::sample::select(vec![
                &b"PROXY "[..],
                &b"PROXY TCP4 "[..],
                &V2_SIG[..],
                &b"\r\n\r\n"[..]
            ]),
            prop::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(p, t)| [p, &t[..]].concat()),
    ];
    check(SUITE, "random bytes", REGRESSIONS, bytes, |b| sane(&b));
}

#[test]
fn v1_lines() {
    let ip = prop_oneof![
        any::<[u8; 4]>().prop_map(|a| Ipv4Addr::from(a).to_string()),
        any::<[u16; 8]>().prop_map(|a| Ipv6Addr::from(a).to_string()),
        prop::sample::select(vec![
            "",
            "1.2.3",
            "256.0.0.1",
            "01.2.3.4",
            "::",
            "::ffff:1.2.3.4",
            "fe80::1%eth0",
            "[::1]",
            "1.2.3.4.5",
            "a",
            "١.٢.٣.٤",
            "0x7f.0.0.1",
            "255.255.255.255",
            "0000:0000:0000:0000:0000:0000:0000:00001",
        ])
        .prop_map(str::to_string),
        "[0-9a-f:.]{0,50}",
    ];
    let port = prop_oneof![
        any::<u16>().prop_map(|p| p.to_string()),
        prop::sample::select(vec![
            "0",
            "65535",
            "65536",
            "-1",
            "+1",
            "08",
            "99999999999999999999",
            "",
            " ",
            "1e3"
        ])
        .prop_map(str::to_string),
        "[0-9]{0,30}",
    ];
    let proto = prop::sample::select(vec![
        "TCP4", "TCP6", "UNKNOWN", "tcp4", "UDP4", "", "TCP4 ", "TCP",
    ]);
    let sep = prop::sample::select(vec![" ", " ", " ", "  ", "\t", ""]);
    let end = prop::sample::select(vec!["\r\n", "\r\n", "\n", "\r", "", "\r\n\r\n", "\n\r"]);
    let line = (
        proto,
        ip.clone(),
        ip,
        port.clone(),
        port,
        sep,
        end,
        "[ -~]{0,120}",
        0usize..130,
    )
        .prop_map(|(pr, s, d, sp, dp, sep, end, pad, cut)| {
            let mut b =
                format!("PROXY{sep}{pr}{sep}{s}{sep}{d}{sep}{sp}{sep}{dp}{end}{pad}").into_bytes();
            // Cut anywhere, around the 107-byte limit too.
            if cut < b.len() && cut % 3 == 0 {
                b.truncate(cut);
            }
            b
        });
    check(SUITE, "v1 lines", REGRESSIONS, line, |b| {
        sane(&b)?;
        if let Ok(Some((Header::Proxy { src, dst }, len))) = parse(&b) {
            // The addresses taken are the ones written.
            let text = String::from_utf8_lossy(&b[..len - 2]).to_string();
            let f: Vec<&str> = text.split(' ').collect();
            let written = |ip: &str, port: &str| -> Option<SocketAddr> {
                Some(SocketAddr::new(ip.parse().ok()?, port.parse().ok()?))
            };
            ensure(
                f.len() == 6
                    && written(f[2], f[4]) == Some(src)
                    && written(f[3], f[5]) == Some(dst),
                || format!("{text:?} -> {src} {dst}"),
            )?;
        }
        Ok(())
    });
}

#[test]
fn v2_headers() {
    let input = (
        prop::option::of((addr(), addr())),
        prop::collection::vec((0usize..60, any::<u8>()), 0..4),
        prop::option::of(prop_oneof![
            Just(0u16),
            Just(11),
            Just(12),
            Just(35),
            Just(36),
            Just(216),
            Just(520),
            Just(65535),
            any::<u16>()
        ]),
        prop::collection::vec(any::<u8>(), 0..80),
        prop::option::of(0usize..120),
    );
    check(
        SUITE,
        "v2 headers",
        REGRESSIONS,
        input,
        |(pair, flips, length, tail, cut)| {
            let (s, d) = pair.unzip();
            let mut b = header(ProxyVersion::V2, s, d);
            b.extend(&tail);
            for (i, v) in flips {
                if i < b.len() {
                    b[i] = v;
                }
            }
            if let (Some(l), true) = (length, b.len() >= 16) {
                b[14..16].copy_from_slice(&l.to_be_bytes());
            }
            if let Some(c) = cut {
                b.truncate(c);
            }
            sane(&b)
        },
    );
}

/// What bulkhead sends to its targets, it reads back; every prefix asks for more.
#[test]
fn headers_round_trip() {
    let input = (
        prop::sample::select(vec![ProxyVersion::V1, ProxyVersion::V2]),
        prop::option::of((addr(), addr())),
        prop::collection::vec(any::<u8>(), 0..40),
    );
    check(
        SUITE,
        "header() round trip",
        REGRESSIONS,
        input,
        |(v, pair, tail)| {
            let (s, d) = pair.unzip();
            let h = header(v, s, d);
            let mut buf = h.clone();
            buf.extend(&tail);
            let want = match (s, d) {
                (Some(s), Some(d)) if s.is_ipv4() == d.is_ipv4() => {
                    Header::Proxy { src: s, dst: d }
                }
                (Some(s), Some(d)) => Header::Proxy {
                    src: v6(s),
                    dst: v6(d),
                },
                _ => Header::Local,
            };
            let got = parse(&buf).map_err(|e| format!("{:?}: {e}", String::from_utf8_lossy(&h)))?;
            ensure(got == Some((want.clone(), h.len())), || {
                format!("{got:?}, want {want:?}")
            })?;
            for cut in 0..h.len() {
                let prefix = &h[..cut];
                let r = parse(prefix);
                // A v2 prefix shorter than the signature cannot be told from other bytes yet.
                let too_short = v == ProxyVersion::V2 && cut < V2_SIG.len();
                ensure(r == Ok(None) || too_short && r.is_err(), || {
                    format!("prefix of {cut} bytes of {h:?}: {r:?}")
                })?;
            }
            Ok(())
        },
    );
}

fn v6(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(ip) => SocketAddr::new(ip.to_ipv6_mapped().into(), a.port()),
        IpAddr::V6(_) => a,
    }
}
