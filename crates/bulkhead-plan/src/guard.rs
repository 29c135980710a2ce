//! The `[guard]` section: the slice `bulkhead guard` protects, the slices that yield to it
//! (sideloads), and how it decides.
//!
//! ```toml
//! [guard]
//! protect = "db-server"               # the slice whose service must keep its speed
//! sideloads = ["db-helper"]           # slices that give way when it suffers
//! period = "100ms"                    # the control loop
//! calibration = "20s"                 # baseline of every signal, sideloads held
//! cpu_floor = "5%"                    # a sideload never gets less than this (of one CPU)
//! quota_period = "10ms"               # the cpu.max period of a throttled sideload
//! max_frozen = "2s"                   # the longest a sideload stays frozen at once
//! stall = "5%"                        # extra stall (above the baseline) that counts as harm
//! io_keep = "40%"                     # a throttled sideload keeps this much of its I/O
//! cpu_keep = "10%"                    # a sideload starved of CPU this long gets this much
//! keep_after = "5s"                   #   (of one CPU; off unless set)
//! probe = "redis:127.0.0.1:6379"      # optional: PING round trips; or "tcp:HOST:PORT"
//! ```

use crate::values::Ctx;
use crate::{Loc, SliceName, Source};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::units::{parse_duration, parse_percent};
use std::net::SocketAddr;
use std::time::Duration;
use toml::de::DeValue;
use toml::Spanned;

/// How the service is probed, when it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "addr", rename_all = "lowercase")]
pub enum Probe {
    /// A TCP connect: the time to an accepted connection.
    Tcp(SocketAddr),
    /// A Redis PING on a kept connection: the round trip.
    Redis(SocketAddr),
}

/// As the plan spells it: `tcp:127.0.0.1:5432`, `redis:127.0.0.1:6379`.
impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Probe::Tcp(a) => write!(f, "tcp:{a}"),
            Probe::Redis(a) => write!(f, "redis:{a}"),
        }
    }
}

/// The `[guard]` section, checked.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GuardSpec {
    #[serde(skip)]
    pub loc: Loc,
    pub protect: SliceName,
    pub sideloads: Vec<SliceName>,
    pub period: Duration,
    pub calibration: Duration,
    /// The least CPU a sideload keeps, as a fraction of one CPU (0.05 for "5%").
    pub cpu_floor: f64,
    pub quota_period: Duration,
    pub max_frozen: Duration,
    /// Extra stall share above the baseline that counts as harm (0.05 for "5%").
    pub stall: f64,
    /// The share of its unthrottled I/O a throttled sideload keeps at least (0.40 for
    /// "40%"): the helper's progress floor. A closed-loop database that saturates the disk
    /// on its own is served first with a few percent ("5%"); at part load a larger share
    /// keeps the helper's work moving.
    pub io_keep: f64,
    /// The progress floor on CPU (0.10 for "10%" of one CPU; `None`: off): a sideload whose
    /// tasks wait for a CPU most of the time while it runs less than this, for `keep_after`,
    /// leaves idle scheduling for CPUWeight=100 capped at this quota until it stops waiting.
    /// What keeps a backup moving beside a server that saturates the CPUs.
    pub cpu_keep: Option<f64>,
    pub keep_after: Duration,
    pub probe: Option<Probe>,
}

const KEYS: &[&str] = &[
    "protect",
    "sideloads",
    "period",
    "calibration",
    "cpu_floor",
    "quota_period",
    "max_frozen",
    "stall",
    "io_keep",
    "cpu_keep",
    "keep_after",
    "probe",
];

