//! `bulkhead import`: systemd `.slice` files (with their `.d/*.conf` drop-ins) -> plan TOML.
//!
//! The result goes through the plan parser before it is printed, so what `import` writes is
//! a plan that loads.

use super::directives::{info, LEGACY};
use super::SliceName;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One slice read from a unit file and its drop-ins.
#[derive(Debug, Default)]
struct Unit {
    description: Option<String>,
    /// directive -> values in order (systemd: later assignments win, empty resets, device
    /// directives accumulate).
    directives: BTreeMap<String, Vec<String>>,
    /// `[X-Bulkhead]`: plan values (TOML) that `bulkhead export` kept because systemd
    /// cannot say them; they win over the `[Slice]` lines for the same directive.
    kept: BTreeMap<String, String>,
    comments: Vec<String>,
}

/// Directives whose assignments accumulate, one per device.
fn accumulates(key: &str) -> bool {
    matches!(
        key,
        "IODeviceWeight"
            | "IODeviceLatencyTargetSec"
            | "IOReadBandwidthMax"
            | "IOWriteBandwidthMax"
            | "IOReadIOPSMax"
            | "IOWriteIOPSMax"
            | "BlockIODeviceWeight"
            | "BlockIOReadBandwidth"
            | "BlockIOWriteBandwidth"
    )
}

/// Split unit-file text into (section, key, value, line, value as written) entries, joining
/// `\` continuations.
fn entries(text: &str) -> Vec<(String, String, String, usize, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut pending: Option<(String, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let (mut buf, start) = match pending.take() {
            Some((b, s)) => (b, s),
            None => {
                let t = line.trim();
                if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
                    continue;
                }
                if t.starts_with('[') && t.ends_with(']') {
                    section = t[1..t.len() - 1].to_string();
                    continue;
                }
                (String::new(), line_no)
            }
        };
        let t = line.trim_end();
        if let Some(cont) = t.strip_suffix('\\') {
            buf.push_str(cont);
            buf.push(' ');
            pending = Some((buf, start));
            continue;
        }
        buf.push_str(t);
        if let Some((k, v)) = buf.split_once('=') {
            out.push((
                section.clone(),
                k.trim().to_string(),
                unquote(v.trim()),
                start,
                v.trim().to_string(),
            ));
        }
    }
    out
}

fn unquote(v: &str) -> String {
    if v.len() >= 2
        && ((v.starts_with('"') && v.ends_with('"')) || (v.starts_with('\'') && v.ends_with('\'')))
    {
        v[1..v.len() - 1].to_string()
    } else {
        v.to_string()
    }
}

fn read(path: &Path, unit: &mut Unit) -> Result<()> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::invalid(
            Diagnostic::error(format!(
                "cannot read: {}",
                bulkhead_sys::error::errno_text(&e)
            ))
            .at(path.display().to_string()),
        )
    })?;
    for (section, key, value, line, raw) in entries(&text) {
        let here = format!("{}:{line}", path.display());
        match section.as_str() {
            "Unit" => {
                if key == "Description" {
                    unit.description = Some(value.replace("%%", "%"));
                } else {
                    unit.comments.push(format!(
                        "{here}: [Unit] {key}={value} (unit ordering; not needed without systemd)"
                    ));
                }
            }
            "Slice" => {
                let list = unit.directives.entry(key.clone()).or_default();
                if value.is_empty() {
                    list.clear(); // an empty assignment resets, as in systemd
                } else if accumulates(&key) {
                    // Device paths take systemd's specifiers: %% is a literal %.
                    list.push(value.replace("%%", "%"));
                } else {
                    *list = vec![value];
                }
            }
            "Install" => unit.comments.push(format!(
                "{here}: [Install] {key}={value} (not needed without systemd)"
            )),
            "X-Bulkhead" => {
                unit.kept.insert(key, raw);
            }
            // systemd ignores sections whose names start with X-; so does import.
            other if other.starts_with("X-") => {}
            other => {
                return Err(Error::invalid(
                    Diagnostic::error(format!("section [{other}] does not belong in a slice unit"))
                        .at(here)
                        .hint("a .slice file has [Unit], [Slice] and [Install] sections"),
                ))
            }
        }
    }
    Ok(())
}

/// The drop-in files systemd would read for `x.slice`: `x.slice.d/*.conf`, in name order.
fn drop_ins(path: &Path) -> Vec<PathBuf> {
    let Some(name) = path.file_name() else {
        return vec![];
    };
    let mut dir = path.to_path_buf();
    dir.set_file_name(format!("{}.d", name.to_string_lossy()));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// A TOML value for a systemd value: numbers stay numbers, the rest are strings.
fn toml_value(key: &str, v: &str) -> String {
    let numeric = matches!(
        key,
        "CPUWeight" | "IOWeight" | "CPUShares" | "BlockIOWeight" | "TasksMax"
    );
    let plain = (numeric && v.parse::<u64>().is_ok())
        || (matches!(v, "true" | "false") && key.ends_with("Accounting"));
    if plain {
        v.to_string()
    } else {
        toml_string(v)
    }
}

fn toml_string(v: &str) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| format!("{v:?}"))
}

