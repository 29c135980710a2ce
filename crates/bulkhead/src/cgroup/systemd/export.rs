//! The plan as systemd unit files: one `.slice` per slice the plan names, and a
//! `.slice.d/50-bulkhead-floor.conf` drop-in where a memory floor or ceiling of the plan
//! overrides its percentage on the host the files are written for.
//!
//! The directives are chosen for one systemd version: before 232 CPUWeight becomes
//! CPUShares, before 231 MemoryMax becomes MemoryLimit and percentages become bytes, and so
//! on (see [`super::props::support`]). What systemd cannot say (memory floors, HugetlbMax,
//! directives an old version lacks, values a legacy directive only approximates) is kept in
//! an `[X-Bulkhead]` section, which systemd ignores and `bulkhead import` reads, so
//! `import(export(plan))` gives the plan back.

use super::props::{
    support, weight_to_blkio, weight_to_shares, Version, CPU_IDLE_SINCE, CURRENT, PERCENT_SINCE,
};
use bulkhead_plan::{
    CpuWeight, MemSpec, MemValue, Plan, ResolvedSlice, SliceName, TasksSpec, Value,
};
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use bulkhead_sys::host::Host;
use bulkhead_sys::units::{human_bytes, Limit};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The first line of every file bulkhead writes; only such files are overwritten or removed.
pub const HEADER: &str = "# Written by bulkhead";
/// The drop-in that carries memory floors and ceilings for one host.
pub const FLOOR_DROP_IN: &str = "50-bulkhead-floor.conf";
/// The section systemd ignores (its name starts with X-) and `import` reads.
pub const X_SECTION: &str = "X-Bulkhead";

/// One file to write, relative to the unit directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnitFile {
    pub path: PathBuf,
    pub text: String,
}

/// The unit files for a plan.
#[derive(Debug, Default, serde::Serialize)]
pub struct Export {
    pub version: Version,
    pub files: Vec<UnitFile>,
    /// Floor drop-ins that are not needed for this host (removed if bulkhead wrote them).
    pub stale: Vec<PathBuf>,
    /// What could not be said for this version, and other findings.
    pub notes: Vec<Diagnostic>,
}

/// What one directive becomes.
#[derive(Default)]
struct Lines {
    slice: Vec<String>,
    floor: Vec<String>,
    /// The plan's own value for [X-Bulkhead], when the lines above do not carry it exactly.
    keep: Option<String>,
    comment: Option<String>,
}

/// Escape `%` (systemd's specifier character) in values systemd expands specifiers in.
fn esc(s: &str) -> String {
    s.replace('%', "%%").replace('\n', " ")
}

