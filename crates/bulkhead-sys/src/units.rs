//! systemd's value syntax: sizes, percentages, durations, CPU lists.
//!
//! Sizes with `K`, `M`, `G`, `T`, `P`, `E` use base 1024 for memory and base 1000 for
//! bandwidths, exactly as systemd's `parse_size()` does for the same directives.

use std::collections::BTreeSet;
use std::fmt;

/// A byte count or "no limit".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    Bytes(u64),
    Infinity,
}

impl Limit {
    pub fn bytes(self) -> Option<u64> {
        match self {
            Limit::Bytes(b) => Some(b),
            Limit::Infinity => None,
        }
    }
    /// The cgroup v2 spelling: a number or `max`.
    pub fn v2(self) -> String {
        match self {
            Limit::Bytes(b) => b.to_string(),
            Limit::Infinity => "max".into(),
        }
    }
    /// The cgroup v1 spelling: a number or `-1`.
    pub fn v1(self) -> String {
        match self {
            Limit::Bytes(b) => b.to_string(),
            Limit::Infinity => "-1".into(),
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Bytes(b) => write!(f, "{}", human_bytes(*b)),
            Limit::Infinity => f.write_str("infinity"),
        }
    }
}

/// A fraction as systemd and the plan spell it: at most three decimals, no trailing zeros
/// (`50`, `12.5`, `33.333`).
/// Text another user chose (a command line, a process name) made safe for one line of a
/// terminal or a log: control characters (newlines, escape sequences, C1 codes) are written
/// as escapes (`\n`, `\u{1b}`), so no one forges a line such as `bulkhead: error: ...` or
/// moves the cursor (issue 40 #13). A backslash is doubled, so the escapes are unambiguous.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() || c == '\\') {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Now in UTC as RFC 3339 to the second (`2026-12-06T02:31:07Z`): the stamp on a daemon's
/// lines where no journal adds one.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_text(secs)
}

/// `secs` after the epoch in UTC, as [`utc_now`] writes it.
pub fn utc_text(secs: u64) -> String {
    let (y, m, d, h, mi, se) = civil(secs);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{se:02}Z")
}

/// `secs` after the epoch as the UTC calendar: (year, month, day, hour, minute, second), by
/// the civil-from-days algorithm of Howard Hinnant's date library.
pub fn civil(secs: u64) -> (i64, i64, i64, u64, u64, u64) {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem / 60 % 60, rem % 60)
}

pub fn trim_float(f: f64) -> String {
    let s = format!("{f:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `1258291200` -> `1.17G`; exact multiples print without decimals (`1200M`).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 6] = [
        ("E", 1 << 60),
        ("P", 1 << 50),
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    let Some(i) = UNITS.iter().position(|(_, u)| b >= *u) else {
        return format!("{b}B");
    };
    // An exact multiple of this unit, or of a smaller one below 10000 (1200M, not 1.17G).
    for (suffix, unit) in &UNITS[i..] {
        if b.is_multiple_of(*unit) && b / unit < 10_000 {
            return format!("{}{}", b / unit, suffix);
        }
    }
    let (suffix, unit) = UNITS[i];
    // Two decimals rounded down: what is printed never exceeds the value, so it reads back
    // (rounding printed u64::MAX as "16.00E", which parse_size refuses as too large).
    // Integers: as f64, u64::MAX is 2^64 and would still print "16.00E".
    let hundredths = u128::from(b) * 100 / u128::from(unit);
    format!("{}.{:02}{suffix}", hundredths / 100, hundredths % 100)
}

/// Parse a number with an optional systemd suffix. `base` is 1024 or 1000.
pub fn parse_size(s: &str, base: u64) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size".into());
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let suffix = suffix.trim();
    if num.is_empty() {
        return Err(format!(
            "'{s}' is not a size (expected a number like 512M or 2G)"
        ));
    }
    let power = match suffix {
        "" | "B" => 0,
        "K" | "KiB" | "Ki" => 1,
        "M" | "MiB" | "Mi" => 2,
        "G" | "GiB" | "Gi" => 3,
        "T" | "TiB" | "Ti" => 4,
        "P" | "PiB" | "Pi" => 5,
        "E" | "EiB" | "Ei" => 6,
        other => {
            return Err(format!(
                "unknown size suffix '{other}' in '{s}' (use K, M, G, T, P or E)"
            ))
        }
    };
    let mult = (base as f64).powi(power);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (expected a number like 512M or 2G)"))?;
    let bytes = value * mult;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("'{s}' is too large"));
    }
    Ok(bytes as u64)
}

