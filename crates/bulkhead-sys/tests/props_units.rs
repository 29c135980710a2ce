//! Property tests of the unit parsers (issue 14: no input may panic): sizes, percentages,
//! time spans, CPU and node lists, huge page sizes and /proc/meminfo fields. Inputs are
//! random text and near-valid numbers: limits of u64, i64 and f64, huge exponents, every
//! suffix, unicode, whitespace, signs, NaN and infinity. Properties: no panic; a refusal
//! names the input; an acceptance is the right number; printed values parse back equal.
//!
//! `cargo test` runs a fast subset; `scripts/props` runs 100,000 cases per property.

#[path = "props/support.rs"]
mod support;

use bulkhead_sys::host::{meminfo_field, parse_page_size};
use bulkhead_sys::units::{
    human_bytes, parse_duration, parse_percent, parse_size, IdSet, MAX_SPAN_SECS,
};
use proptest::prelude::*;
use support::{check, ensure};

const SUITE: &str = "units";
const REGRESSIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/proptest-regressions/props_units.txt"
);

/// Numbers as text, from the ordinary to the absurd.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (0u32..100_000).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        any::<f64>().prop_map(|f| format!("{f:e}")),
        (any::<u32>(), 0u32..20).prop_map(|(a, b)| format!("{a}.{b}")),
        "[0-9]{15,40}",
        "[0-9]{0,4}\\.[0-9]{0,4}",
        "[0-9.]{1,8}",
        prop::sample::select(vec![
            "18446744073709551615",
            "18446744073709551616",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "4294967295",
            "4294967296",
            "99999999999999999999",
            "1e308",
            "1e309",
            "1e999",
            "1.7976931348623157e308",
            "5e-324",
            "NaN",
            "nan",
            "inf",
            "-inf",
            "infinity",
            "-0",
            "+1",
            "-1",
            "0x10",
            "0o17",
            "1_000",
            ".",
            "..",
            "1.",
            ".5",
            "1..2",
            "",
            "٣",
            "１",
        ])
        .prop_map(str::to_string),
    ]
}

fn size_suffix() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "", "B", "K", "KiB", "Ki", "M", "MiB", "Mi", "G", "GiB", "Gi", "T", "TiB", "Ti", "P",
            "PiB", "Pi", "E", "EiB", "Ei", "Z", "k", "kB", "KB", "MB", "GB", "b", "%", " K", "K ",
            "KK", "\u{0}", "µ", "e5",
        ])
        .prop_map(str::to_string),
        "\\PC{0,3}",
    ]
}

fn time_unit() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "",
            "s",
            "sec",
            "second",
            "seconds",
            "us",
            "usec",
            "µs",
            "ms",
            "msec",
            "ns",
            "nsec",
            "m",
            "min",
            "minute",
            "minutes",
            "h",
            "hr",
            "hour",
            "hours",
            "d",
            "day",
            "days",
            "w",
            "y",
            "fortnights",
            "S",
            "Ms",
            "e9",
            "µ",
        ])
        .prop_map(str::to_string),
        "\\PC{0,3}",
    ]
}

fn space() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "", "", "", " ", "  ", "\t", "\n", "\u{a0}", "\u{3000}",
    ])
    .prop_map(str::to_string)
}

/// Anything at all, near-valid text much of the time.
fn any_text(near: impl Strategy<Value = String> + 'static) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => near,
        1 => any::<String>(),
        1 => "\\PC{0,40}",
        1 => "[0-9a-zA-Z .,%:+-]{0,30}",
    ]
}

fn size_text() -> impl Strategy<Value = String> {
    any_text(
        (space(), number(), space(), size_suffix(), space())
            .prop_map(|(a, n, b, s, c)| format!("{a}{n}{b}{s}{c}")),
    )
}

fn duration_text() -> impl Strategy<Value = String> {
    let part = (number(), space(), time_unit()).prop_map(|(n, s, u)| format!("{n}{s}{u}"));
    any_text(
        (space(), prop::collection::vec(part, 1..5), space())
            .prop_map(|(a, parts, b)| format!("{a}{}{b}", parts.join(" "))),
    )
}