fn trim_float(f: f64) -> String {
    let s = format!("{f:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Bytes as systemd and the plan both read them: `1200M`, or a plain number.
fn size(b: u64) -> String {
    let h = human_bytes(b);
    if h.contains('.') || h.ends_with('B') {
        b.to_string()
    } else {
        h
    }
}

/// Bandwidths and IOPS count in thousands, as systemd does.
fn si(n: u64) -> String {
    for (s, u) in [
        ("T", 1_000_000_000_000u64),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("K", 1000),
    ] {
        if n >= u && n.is_multiple_of(u) {
            return format!("{}{s}", n / u);
        }
    }
    n.to_string()
}

fn mem_text(v: MemValue) -> String {
    match v {
        MemValue::Bytes(b) => size(b),
        MemValue::Percent(p) => format!("{}%", trim_float(p * 100.0)),
        MemValue::Infinity => "infinity".into(),
    }
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

fn mem_toml(spec: &MemSpec) -> String {
    let v = toml_str(&mem_text(spec.value));
    if spec.min.is_none() && spec.max.is_none() {
        return v;
    }
    let mut out = format!("{{ value = {v}");
    if let Some(m) = spec.min {
        let _ = write!(out, ", min = {}", toml_str(&size(m)));
    }
    if let Some(m) = spec.max {
        let _ = write!(out, ", max = {}", toml_str(&size(m)));
    }
    out.push_str(" }");
    out
}

fn limit_text(l: &bulkhead_sys::units::Limit) -> String {
    match l {
        Limit::Bytes(b) => si(*b),
        Limit::Infinity => "infinity".into(),
    }
}

/// A plan value as plan TOML (what `import` writes back for [X-Bulkhead] entries).
pub fn value_toml(v: &Value) -> String {
    match v {
        Value::CpuWeight(CpuWeight::Weight(n)) | Value::Weight(n) => n.to_string(),
        Value::CpuWeight(CpuWeight::Idle) => "\"idle\"".into(),
        Value::Quota(f) => toml_str(&format!("{}%", trim_float(f * 100.0))),
        Value::Period(d) => toml_str(&duration(*d)),
        Value::Ids(ids) => toml_str(&ids.to_string()),
        Value::Memory(spec) => mem_toml(spec),
        Value::DeviceWeights(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|(d, w)| toml_str(&format!("{d} {w}")))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Value::DeviceLimits(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|(d, l)| toml_str(&format!("{d} {}", limit_text(l))))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Value::Tasks(TasksSpec::Count(n)) => n.to_string(),
        Value::Tasks(TasksSpec::Percent(p)) => toml_str(&format!("{}%", trim_float(p * 100.0))),
        Value::Tasks(TasksSpec::Infinity) => "\"infinity\"".into(),
        Value::Hugetlb(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|(size, spec)| {
                    format!("{} = {}", toml_str(&human_bytes(*size)), mem_toml(spec))
                })
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
        Value::Text(t) => toml_str(t),
        Value::Flag(b) => b.to_string(),
    }
}

fn duration(d: std::time::Duration) -> String {
    let us = d.as_micros();
    if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

/// The resolved limit of a memory directive on the target host.
fn resolved_mem(r: &ResolvedSlice, key: &str) -> Option<Limit> {
    match key {
        "MemoryMin" => r.memory_min,
        "MemoryLow" => r.memory_low,
        "MemoryHigh" => r.memory_high,
        "MemoryMax" => r.memory_max,
        "MemorySwapMax" => r.memory_swap_max,
        _ => None,
    }
}

fn lines_for(key: &str, v: &Value, r: &ResolvedSlice, host: &Host, version: Version) -> Lines {
    let mut l = Lines::default();
    let sup = support(key);
    let knows = sup.is_some_and(|s| s.since <= version);
    let legacy = sup.and_then(|s| s.legacy);
    let plan_value = || Some(value_toml(v));
    let dropped = |l: &mut Lines| {
        l.keep = plan_value();
        l.comment = Some(match sup {
            Some(s) => format!(
                "{key} is left out: systemd {version} does not know it (it came in systemd {})",
                s.since
            ),
            None => format!("{key} is left out: systemd has no such directive"),
        });
    };
    match v {
        Value::Flag(b) => {
            let word = if *b { "yes" } else { "no" };
            if knows {
                l.slice.push(format!("{key}={word}"));
            } else if let Some(old) = legacy {
                l.slice.push(format!("{old}={word}"));
                l.keep = plan_value();
            } else {
                dropped(&mut l);
            }
        }
        Value::CpuWeight(w) => {
            let (n, idle) = match w {
                CpuWeight::Weight(n) => (*n, false),
                CpuWeight::Idle => (1, true),
            };
            if knows {
                if idle && version >= CPU_IDLE_SINCE {
                    l.slice.push("CPUWeight=idle".into());
                } else {
                    l.slice.push(format!("CPUWeight={n}"));
                    if idle {
                        l.keep = plan_value();
                        l.comment = Some(format!(
                            "CPUWeight=idle is written as CPUWeight=1: systemd {version} has no idle scheduling (it came in systemd {CPU_IDLE_SINCE})"
                        ));
                    }
                }
            } else {
                l.slice.push(format!("CPUShares={}", weight_to_shares(n)));
                if idle {
                    l.keep = plan_value();
                }
            }
        }
        Value::Quota(f) => l.slice.push(format!("CPUQuota={}%", trim_float(f * 100.0))),
        Value::Period(d) => {
            if knows {
                l.slice.push(format!("{key}={}", duration(*d)));
            } else {
                dropped(&mut l);
            }
        }
        Value::Ids(ids) => {
            if knows {
                l.slice.push(format!("{key}={ids}"));
            } else {
                dropped(&mut l);
            }
        }
        Value::Memory(spec) => {
            let name = if knows {
                key
            } else if let Some(old) = legacy {
                old
            } else {
                dropped(&mut l);
                return l;
            };
            let resolved = resolved_mem(r, key);
            let percent = matches!(spec.value, MemValue::Percent(_));
            if percent && version < PERCENT_SINCE {
                // No percentages before 231: the bytes for the target host.
                if let Some(res) = resolved {
                    l.slice.push(format!("{name}={}", mem_limit(res)));
                }
                l.keep = plan_value();
                l.comment = Some(format!(
                    "{key}={} is written in bytes for a host with {} of RAM: systemd {version} takes no percentages",
                    mem_text(spec.value),
                    human_bytes(host.memory)
                ));
            } else {
                l.slice.push(format!("{name}={}", mem_text(spec.value)));
                if spec.min.is_some() || spec.max.is_some() {
                    l.keep = plan_value();
                    // Does a bound decide the value on this host?
                    let base = match spec.value {
                        MemValue::Bytes(b) => Some(b),
                        MemValue::Percent(p) => Some((host.memory as f64 * p) as u64),
                        MemValue::Infinity => None,
                    };
                    let binds = base.is_some_and(|b| {
                        spec.min.is_some_and(|m| b < m) || spec.max.is_some_and(|m| b > m)
                    });
                    if binds {
                        if let Some(res) = resolved {
                            l.floor.push(format!("{name}={}", mem_limit(res)));
                        }
                    }
                }
            }
        }
        Value::Weight(w) => {
            if knows {
                l.slice.push(format!("{key}={w}"));
            } else {
                let b = weight_to_blkio(*w);
                l.slice.push(format!("BlockIOWeight={b}"));
                if b * 100 / 500 != *w {
                    l.keep = plan_value();
                }
            }
        }
        Value::DeviceWeights(list) => {
            for (d, w) in list {
                if knows {
                    l.slice.push(format!("{key}={} {w}", esc(d)));
                } else {
                    let b = weight_to_blkio(*w);
                    l.slice.push(format!("BlockIODeviceWeight={} {b}", esc(d)));
                    if b * 100 / 500 != *w {
                        l.keep = plan_value();
                    }
                }
            }
        }
        Value::DeviceLimits(list) => {
            let name = if knows {
                key
            } else if let Some(old) = legacy {
                old
            } else {
                dropped(&mut l);
                return l;
            };
            for (d, lim) in list {
                l.slice
                    .push(format!("{name}={} {}", esc(d), limit_text(lim)));
            }
        }
        Value::Tasks(t) => {
            if !knows {
                dropped(&mut l);
                return l;
            }
            match t {
                TasksSpec::Percent(p) if version < PERCENT_SINCE => {
                    if let Some(Limit::Bytes(n)) = r.tasks_max {
                        l.slice.push(format!("TasksMax={n}"));
                    }
                    l.keep = plan_value();
                    l.comment = Some(format!(
                        "TasksMax={}% is written as a count for a host with a limit of {} tasks: systemd {version} takes no percentages",
                        trim_float(p * 100.0),
                        host.tasks_max
                    ));
                }
                TasksSpec::Percent(p) => {
                    l.slice.push(format!("TasksMax={}%", trim_float(p * 100.0)))
                }
                TasksSpec::Count(n) => l.slice.push(format!("TasksMax={n}")),
                TasksSpec::Infinity => l.slice.push("TasksMax=infinity".into()),
            }
        }
        Value::Hugetlb(_) => {
            l.keep = plan_value();
            l.comment = Some(
                "HugetlbMax is kept for bulkhead only: systemd has no directive for the hugetlb controller"
                    .into(),
            );
        }
        Value::Text(_) => {}
    }
    l
}

fn mem_limit(l: Limit) -> String {
    match l {
        Limit::Bytes(b) => size(b),
        Limit::Infinity => "infinity".into(),
    }
}

/// The unit files for `plan`, written for systemd `version` on `host` (the host decides
/// only the floor drop-ins and, before systemd 231, the bytes that stand for percentages).
pub fn unit_files(plan: &Plan, host: &Host, version: Version) -> Result<Export> {
    let resolved = plan.resolve(host)?;
    let mut out = Export {
        version,
        ..Default::default()
    };
    let mut specs: Vec<_> = plan.slices.values().filter(|s| !s.implicit()).collect();
    specs.sort_by(|a, b| (a.name.depth(), a.name.as_str()).cmp(&(b.name.depth(), b.name.as_str())));
    for spec in specs {
        let name = &spec.name;
        let Some(r) = resolved.slice(name) else {
            continue;
        };
        let mut slice_lines = Vec::new();
        let mut floor_lines = Vec::new();
        let mut keep = Vec::new();
        let mut comments = Vec::new();
        for key in bulkhead_plan::directive_names() {
            let Some(at) = spec.directives.get(key) else {
                continue;
            };
            let l = lines_for(key, &at.value, r, host, version);
            slice_lines.extend(l.slice);
            floor_lines.extend(l.floor);
            if let Some(k) = l.keep {
                keep.push(format!("{key}={k}"));
            }
            if let Some(c) = l.comment {
                out.notes
                    .push(Diagnostic::note(c.clone()).context(format!("[slice.{name}]")));
                comments.push(c);
            }
        }
        let mut text = format!(
            "{HEADER} from {}, for systemd {}.\n",
            plan.source.label(),
            if version >= CURRENT {
                format!("{CURRENT} or newer")
            } else {
                version.to_string()
            }
        );
        text.push_str(
            "# `bulkhead import` reads it back; [X-Bulkhead] keeps what systemd cannot say.\n",
        );
        for c in &comments {
            let _ = writeln!(text, "# {c}");
        }
        if let Some(d) = &spec.description {
            let _ = write!(text, "\n[Unit]\nDescription={}\n", esc(d));
        }
        if !slice_lines.is_empty() {
            text.push_str("\n[Slice]\n");
            for l in &slice_lines {
                let _ = writeln!(text, "{l}");
            }
        }
        if !keep.is_empty() {
            let _ = writeln!(text, "\n[{X_SECTION}]");
            for k in &keep {
                let _ = writeln!(text, "{k}");
            }
        }
        out.files.push(UnitFile {
            path: PathBuf::from(name.unit()),
            text,
        });
        let drop_in = PathBuf::from(format!("{}.d", name.unit())).join(FLOOR_DROP_IN);
        if floor_lines.is_empty() {
            out.stale.push(drop_in);
        } else {
            let mut t = format!(
                "{HEADER}: the plan's memory floors and ceilings for a host with {} of RAM.\n# On a host of another size, write the files again (bulkhead export systemd --memory SIZE).\n\n[Slice]\n",
                human_bytes(host.memory)
            );
            for l in &floor_lines {
                let _ = writeln!(t, "{l}");
            }
            out.files.push(UnitFile {
                path: drop_in,
                text: t,
            });
        }
    }
    Ok(out)
}

/// Whether a file was written by bulkhead (so it may be replaced or removed).
pub fn ours(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.starts_with(HEADER))
}

/// Check that writing the files into `dir` replaces only files bulkhead wrote.
pub fn check_targets(dir: &Path, export: &Export) -> Result<()> {
    let mut errors = Vec::new();
    for f in &export.files {
        let p = dir.join(&f.path);
        if p.exists() && !ours(&p) {
            errors.push(
                Diagnostic::error(
                    "the file exists and was not written by bulkhead; refusing to replace it",
                )
                .at(p.display().to_string())
                .hint("move it away, or write to another directory"),
            );
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(errors))
    }
}

/// What writing an export changed.
#[derive(Debug, Default, serde::Serialize)]
pub struct Written {
    pub written: Vec<PathBuf>,
    pub unchanged: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
}

/// Write the files into `dir` (created if missing). Files with the same text are left alone;
/// stale floor drop-ins bulkhead wrote are removed.
pub fn write(dir: &Path, export: &Export) -> Result<Written> {
    check_targets(dir, export)?;
    let mut w = Written::default();
    let fail = |what: &str, p: &Path, e: std::io::Error| {
        Error::failed_with(
            Diagnostic::error(format!("cannot {what}: {}", errno_text(&e)))
                .at(p.display().to_string()),
        )
    };
    for f in &export.files {
        let p = dir.join(&f.path);
        if std::fs::read_to_string(&p).is_ok_and(|t| t == f.text) {
            w.unchanged.push(p);
            continue;
        }
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| fail("create the directory", parent, e))?;
        }
        // Write beside, then rename: systemd never reads half a file.
        let tmp = p.with_extension("bulkhead-tmp");
        std::fs::write(&tmp, &f.text).map_err(|e| fail("write", &tmp, e))?;
        std::fs::rename(&tmp, &p).map_err(|e| fail("write", &p, e))?;
        w.written.push(p);
    }
    for s in &export.stale {
        let p = dir.join(s);
        if ours(&p) {
            std::fs::remove_file(&p).map_err(|e| fail("remove", &p, e))?;
            if let Some(parent) = p.parent() {
                let _ = std::fs::remove_dir(parent); // only when empty
            }
            w.removed.push(p);
        }
    }
    Ok(w)
}

/// The slices whose unit files bulkhead wrote into `dir`.
pub fn slices_in(dir: &Path) -> Vec<SliceName> {
    let mut out: Vec<SliceName> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    let stem = n.strip_suffix(".slice")?;
                    if !ours(&e.path()) {
                        return None;
                    }
                    SliceName::parse(stem).ok()
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| (a.depth(), a.as_str()).cmp(&(b.depth(), b.as_str())));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_sys::units::IdSet;

    fn host(mem: u64) -> Host {
        Host {
            memory: mem,
            cpus: IdSet((0..16).collect()),
            mem_nodes: IdSet([0].into_iter().collect()),
            hugepage_sizes: vec![2 << 20, 1 << 30],
            tasks_max: 4_194_304,
            page_size: 4096,
        }
    }

    fn text(e: &Export, path: &str) -> String {
        e.files
            .iter()
            .find(|f| f.path == Path::new(path))
            .unwrap_or_else(|| {
                panic!(
                    "no {path} in {:?}",
                    e.files.iter().map(|f| &f.path).collect::<Vec<_>>()
                )
            })
            .text
            .clone()
    }

    #[test]
    fn default_plan_for_current_systemd() {
        let plan = Plan::parse(bulkhead_plan::EMBEDDED_DEFAULT, None).unwrap();
        let e = unit_files(&plan, &host(16 << 30), CURRENT).unwrap();
        let helper = text(&e, "db-helper.slice");
        assert!(helper.starts_with(HEADER), "{helper}");
        let slice_section: String = helper
            .split("[Slice]\n")
            .nth(1)
            .unwrap()
            .split("\n\n")
            .next()
            .unwrap()
            .to_string();
        assert_eq!(
            slice_section, "CPUWeight=10\nMemoryHigh=4%\nMemoryMax=5%\nIOWeight=10",
            "{helper}"
        );
        assert!(
            helper.contains("\n[X-Bulkhead]\nMemoryHigh={ value = \"4%\", min = \"1200M\" }\nMemoryMax={ value = \"5%\", min = \"1400M\" }\n"),
            "{helper}"
        );
        // 4% of 16G = 655M < 1200M: the floor applies on this host.
        let floor = text(&e, "db-helper.slice.d/50-bulkhead-floor.conf");
        assert!(
            floor.ends_with("[Slice]\nMemoryHigh=1200M\nMemoryMax=1400M\n"),
            "{floor}"
        );
        let server = text(&e, "db-server.slice");
        assert!(
            server.contains("[Slice]\nCPUWeight=1000\nMemorySwapMax=0\nIOWeight=1000\n"),
            "{server}"
        );
        // On a big host the percentages win: no drop-in, and an old one is stale.
        let e = unit_files(&plan, &host(64 << 30), CURRENT).unwrap();
        assert!(!e.files.iter().any(|f| f.path.ends_with(FLOOR_DROP_IN)));
        assert!(e
            .stale
            .contains(&PathBuf::from("db-helper.slice.d/50-bulkhead-floor.conf")));
    }

    #[test]
    fn centos7_systemd_219() {
        let plan = Plan::parse(
            "[slice.db-helper]\nCPUWeight = 10\nIOWeight = 10\nMemoryHigh = \"4%\"\nMemoryMax = { value = \"5%\", min = \"1400M\" }\nIOAccounting = true\nAllowedCPUs = \"0-1\"\n",
            None,
        )
        .unwrap();
        let e = unit_files(&plan, &host(16 << 30), 219).unwrap();
        let t = text(&e, "db-helper.slice");
        let slice_section = t
            .split("[Slice]\n")
            .nth(1)
            .unwrap()
            .split("\n\n")
            .next()
            .unwrap();
        // CPUShares = ceil(10 * 1024 / 100); BlockIOWeight = 10 * 5; 5% of 16G = 819M is
        // below the 1400M floor, and 219 takes no percentages: bytes.
        assert_eq!(
            slice_section,
            "CPUShares=103\nMemoryLimit=1400M\nBlockIOWeight=50\nBlockIOAccounting=yes"
        );
        for gone in [
            "MemoryHigh is left out: systemd 219",
            "AllowedCPUs is left out",
            "MemoryMax=5% is written in bytes",
        ] {
            assert!(t.contains(gone), "{gone} in\n{t}");
            assert!(e.notes.iter().any(|n| n.message.contains(gone)));
        }
        assert!(!t.contains("CPUWeight=") || t.contains("[X-Bulkhead]"));
    }

    #[test]
    fn values_escape_specifiers() {
        let plan = Plan::parse("[slice.a]\nDescription = \"100% helpers\"\n", None).unwrap();
        let e = unit_files(&plan, &host(16 << 30), CURRENT).unwrap();
        assert!(text(&e, "a.slice").contains("Description=100%% helpers\n"));
    }

    #[test]
    fn toml_values_parse_back() {
        let plan = Plan::parse(
            "[slice.a]\nMemoryMax = { value = \"4.5%\", min = \"1200M\", max = \"8G\" }\nHugetlbMax = { \"2M\" = \"8G\" }\nIOReadBandwidthMax = [\"/ 10M\", \"/tmp 1500000\"]\nCPUQuota = \"12.5%\"\nCPUQuotaPeriodSec = \"2500us\"\n",
            None,
        )
        .unwrap();
        let s = &plan.slices[&SliceName::parse("a").unwrap()];
        let mut text = String::from("[slice.a]\n");
        for (k, v) in &s.directives {
            let _ = writeln!(text, "{k} = {}", value_toml(&v.value));
        }
        let again = Plan::parse(&text, None).unwrap();
        let s2 = &again.slices[&SliceName::parse("a").unwrap()];
        for (k, v) in &s.directives {
            assert_eq!(v.value, s2.directives[k].value, "{k}: {text}");
        }
    }

    /// import(export(plan)) == plan: every slice, description and directive value.
    fn round_trip(plan_text: &str, version: Version, mem: u64) {
        let plan = Plan::parse(plan_text, None).unwrap();
        let e = unit_files(&plan, &host(mem), version).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "bulkhead-export-{}-{version}-{}",
            std::process::id(),
            plan_text.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        write(&dir, &e).unwrap();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "slice"))
            .collect();
        files.sort();
        let toml = bulkhead_plan::import::import(&files).unwrap();
        let again = Plan::parse(&toml, None).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let names = |p: &Plan| p.slices.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&plan), names(&again), "{toml}");
        for (name, s) in &plan.slices {
            let t = &again.slices[name];
            assert_eq!(s.description, t.description, "{name}: {toml}");
            let a: Vec<_> = s.directives.iter().map(|(k, v)| (*k, &v.value)).collect();
            let b: Vec<_> = t.directives.iter().map(|(k, v)| (*k, &v.value)).collect();
            assert_eq!(a, b, "[slice.{name}] for systemd {version}:\n{toml}");
        }
    }

    const RICH: &str = r#"