/// Parse `"42%"` or `"4.5%"` into a fraction (0.045). Returns `None` when `s` has no `%`.
pub fn parse_percent(s: &str) -> Option<Result<f64, String>> {
    let t = s.trim();
    let num = t.strip_suffix('%')?;
    Some(match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v / 100.0),
        _ => Err(format!("'{s}' is not a percentage (expected e.g. \"4%\")")),
    })
}

/// Parse a systemd time span: `100ms`, `1s`, `2min`, `1h 30min`, plain numbers are seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty time span".into());
    }
    let mut total = 0f64;
    let mut rest = t;
    while !rest.is_empty() {
        rest = rest.trim_start();
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(split);
        if num.is_empty() {
            return Err(format!(
                "'{s}' is not a time span (expected e.g. 100ms, 5s, 2min)"
            ));
        }
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.' || c == ' ')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let secs_per = match unit {
            "" | "s" | "sec" | "second" | "seconds" => 1.0,
            "us" | "usec" | "µs" => 1e-6,
            "ms" | "msec" => 1e-3,
            "ns" | "nsec" => 1e-9,
            "m" | "min" | "minute" | "minutes" => 60.0,
            "h" | "hr" | "hour" | "hours" => 3600.0,
            "d" | "day" | "days" => 86400.0,
            other => {
                return Err(format!(
                    "unknown time unit '{other}' in '{s}' (use us, ms, s, min, h or d)"
                ))
            }
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("'{s}' is not a time span"))?;
        total += v * secs_per;
        rest = next;
    }
    // Longer spans are not meant, and a deadline this far ahead would overflow a clock.
    if total.is_nan() || total > MAX_SPAN_SECS {
        return Err(format!("'{s}' is too long a time span (at most 100 years)"));
    }
    Ok(std::time::Duration::from_secs_f64(total))
}

/// The longest time span [`parse_duration`] takes: 100 years.
pub const MAX_SPAN_SECS: f64 = 100.0 * 365.25 * 86400.0;

/// A set of CPU or NUMA node numbers, as in `0-3,8,10-11`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(into = "String")]
pub struct IdSet(pub BTreeSet<u32>);

impl IdSet {
    /// The largest CPU or NUMA node number a set takes. Linux has at most 8192 CPUs
    /// (NR_CPUS) and 1024 nodes; the bound keeps a hostile list ("0-65536,65537-131073,...")
    /// from asking for billions of entries.
    pub const MAX_ID: u32 = 65535;

    pub fn parse(s: &str) -> Result<IdSet, String> {
        let mut set = BTreeSet::new();
        for part in s.split([',', ' ']).map(str::trim).filter(|p| !p.is_empty()) {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a, b),
                None => (part, part),
            };
            let a: u32 = a
                .trim()
                .parse()
                .map_err(|_| format!("'{part}' in '{s}' is not a number or range like 0-3"))?;
            let b: u32 = b
                .trim()
                .parse()
                .map_err(|_| format!("'{part}' in '{s}' is not a number or range like 0-3"))?;
            if b < a {
                return Err(format!("range '{part}' in '{s}' goes backwards"));
            }
            if b > Self::MAX_ID {
                return Err(format!(
                    "'{part}' in '{s}' goes past {}, the largest CPU or node number",
                    Self::MAX_ID
                ));
            }
            set.extend(a..=b);
        }
        Ok(IdSet(set))
    }
    pub fn is_subset(&self, other: &IdSet) -> bool {
        self.0.is_subset(&other.0)
    }
}

