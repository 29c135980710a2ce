//! The plan as systemd unit files: one `.slice` per slice the plan names, and a
//! `.slice.d/50-bulkhead-floor.conf` drop-in where a memory floor or ceiling of the plan
//! overrides its percentage on the host the files are written for.
//!
//! The directives are chosen for one systemd version: before 232 CPUWeight becomes
//! CPUShares, before 231 MemoryMax becomes MemoryLimit and percentages become bytes, and so
//! on (see [`super::versions::support`]). What systemd cannot say (memory floors, HugetlbMax,
//! directives an old version lacks, values a legacy directive only approximates) is kept in
//! an `[X-Bulkhead]` section, which systemd ignores and `bulkhead import` reads, so
//! `import(export(plan))` gives the plan back.

mod lines;
pub mod services;
mod text;

pub use text::value_toml;

use super::versions::{Version, CURRENT};
use bulkhead_plan::{Plan, SliceName};
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use bulkhead_sys::host::Host;
use bulkhead_sys::units::human_bytes;
use lines::lines_for;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use text::esc;

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
    out.files.extend(services::drop_ins(plan));
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
        let mut h = Host {
            memory: mem,
            cpus: IdSet((0..16).collect()),
            mem_nodes: IdSet([0].into_iter().collect()),
            hugepage_sizes: vec![2 << 20, 1 << 30],
            tasks_max: 4_194_304,
            page_size: 4096,
            devices: Default::default(),
        };
        h.look_up_devices(["/", "/tmp"]);
        h
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
            slice_section, "CPUWeight=idle\nMemoryHigh=4%\nMemoryMax=5%\nIOWeight=10",
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
        // CPUShares = 10 * 1024 / 100 (systemd's conversion, which import cannot invert, so
        // [X-Bulkhead] keeps CPUWeight=10); BlockIOWeight = 10 * 5; 5% of 16G = 819M is below
        // the 1400M floor, and 219 takes no percentages: bytes.
        assert_eq!(
            slice_section,
            "CPUShares=102\nMemoryLimit=1400M\nBlockIOWeight=50\nBlockIOAccounting=yes"
        );
        assert!(t.contains("[X-Bulkhead]\nCPUWeight=10\n"), "{t}");
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
            "[slice.a]\nMemoryMax = { value = \"4.5%\", min = \"1200M\", max = \"8G\" }\nHugetlbMax = { \"2M\" = \"8G\" }\nIOReadBandwidthMax = [\"/ 10M\", \"/tmp 1500000\"]\nIODeviceLatencyTargetSec = [\"/ 10ms\", \"/tmp infinity\"]\nCPUQuota = \"12.5%\"\nCPUQuotaPeriodSec = \"2500us\"\n",
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
IODeviceLatencyTargetSec = ["/ 2.5ms", "/tmp infinity"]
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
    fn latency_targets_are_unit_file_lines_from_systemd_240() {
        let plan = Plan::parse(
            "[slice.a]\nIODeviceLatencyTargetSec = [\"/var/tmp 2.5ms\", \"/tmp infinity\"]\n",
            None,
        )
        .unwrap();
        let mut h = host(16 << 30);
        h.look_up_devices(plan.device_paths());
        let e = unit_files(&plan, &h, 240).unwrap();
        let t = text(&e, "a.slice");
        assert!(
            t.contains("IODeviceLatencyTargetSec=/var/tmp 2500us\nIODeviceLatencyTargetSec=/tmp infinity\n"),
            "{t}"
        );
        let e = unit_files(&plan, &h, 239).unwrap();
        let t = text(&e, "a.slice");
        assert!(!t.contains("\nIODeviceLatencyTargetSec=/"), "{t}");
        assert!(
            t.contains("[X-Bulkhead]\nIODeviceLatencyTargetSec=["),
            "{t}"
        );
        assert!(
            t.contains("systemd 239 does not know it (it came in systemd 240)"),
            "{t}"
        );
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