[slice.db]
Description = "Database host workloads, 100% of them"

[slice.db-server]
CPUWeight = 1000
IOWeight = 1000
MemorySwapMax = 0
MemoryLow = "2G"
CPUAccounting = true

[slice.db-helper]
CPUWeight = "idle"
CPUQuota = "150%"
CPUQuotaPeriodSec = "50ms"
AllowedCPUs = "0-1"
MemoryMin = "64M"
MemoryHigh = { value = "4%", min = "1200M" }
MemoryMax = { value = "5%", min = "1400M", max = "64G" }
IOWeight = 1
IODeviceWeight = "/ 200"
IOReadBandwidthMax = ["/ 10M", "/tmp 1500000"]
IOWriteIOPSMax = "/ 1000"
TasksMax = "10%"
HugetlbMax = { "2M" = "8G" }
IOAccounting = true

[slice.backup]
TasksMax = 512
MemoryMax = "infinity"
"#;

    #[test]
    fn import_of_export_is_the_plan() {
        for version in [CURRENT, 245, 240, 232, 231, 230, 219] {
            round_trip(bulkhead_plan::EMBEDDED_DEFAULT, version, 16 << 30);
            round_trip(bulkhead_plan::EMBEDDED_DEFAULT, version, 64 << 30);
            round_trip(RICH, version, 16 << 30);
        }
    }

    #[test]
    fn export_keeps_foreign_files() {
        let plan = Plan::parse("[slice.a]\nCPUWeight = 10\n", None).unwrap();
        let e = unit_files(&plan, &host(16 << 30), CURRENT).unwrap();
        let dir =
            std::env::temp_dir().join(format!("bulkhead-export-foreign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.slice"), "[Slice]\nCPUWeight=5\n").unwrap();
        let err = write(&dir, &e).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(
            err.to_string().contains("was not written by bulkhead"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("a.slice")).unwrap(),
            "[Slice]\nCPUWeight=5\n"
        );
        std::fs::remove_file(dir.join("a.slice")).unwrap();
        let w = write(&dir, &e).unwrap();
        assert_eq!(w.written.len(), 1);
        let again = write(&dir, &e).unwrap();
        assert_eq!(
            (again.written.len(), again.unchanged.len()),
            (0, 1),
            "a second write changes nothing"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