impl fmt::Display for IdSet {
    /// The kernel's compact form: `0-3,8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Vec::new();
        let mut it = self.0.iter().copied().peekable();
        while let Some(start) = it.next() {
            let mut end = start;
            // `checked_add`: u32::MAX ends a run (it has no successor to wrap to).
            while end
                .checked_add(1)
                .is_some_and(|next| it.peek() == Some(&next))
            {
                end = it.next().unwrap_or(end);
            }
            out.push(if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            });
        }
        f.write_str(&out.join(","))
    }
}

impl From<IdSet> for String {
    fn from(s: IdSet) -> String {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn another_users_text_cannot_forge_a_line() {
        assert_eq!(printable("postgres: idle"), "postgres: idle");
        assert_eq!(
            printable("x\nbulkhead: error: forged\u{1b}[2K\t\\"),
            "x\\nbulkhead: error: forged\\u{1b}[2K\\t\\\\"
        );
        assert_eq!(printable("\u{85}"), "\\u{85}");
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_text(1_796_524_267), "2026-12-06T02:31:07Z");
    }

    use super::*;

    #[test]
    fn sizes_follow_systemd() {
        assert_eq!(parse_size("1200M", 1024).unwrap(), 1200 << 20);
        assert_eq!(parse_size("1.5G", 1024).unwrap(), 3 << 29);
        assert_eq!(parse_size("10M", 1000).unwrap(), 10_000_000);
        assert_eq!(parse_size("4096", 1024).unwrap(), 4096);
        assert!(parse_size("12Q", 1024)
            .unwrap_err()
            .contains("unknown size suffix"));
        assert!(parse_size("lots", 1024).is_err());
    }

    #[test]
    fn percentages_and_durations() {
        assert_eq!(parse_percent("4%").unwrap().unwrap(), 0.04);
        assert!(parse_percent("4").is_none());
        assert!(parse_percent("x%").unwrap().is_err());
        assert_eq!(parse_duration("100ms").unwrap().as_millis(), 100);
        assert_eq!(parse_duration("1min 30s").unwrap().as_secs(), 90);
        // Spans too long for a clock are refused, not a panic (exit 134 before).
        for huge in [
            "99999999999999999999d",
            "1e999",
            &"9".repeat(400),
            "3651000d",
        ] {
            let e = parse_duration(huge);
            assert!(e.is_err(), "{huge}: {e:?}");
        }
        assert_eq!(parse_duration("36500d").unwrap().as_secs(), 36500 * 86400);
        assert_eq!(parse_duration("2").unwrap().as_secs(), 2);
        assert!(parse_duration("3 fortnights").is_err());
    }

    #[test]
    fn id_sets_round_trip() {
        let s = IdSet::parse("0-3,8,5, 4").unwrap();
        assert_eq!(s.to_string(), "0-5,8");
        assert!(IdSet::parse("3-1").is_err());
        assert!(IdSet::parse("a").is_err());
        // Issue 14: a hostile list is bounded, and the largest id prints (it overflowed).
        for huge in ["0-4294967295", "65536", "0-65535,65536-131071"] {
            let e = IdSet::parse(huge).unwrap_err();
            assert!(e.contains("largest CPU or node number"), "{huge}: {e}");
        }
        assert_eq!(
            IdSet::parse("65534-65535").unwrap().to_string(),
            "65534-65535"
        );
        let top = IdSet([0, u32::MAX - 1, u32::MAX].into_iter().collect());
        assert_eq!(top.to_string(), "0,4294967294-4294967295");
        assert_eq!(human_bytes(1200 << 20), "1200M");
        assert_eq!(human_bytes(1 << 30), "1G");
        // Issue 14: printed sizes read back (u64::MAX printed as "16.00E", too large).
        assert_eq!(human_bytes(u64::MAX), "15.99E");
        assert!(parse_size(&human_bytes(u64::MAX), 1024).is_ok());
        assert_eq!(human_bytes((2 << 30) - 1), "1.99G");
    }
}