/// The readers only `[guard]` needs, beside the shared ones (`string`, `err`).
impl Ctx<'_> {
    fn slice(&mut self, loc: Loc, key: &str, s: &str) -> Option<SliceName> {
        match SliceName::parse(s) {
            Ok(n) => Some(n),
            Err(m) => {
                self.err(loc, key, format!("invalid slice name: {m}"), "");
                None
            }
        }
    }

    /// A time span within `lo..=hi`.
    fn span(
        &mut self,
        loc: Loc,
        key: &str,
        v: &DeValue<'_>,
        lo: Duration,
        hi: Duration,
    ) -> Option<Duration> {
        let s = self.string(loc, key, v)?;
        match parse_duration(&s) {
            Ok(d) if d >= lo && d <= hi => Some(d),
            Ok(_) => {
                self.err(
                    loc,
                    key,
                    format!("{key} = {s} is outside {lo:?}..{hi:?}"),
                    "",
                );
                None
            }
            Err(m) => {
                self.err(
                    loc,
                    key,
                    format!("{key} = {s}: {m}"),
                    "write e.g. \"100ms\" or \"20s\"",
                );
                None
            }
        }
    }

    /// A percentage within `lo..=hi` (as fractions).
    fn percent(&mut self, loc: Loc, key: &str, v: &DeValue<'_>, lo: f64, hi: f64) -> Option<f64> {
        let s = self.string(loc, key, v)?;
        match parse_percent(&s) {
            Some(Ok(f)) if f >= lo && f <= hi => Some(f),
            _ => {
                self.err(
                    loc,
                    key,
                    format!(
                        "{key} = {s} is not a percentage from {}% to {}%",
                        lo * 100.0,
                        hi * 100.0
                    ),
                    "write e.g. \"5%\"",
                );
                None
            }
        }
    }
}

/// Parse the value of the top-level `guard` key.
pub(crate) fn parse(
    source: &Source,
    key_start: usize,
    value: &Spanned<DeValue<'_>>,
    errors: &mut Vec<Diagnostic>,
) -> Option<GuardSpec> {
    let loc = source.loc(key_start);
    let mut cx = Ctx {
        source,
        section: "[guard]".into(),
        errors,
    };
    let Some(table) = value.get_ref().as_table() else {
        cx.err(
            loc,
            "",
            "'guard' must be a table".into(),
            "write [guard] on its own line, then protect = \"SLICE\" and sideloads = [...]",
        );
        return None;
    };
    let before = cx.errors.len();
    let mut protect = None;
    let mut sideloads = Vec::new();
    let mut g = defaults(loc);
    for (k, v) in table.iter() {
        let kloc = source.loc(k.span().start);
        let key = k.get_ref().as_ref();
        let val = v.get_ref();
        match key {
            "protect" => {
                protect = cx
                    .string(kloc, key, val)
                    .and_then(|s| cx.slice(kloc, key, &s));
            }
            "sideloads" => sideloads = parse_sideloads(&mut cx, kloc, val),
            _ => tuning(&mut cx, &mut g, key, kloc, val),
        }
    }
    let Some(protect) = protect else {
        if cx.errors.len() == before {
            cx.err(
                loc,
                "protect",
                "the guard needs the slice it protects".into(),
                "add protect = \"db-server\"",
            );
        }
        return None;
    };
    check_sideloads(&mut cx, loc, &protect, &sideloads);
    g.protect = protect;
    g.sideloads = sideloads;
    (cx.errors.len() == before).then_some(g)
}

/// The guard's defaults (`protect` is a placeholder until the key is read).
fn defaults(loc: Loc) -> GuardSpec {
    GuardSpec {
        loc,
        protect: SliceName::parse("unset").expect("a valid placeholder name"),
        sideloads: vec![],
        period: Duration::from_millis(100),
        calibration: Duration::from_secs(20),
        cpu_floor: 0.05,
        quota_period: Duration::from_millis(10),
        max_frozen: Duration::from_secs(2),
        stall: 0.05,
        io_keep: 0.40,
        cpu_keep: None,
        keep_after: Duration::from_secs(5),
        probe: None,
    }
}

/// The span keys: their bounds and the field each sets.
fn span_key<'g>(g: &'g mut GuardSpec, key: &str) -> Option<(Duration, Duration, &'g mut Duration)> {
    let (ms, secs) = (Duration::from_millis, Duration::from_secs);
    match key {
        "period" => Some((ms(10), secs(10), &mut g.period)),
        "calibration" => Some((Duration::ZERO, secs(600), &mut g.calibration)),
        "quota_period" => Some((ms(1), secs(1), &mut g.quota_period)),
        "max_frozen" => Some((Duration::ZERO, secs(60), &mut g.max_frozen)),
        "keep_after" => Some((ms(500), secs(600), &mut g.keep_after)),
        _ => None,
    }
}