fn bool_value(v: &str) -> Option<bool> {
    match v {
        "yes" | "true" | "on" | "1" => Some(true),
        "no" | "false" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// Convert slice unit files to plan TOML. Drop-ins next to each file are read too.
pub fn import(files: &[PathBuf]) -> Result<String> {
    let mut units: BTreeMap<SliceName, (Unit, Vec<PathBuf>)> = BTreeMap::new();
    for f in files {
        let fname = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(stem) = fname.strip_suffix(".slice") else {
            return Err(Error::invalid(
                Diagnostic::error("not a slice unit: the file name must end in .slice")
                    .at(f.display().to_string())
                    .hint("import takes files like scylla-helper.slice; drop-ins in scylla-helper.slice.d/ are read with them"),
            ));
        };
        let name = SliceName::parse(stem).map_err(|m| {
            Error::invalid(
                Diagnostic::error(format!("invalid slice name: {m}")).at(f.display().to_string()),
            )
        })?;
        let mut unit = Unit::default();
        read(f, &mut unit)?;
        let mut read_from = vec![f.clone()];
        for d in drop_ins(f) {
            read(&d, &mut unit)?;
            read_from.push(d);
        }
        units.insert(name, (unit, read_from));
    }

    let mut out = String::new();
    let _ = writeln!(out, "# Imported by bulkhead from systemd slice units.");
    for (name, (unit, from)) in &units {
        let _ = writeln!(out);
        for f in from {
            let _ = writeln!(out, "# from {}", f.display());
        }
        for c in &unit.comments {
            let _ = writeln!(out, "# dropped {c}");
        }
        let _ = writeln!(out, "[slice.{}]", name.toml_key());
        if let Some(d) = &unit.description {
            let _ = writeln!(out, "Description = {}", toml_string(d));
        }
        for (key, values) in &unit.directives {
            if values.is_empty() {
                continue;
            }
            // A kept plan value replaces the directive and the legacy ones that become it.
            let becomes = match key.as_str() {
                "BlockIOAccounting" => "IOAccounting",
                k => LEGACY.iter().find(|l| l.name == k).map_or(k, |l| l.becomes),
            };
            if unit.kept.contains_key(key) || unit.kept.contains_key(becomes) {
                continue;
            }
            if key.ends_with("Accounting") {
                match bool_value(&values[0]) {
                    Some(b) => {
                        let _ = writeln!(out, "{key} = {b}");
                    }
                    None => {
                        let _ = writeln!(out, "{key} = {}", toml_string(&values[0]));
                    }
                }
                continue;
            }
            let known = info(key).is_some() || LEGACY.iter().any(|l| l.name == key);
            if !known {
                let _ = writeln!(
                    out,
                    "# {key}={} is not a resource directive bulkhead knows; dropped",
                    values.join(" ")
                );
                continue;
            }
            if accumulates(key) {
                let items: Vec<String> = values.iter().map(|v| toml_string(v)).collect();
                let _ = writeln!(out, "{key} = [{}]", items.join(", "));
            } else {
                let _ = writeln!(out, "{key} = {}", toml_value(key, &values[0]));
            }
        }
        for (key, value) in &unit.kept {
            let _ = writeln!(out, "{key} = {value}");
        }
    }
    // What import writes must load as a plan.
    super::Plan::parse(&out, Some(Path::new("<imported>")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scylla_helper_with_drop_in() {
        let dir = std::env::temp_dir().join(format!("bulkhead-import-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("scylla-helper.slice.d")).unwrap();
        std::fs::write(
            dir.join("scylla-helper.slice"),
            "[Unit]\nDescription=Slice used to run companion programs to Scylla. Memory, CPU and IO restricted\nBefore=slices.target\n\n[Slice]\nMemoryAccounting=true\nIOAccounting=true\nCPUAccounting=true\n\nCPUWeight=10\nIOWeight=10\n\nMemoryHigh=4%\nMemoryLimit=5%\nCPUShares=10\nBlockIOWeight=10\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("scylla-helper.slice.d/memory.conf"),
            "[Slice]\nMemoryHigh=1200M\nMemoryLimit=1400M\n",
        )
        .unwrap();
        let toml = import(&[dir.join("scylla-helper.slice")]).unwrap();
        let plan = crate::Plan::parse(&toml, None).unwrap();
        let s = &plan.slices[&SliceName::parse("scylla-helper").unwrap()];
        assert!(toml.contains("MemoryHigh = \"1200M\""), "{toml}");
        assert!(
            s.directives.contains_key("MemoryMax"),
            "MemoryLimit becomes MemoryMax"
        );
        assert_eq!(
            s.directives["CPUWeight"].value,
            crate::Value::CpuWeight(crate::CpuWeight::Weight(10)),
            "CPUWeight wins over the legacy CPUShares"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Debian 12's own slice units, as `bulkhead import /lib/systemd/system/*.slice` reads
    /// them: systemd writes a '-' inside one level as \x2d.
    #[test]
    fn systemds_escaped_unit_names_import_and_parse() {
        let dir = std::env::temp_dir().join(format!("bulkhead-import-esc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let names = [
            "system-systemd\\x2dcryptsetup.slice",
            "machine.slice",
            "user.slice",
        ];
        for n in names {
            std::fs::write(
                dir.join(n),
                "[Unit]\nDescription=x\nDefaultDependencies=no\n",
            )
            .unwrap();
        }
        let files: Vec<_> = names.iter().map(|n| dir.join(n)).collect();
        let toml = import(&files).unwrap();
        assert!(
            toml.contains("[slice.'system-systemd\\x2dcryptsetup']"),
            "{toml}"
        );
        let plan = crate::Plan::parse(&toml, None).unwrap();
        let n = SliceName::parse("system-systemd\\x2dcryptsetup").unwrap();
        assert!(plan.slices.contains_key(&n), "{toml}");
        assert_eq!(n.parent().unwrap().as_str(), "system");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn continuation_and_reset() {
        let e =
            entries("[Slice]\nIOReadBandwidthMax=/dev/vda \\\n 10M\nMemoryMax=1G\nMemoryMax=\n");
        assert_eq!(e[0].1, "IOReadBandwidthMax");
        assert!(e[0].2.starts_with("/dev/vda ") && e[0].2.ends_with(" 10M"));
        assert_eq!(e[2].2, "");
    }
}
