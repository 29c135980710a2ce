//! RESP (the Redis protocol): requests encoded, replies parsed by hand (simple strings,
//! errors, integers, bulk strings including nil, arrays), and the PRNG that picks keys.

pub(super) fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

pub(super) fn decimal_len(mut n: u64) -> u64 {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

/// `$<len>\r\nkey:<n>\r\n`
pub(super) fn push_key(buf: &mut Vec<u8>, key: u64) {
    buf.push(b'$');
    push_u64(buf, 4 + decimal_len(key));
    buf.extend_from_slice(b"\r\nkey:");
    push_u64(buf, key);
    buf.extend_from_slice(b"\r\n");
}

pub(super) fn encode_get(buf: &mut Vec<u8>, key: u64) {
    buf.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
    push_key(buf, key);
}

pub(super) fn encode_set(buf: &mut Vec<u8>, key: u64, value: &[u8]) {
    buf.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
    push_key(buf, key);
    buf.push(b'$');
    push_u64(buf, value.len() as u64);
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReplyKind {
    /// `+`, `:`, `$`, `*` (nil bulk and nil array included).
    Value,
    /// `-`
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reply {
    pub kind: ReplyKind,
    /// Bytes the reply takes in the buffer.
    pub len: usize,
}

/// Parses one reply at the start of `buf`: `Ok(None)` if it is not complete yet, `Err` if the
/// bytes are not RESP.
pub(super) fn parse_reply(buf: &[u8]) -> Result<Option<Reply>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    if nl < 1 || buf[nl - 1] != b'\r' {
        return Err("RESP line not terminated by CRLF".to_string());
    }
    let line = &buf[1..nl - 1];
    let after = nl + 1;
    match kind {
        b'+' | b':' => Ok(Some(Reply {
            kind: ReplyKind::Value,
            len: after,
        })),
        b'-' => Ok(Some(Reply {
            kind: ReplyKind::Error,
            len: after,
        })),
        b'$' => {
            let n = parse_int(line)?;
            if n < 0 {
                return Ok(Some(Reply {
                    kind: ReplyKind::Value,
                    len: after,
                }));
            }
            let total = after + n as usize + 2;
            if buf.len() < total {
                return Ok(None);
            }
            if &buf[total - 2..total] != b"\r\n" {
                return Err("RESP bulk string not terminated by CRLF".to_string());
            }
            Ok(Some(Reply {
                kind: ReplyKind::Value,
                len: total,
            }))
        }
        b'*' => {
            let n = parse_int(line)?;
            let mut len = after;
            for _ in 0..n.max(0) {
                match parse_reply(&buf[len..])? {
                    Some(item) => len += item.len,
                    None => return Ok(None),
                }
            }
            Ok(Some(Reply {
                kind: ReplyKind::Value,
                len,
            }))
        }
        other => Err(format!("unexpected RESP type byte {other:#04x}")),
    }
}

pub(super) fn parse_int(line: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            format!(
                "bad RESP length {:?}",
                String::from_utf8_lossy(line).into_owned()
            )
        })
}

/// The message of an error reply (`-ERR ...\r\n`).
pub(super) fn error_text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply.get(1..).unwrap_or_default())
        .trim_end()
        .to_string()
}

/// A small PRNG: SplitMix64 (Steele, Lea, Flood), plenty for picking keys and operations.
pub(super) struct SplitMix64(u64);

impl SplitMix64 {
    pub(super) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(super) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, n) (multiply-shift; the bias is negligible for key spaces < 2^40).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_requests() {
        let mut b = Vec::new();
        encode_get(&mut b, 42);
        assert_eq!(b, b"*2\r\n$3\r\nGET\r\n$6\r\nkey:42\r\n");
        b.clear();
        encode_set(&mut b, 0, b"abc");
        assert_eq!(b, b"*3\r\n$3\r\nSET\r\n$5\r\nkey:0\r\n$3\r\nabc\r\n");
        b.clear();
        push_u64(&mut b, u64::MAX);
        assert_eq!(b, u64::MAX.to_string().as_bytes());
        assert_eq!(decimal_len(9), 1);
        assert_eq!(decimal_len(10), 2);
        assert_eq!(decimal_len(999_999), 6);
    }

    #[test]
    fn parses_replies() {
        let v = |len| {
            Ok(Some(Reply {
                kind: ReplyKind::Value,
                len,
            }))
        };
        assert_eq!(parse_reply(b"+OK\r\n"), v(5));
        assert_eq!(parse_reply(b":12\r\nrest"), v(5));
        assert_eq!(parse_reply(b"$-1\r\n"), v(5));
        assert_eq!(parse_reply(b"$3\r\nabc\r\n+OK"), v(9));
        assert_eq!(parse_reply(b"*2\r\n$1\r\na\r\n:1\r\n"), v(15));
        assert_eq!(parse_reply(b"*-1\r\n"), v(5));
        assert_eq!(
            parse_reply(b"-ERR x\r\n"),
            Ok(Some(Reply {
                kind: ReplyKind::Error,
                len: 8
            }))
        );
        assert_eq!(error_text(b"-ERR x\r\n"), "ERR x");
        for partial in [
            &b""[..],
            b"+OK",
            b"+OK\r",
            b"$3\r\nab",
            b"$3\r\nabc\r",
            b"*2\r\n:1\r\n",
        ] {
            assert_eq!(parse_reply(partial), Ok(None), "{partial:?}");
        }
        assert!(parse_reply(b"?x\r\n").is_err());
        assert!(parse_reply(b"$x\r\n").is_err());
        assert!(parse_reply(b"$3\r\nabcd\r\n").is_err());
    }

    #[test]
    fn prng_is_uniform_enough() {
        let mut r = SplitMix64::new(1);
        let mut counts = [0u32; 10];
        let mut gets = 0;
        for _ in 0..100_000 {
            counts[r.below(10) as usize] += 1;
            if r.next_f64() < 0.9 {
                gets += 1;
            }
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
        assert!((89_000..91_000).contains(&gets), "{gets}");
    }
}