fn id_item() -> impl Strategy<Value = String> {
    let n = prop_oneof![
        3 => (0u32..300).prop_map(|n| n.to_string()),
        1 => any::<u32>().prop_map(|n| n.to_string()),
        1 => number(),
    ];
    prop_oneof![
        2 => n.clone(),
        2 => (n.clone(), n.clone()).prop_map(|(a, b)| format!("{a}-{b}")),
        1 => (0u32..70_000, 0u32..70_000).prop_map(|(a, b)| format!("{a}-{b}")),
        1 => prop::sample::select(vec![
            "0-4294967295", "4294967295", "4294967295-4294967295", "4294967296", "5-1", "-",
            "1-", "-1", "1-2-3", "", " ", "0-65535", "0-65536", "65535-131071", "a", "١",
        ])
        .prop_map(str::to_string),
    ]
}

fn id_list() -> impl Strategy<Value = String> {
    let sep = prop::sample::select(vec![",", ",", " ", ", ", ",,", "\t"]);
    any_text(
        prop::collection::vec((id_item(), sep), 0..12).prop_map(|items| {
            items
                .into_iter()
                .map(|(i, s)| format!("{i}{s}"))
                .collect::<String>()
        }),
    )
}

/// A refusal quotes what it refused (or says the input was empty).
fn names_input(input: &str, msg: &str) -> Result<(), String> {
    ensure(
        !msg.is_empty() && (input.trim().is_empty() || msg.contains(input.trim())),
        || format!("the error for {input:?} does not name it: {msg:?}"),
    )
}

#[test]
fn sizes() {
    check(
        SUITE,
        "parse_size",
        REGRESSIONS,
        (size_text(), prop::bool::ANY),
        |(s, base1024)| {
            let base = if base1024 { 1024 } else { 1000 };
            match parse_size(&s, base) {
                Ok(_) => Ok(()),
                Err(m) => names_input(&s, &m),
            }
        },
    );
}

/// Exact sizes: a whole number with a suffix is that many units, and one too large for a
/// u64 is refused.
#[test]
fn sizes_are_exact() {
    let suffixes = ["", "K", "M", "G", "T", "P", "E"];
    check(
        SUITE,
        "parse_size exact",
        REGRESSIONS,
        (any::<u64>(), 0usize..7, prop::bool::ANY, 0u32..64),
        |(n, p, base1024, shift)| {
            let n = n >> shift;
            let base: u64 = if base1024 { 1024 } else { 1000 };
            let text = format!("{n}{}", suffixes[p]);
            let want = (n as u128) * (base as u128).pow(p as u32);
            let got = parse_size(&text, base);
            // Above 2^53 the float in between may round; below it every value is exact.
            if want < (1u128 << 53) {
                ensure(got == Ok(want as u64), || {
                    format!("{text}: {got:?}, want {want}")
                })
            } else if want > u64::MAX as u128 {
                ensure(got.is_err(), || format!("{text}: {got:?}, want too large"))
            } else {
                Ok(())
            }
        },
    );
}

/// `human_bytes` prints what `parse_size` reads: exactly for whole units, otherwise never
/// more than the value and within the two printed decimals.
#[test]
fn sizes_round_trip() {
    check(
        SUITE,
        "human_bytes round trip",
        REGRESSIONS,
        prop_oneof![
            any::<u64>(),
            (0u64..10_000, 0u32..7).prop_map(|(n, p)| n << (10 * p).min(63)),
            Just(u64::MAX),
        ],
        |b| {
            let h = human_bytes(b);
            let back = parse_size(&h, 1024).map_err(|e| format!("{h} (from {b}): {e}"))?;
            if h.contains('.') {
                // Rounded down to two decimals of a unit the value has at least once, and
                // parse_size rounds the product down to whole bytes (1075 -> 1.04K -> 1064).
                let rel = (b - (back + 1).min(b)) as f64 / b as f64;
                ensure(back <= b && rel < 0.01, || format!("{b} -> {h} -> {back}"))
            } else {
                ensure(back == b, || format!("{b} -> {h} -> {back}"))
            }
        },
    );
}

#[test]
fn percentages() {
    let text = any_text(
        (
            space(),
            number(),
            space(),
            prop::sample::select(vec!["%", "%", "", "%%", " %"]),
        )
            .prop_map(|(a, n, b, p)| format!("{a}{n}{b}{p}")),
    );
    check(
        SUITE,
        "parse_percent",
        REGRESSIONS,
        text,
        |s| match parse_percent(&s) {
            None => ensure(!s.trim().ends_with('%'), || format!("{s:?}: no percentage")),
            Some(Ok(f)) => ensure(f.is_finite() && f >= 0.0, || format!("{s:?} -> {f}")),
            Some(Err(m)) => names_input(&s, &m),
        },
    );
}

