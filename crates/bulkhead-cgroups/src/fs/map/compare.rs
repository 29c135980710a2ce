//! Comparing what a control file holds with what the plan wants, the way the kernel
//! writes it back (`max`, `-1`, lists, keyed lines).

use super::{Cmp, Reset};
use bulkhead_sys::units::IdSet;

/// Compare a control file's content with a wanted value.
pub fn same(cmp: Cmp, current: &str, wanted: &str) -> bool {
    let (c, w) = (current.trim(), wanted.trim());
    match cmp {
        Cmp::Exact => c == w,
        Cmp::Tokens => c.split_whitespace().eq(w.split_whitespace()),
        Cmp::Set => match (IdSet::parse(c), IdSet::parse(w)) {
            (Ok(a), Ok(b)) => a == b,
            _ => c == w,
        },
        Cmp::Number => number(c) == number(w),
    }
}

/// `max`, `-1` and anything at or above 2^62 (v1's page-counter maximum) mean "no limit".
fn number(s: &str) -> Option<u64> {
    match s {
        "max" | "-1" => Some(u64::MAX),
        _ => s
            .parse::<u64>()
            .ok()
            .map(|n| if n >= 1 << 62 { u64::MAX } else { n }),
    }
}

/// The lines of a keyed file, `KEY -> rest`.
pub fn keyed_lines(content: &str) -> Vec<(String, String)> {
    content
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let (k, rest) = l.split_once(char::is_whitespace)?;
            Some((k.to_string(), rest.trim().to_string()))
        })
        .collect()
}

/// Whether a keyed line's current value equals the wanted one; a missing line equals the
/// reset value.
pub fn same_line(reset: Reset, current: Option<&str>, wanted: &str) -> bool {
    let empty = match reset {
        Reset::IoMax => "rbps=max wbps=max riops=max wiops=max",
        Reset::Zero => "0",
        Reset::Default => "",
        Reset::Latency => "target=max",
    };
    let cur = current.unwrap_or(empty);
    cur.split_whitespace().eq(wanted.split_whitespace())
}

pub fn reset_line(reset: Reset, key: &str) -> String {
    match reset {
        Reset::IoMax => format!("{key} rbps=max wbps=max riops=max wiops=max"),
        Reset::Zero => format!("{key} 0"),
        Reset::Default => format!("{key} default"),
        Reset::Latency => format!("{key} target=max"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons() {
        assert!(same(Cmp::Number, "9223372036854771712", "-1"));
        assert!(same(Cmp::Number, "max", "-1"));
        assert!(!same(Cmp::Number, "1024", "1025"));
        assert!(same(Cmp::Set, "0,1", "0-1"));
        assert!(same(Cmp::Tokens, "max 100000\n", "max  100000"));
        assert!(same_line(
            Reset::IoMax,
            None,
            "rbps=max wbps=max riops=max wiops=max"
        ));
        assert!(same_line(Reset::Zero, Some("1000"), "1000"));
    }
}