/// The timing and threshold keys, and unknown ones.
fn tuning(cx: &mut Ctx<'_>, g: &mut GuardSpec, key: &str, kloc: Loc, val: &DeValue<'_>) {
    if let Some((lo, hi, slot)) = span_key(g, key) {
        if let Some(d) = cx.span(kloc, key, val, lo, hi) {
            *slot = d;
        }
        return;
    }
    match key {
        "cpu_floor" => {
            g.cpu_floor = cx
                .percent(kloc, key, val, 0.01, 10.0)
                .unwrap_or(g.cpu_floor)
        }
        "stall" => g.stall = cx.percent(kloc, key, val, 0.001, 1.0).unwrap_or(g.stall),
        "io_keep" => g.io_keep = cx.percent(kloc, key, val, 0.01, 1.0).unwrap_or(g.io_keep),
        "cpu_keep" => g.cpu_keep = cx.percent(kloc, key, val, 0.01, 10.0).or(g.cpu_keep),
        "probe" => {
            g.probe = cx
                .string(kloc, key, val)
                .and_then(|s| parse_probe(cx, kloc, &s))
        }
        other => {
            let names: Vec<String> = KEYS.iter().map(|s| s.to_string()).collect();
            let hint = match crate::nearest(other, &names) {
                Some(s) => format!("did you mean {s}?"),
                None => format!("[guard] takes: {}", KEYS.join(", ")),
            };
            cx.err(kloc, other, format!("unknown key '{other}'"), &hint);
        }
    }
}

fn parse_sideloads(cx: &mut Ctx<'_>, loc: Loc, v: &DeValue<'_>) -> Vec<SliceName> {
    let items: Vec<String> = match v {
        DeValue::String(s) => vec![s.to_string()],
        DeValue::Array(a) => a
            .iter()
            .filter_map(|i| cx.string(loc, "sideloads", i.get_ref()))
            .collect(),
        _ => {
            cx.err(
                loc,
                "sideloads",
                "sideloads must be a list of slices".into(),
                "write sideloads = [\"db-helper\"]",
            );
            return vec![];
        }
    };
    items
        .iter()
        .filter_map(|s| cx.slice(loc, "sideloads", s))
        .collect()
}

/// Sideloads: at least one, and none of them the protected slice, inside it, or around it.
fn check_sideloads(cx: &mut Ctx<'_>, loc: Loc, protect: &SliceName, sideloads: &[SliceName]) {
    if sideloads.is_empty() {
        cx.err(
            loc,
            "sideloads",
            "the guard needs at least one sideload slice".into(),
            "add sideloads = [\"db-helper\"]",
        );
    }
    for s in sideloads {
        let related =
            s == protect || s.lineage().contains(protect) || protect.lineage().contains(s);
        if related {
            cx.err(
                loc,
                "sideloads",
                format!("sideload '{s}' is the protected slice '{protect}', or contains or is inside it"),
                "sideloads must be slices beside the protected one (db-helper beside db-server)",
            );
        }
    }
}

/// The protected slice and every sideload must be slices of the plan.
pub(crate) fn check_slices(
    source: &Source,
    g: &GuardSpec,
    slices: &std::collections::BTreeMap<SliceName, crate::SliceSpec>,
    errors: &mut Vec<Diagnostic>,
) {
    let named: Vec<String> = slices.keys().map(|n| n.to_string()).collect();
    let keyed = std::iter::once(("protect", &g.protect))
        .chain(g.sideloads.iter().map(|s| ("sideloads", s)));
    for (key, name) in keyed {
        if slices.contains_key(name) {
            continue;
        }
        let hint = match crate::nearest(name.as_str(), &named) {
            Some(s) => format!("did you mean '{s}'? Or add [slice.{name}]"),
            None => format!("add [slice.{name}] to the plan"),
        };
        errors.push(
            Diagnostic::error(format!("'{name}' is not a slice of this plan"))
                .at(source.at(g.loc))
                .context(format!("[guard] {key}"))
                .hint(hint),
        );
    }
}