#[test]
fn durations() {
    check(
        SUITE,
        "parse_duration",
        REGRESSIONS,
        duration_text(),
        |s| match parse_duration(&s) {
            Ok(d) => ensure(d.as_secs_f64() <= MAX_SPAN_SECS, || {
                format!("{s:?} -> {d:?}, longer than 100 years")
            }),
            Err(m) => names_input(&s, &m),
        },
    );
}

/// Whole units read as what they say (within a nanosecond of float rounding), and spans
/// past 100 years are refused rather than overflowing a clock.
#[test]
fn durations_are_exact() {
    let units: [(&str, u128); 7] = [
        ("ns", 1),
        ("us", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("min", 60_000_000_000),
        ("h", 3_600_000_000_000),
        ("d", 86_400_000_000_000),
    ];
    check(
        SUITE,
        "parse_duration exact",
        REGRESSIONS,
        (any::<u64>(), 0usize..7, 0u32..64),
        |(n, u, shift)| {
            let n = n >> shift;
            let (unit, ns) = units[u];
            let text = format!("{n}{unit}");
            let want = n as u128 * ns;
            let max = (MAX_SPAN_SECS * 1e9) as u128;
            match parse_duration(&text) {
                Ok(d) => {
                    let got = d.as_nanos();
                    // f64 has 53 bits: allow its relative rounding, and 1ns of truncation.
                    let slack = want / (1u128 << 50) + 1;
                    ensure(want <= max + slack && got.abs_diff(want) <= slack, || {
                        format!("{text}: {got}ns, want {want}ns")
                    })
                }
                Err(m) => ensure(want >= max - max / (1 << 40), || {
                    format!("{text} refused: {m}")
                }),
            }
        },
    );
}

#[test]
fn id_lists() {
    check(
        SUITE,
        "IdSet::parse",
        REGRESSIONS,
        id_list(),
        |s| match IdSet::parse(&s) {
            Ok(set) => {
                let printed = set.to_string();
                let back = IdSet::parse(&printed)
                    .map_err(|e| format!("{s:?} printed as {printed:?}: {e}"))?;
                ensure(back == set, || format!("{s:?} -> {printed:?} -> {back:?}"))?;
                ensure(set.0.iter().all(|&i| i <= IdSet::MAX_ID), || {
                    format!("{s:?} holds an id above {}", IdSet::MAX_ID)
                })
            }
            Err(m) => names_input(&s, &m),
        },
    );
}

/// Any set of ids prints in the kernel's compact form and reads back equal.
#[test]
fn id_sets_round_trip() {
    let ids = prop_oneof![
        prop::collection::btree_set(0u32..300, 0..40),
        prop::collection::btree_set(0..=IdSet::MAX_ID, 0..40),
        prop::collection::btree_set(IdSet::MAX_ID - 40..=IdSet::MAX_ID, 0..40),
    ];
    check(SUITE, "IdSet round trip", REGRESSIONS, ids, |ids| {
        let set = IdSet(ids);
        let printed = set.to_string();
        let back = IdSet::parse(&printed).map_err(|e| format!("{printed:?}: {e}"))?;
        ensure(back == set, || format!("{printed:?} -> {back:?}"))
    });
}

#[test]
fn page_sizes() {
    let text = any_text(
        (
            number(),
            size_suffix(),
            prop::sample::select(vec!["", "iB", "B"]),
        )
            .prop_map(|(n, s, b)| format!("{n}{s}{b}")),
    );
    check(SUITE, "parse_page_size", REGRESSIONS, text, |s| {
        if let Some(b) = parse_page_size(&s) {
            ensure(b == 0 || b >= 1024, || format!("{s:?} -> {b}"))?;
        }
        Ok(())
    });
}

#[test]
fn meminfo_fields() {
    let line = (
        prop::sample::select(vec!["MemTotal", "MemFree", "Hugepagesize", "X"]),
        prop::sample::select(vec![":", ": ", ":\t", " :", ""]),
        number(),
        prop::sample::select(vec![" kB", " kB", "", " MB", " kB extra"]),
    )
        .prop_map(|(k, c, n, u)| format!("{k}{c}{n}{u}"));
    let text = any_text(prop::collection::vec(line, 0..6).prop_map(|l| l.join("\n")));
    check(SUITE, "meminfo_field", REGRESSIONS, text, |t| {
        let _ = meminfo_field(&t, "MemTotal");
        Ok(())
    });
}