/// `redis:HOST:PORT` or `tcp:HOST:PORT`.
fn parse_probe(cx: &mut Ctx<'_>, loc: Loc, s: &str) -> Option<Probe> {
    let bad = |cx: &mut Ctx<'_>| {
        cx.err(
            loc,
            "probe",
            format!("'{s}' is not a probe"),
            "write \"redis:127.0.0.1:6379\" (PING round trips) or \"tcp:127.0.0.1:5432\" (connect time)",
        );
        None
    };
    let (kind, addr) = match s.split_once(':') {
        Some(x) => x,
        None => return bad(cx),
    };
    let Ok(addr) = addr.parse::<SocketAddr>() else {
        return bad(cx);
    };
    match kind {
        "redis" => Some(Probe::Redis(addr)),
        "tcp" => Some(Probe::Tcp(addr)),
        _ => bad(cx),
    }
}

#[cfg(test)]
mod tests {
    use crate::Plan;
    use std::path::Path;

    const SLICES: &str = "[slice.db-server]\n[slice.db-helper]\n[slice.a]\n[slice.b]\n";

    fn plan(text: &str) -> Result<Plan, String> {
        let text = format!("{text}{SLICES}");
        Plan::parse(&text, Some(Path::new("p.toml"))).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_values() {
        let p = plan("[guard]\nprotect = \"db-server\"\nsideloads = [\"db-helper\"]\n").unwrap();
        let g = p.guard.unwrap();
        assert_eq!(g.protect.as_str(), "db-server");
        assert_eq!(g.period.as_millis(), 100);
        assert_eq!(g.cpu_floor, 0.05);
        // No progress floor on CPU unless the plan asks for one.
        assert_eq!((g.cpu_keep, g.keep_after.as_secs()), (None, 5));
        let p = plan(
            "[guard]\nprotect = \"a\"\nsideloads = \"b\"\nperiod = \"50ms\"\ncpu_floor = \"10%\"\nprobe = \"redis:127.0.0.1:6379\"\ncpu_keep = \"15%\"\nkeep_after = \"2s\"\n",
        )
        .unwrap();
        let g = p.guard.unwrap();
        assert_eq!(g.period.as_millis(), 50);
        assert_eq!((g.cpu_keep, g.keep_after.as_secs()), (Some(0.15), 2));
        assert!(matches!(g.probe, Some(super::Probe::Redis(_))));
        // Printed as the plan spells it.
        assert_eq!(g.probe.unwrap().to_string(), "redis:127.0.0.1:6379");
    }

    #[test]
    fn mistakes_say_where_and_what() {
        let e = plan("[guard]\nprotect = \"db\"\nsideloads = [\"db-helper\"]\n").unwrap_err();
        assert!(
            e.contains("p.toml:1:") && e.contains("contains or is inside"),
            "{e}"
        );
        let e =
            plan("[guard]\nprotect = \"a\"\nsideloads = [\"b\"]\nperiod = \"1h\"\n").unwrap_err();
        assert!(e.contains("p.toml:4:1") && e.contains("outside"), "{e}");
        let e = plan("[guard]\nprotec = \"a\"\n").unwrap_err();
        assert!(e.contains("did you mean protect?"), "{e}");
        let e = plan("[guard]\nprotect = \"a\"\nsideloads = [\"b\"]\nprobe = \"http://x\"\n")
            .unwrap_err();
        assert!(e.contains("not a probe"), "{e}");
        let e =
            plan("[guard]\nprotect = \"a\"\nsideloads = [\"b\"]\ncpu_keep = \"0%\"\n").unwrap_err();
        assert!(
            e.contains("p.toml:4:1") && e.contains("cpu_keep = 0%"),
            "{e}"
        );
        let e = plan("[guard]\nprotect = \"db-srever\"\nsideloads = [\"b\"]\n").unwrap_err();
        assert!(
            e.contains("not a slice of this plan") && e.contains("did you mean 'db-server'"),
            "{e}"
        );
    }
}
