//! TOML text -> [`Plan`], keeping the line and column of every key for messages.

use super::directives::{self, check, check_legacy, info, suggest, Raw, Scalar, LEGACY};
use super::{At, Plan, SliceName, SliceSpec, Source};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::collections::BTreeMap;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// The top-level sections a plan may have.
const SECTIONS: &[&str] = &["slice", "socket", "hugepages"];

pub(super) fn parse(source: Source) -> Result<Plan> {
    let root = match DeTable::parse(&source.text) {
        Ok(t) => t,
        Err(e) => {
            let loc = e.span().map(|s| source.loc(s.start)).unwrap_or_default();
            let msg = e.message().trim().to_string();
            return Err(Error::invalid(
                Diagnostic::error(format!("TOML syntax error: {msg}"))
                    .at(source.at(loc))
                    .hint("see https://toml.io for the syntax; slices are written [slice.NAME]"),
            ));
        }
    };
    let mut errors = Vec::new();
    let mut notes = Vec::new();
    let mut slices: BTreeMap<SliceName, SliceSpec> = BTreeMap::new();
    let mut sockets: BTreeMap<String, super::SocketSpec> = BTreeMap::new();
    let mut hugepages = None;

    for (key, value) in root.get_ref().iter() {
        let here = source.at(source.loc(key.span().start));
        match key.get_ref().as_ref() {
            "slice" => {
                let Some(table) = value.get_ref().as_table() else {
                    errors.push(
                        Diagnostic::error("'slice' must be a table of slices")
                            .at(here)
                            .hint("write [slice.db-server] followed by its directives"),
                    );
                    continue;
                };
                for (name_key, body) in table.iter() {
                    parse_slice(
                        &source,
                        name_key,
                        body,
                        &mut slices,
                        &mut errors,
                        &mut notes,
                    );
                }
            }
            "socket" => {
                let Some(table) = value.get_ref().as_table() else {
                    errors.push(
                        Diagnostic::error("'socket' must be a table of sockets")
                            .at(here)
                            .hint("write [socket.app] followed by its keys"),
                    );
                    continue;
                };
                for (name_key, body) in table.iter() {
                    if let Some(s) =
                        super::socket::parse_socket(&source, name_key, body, &mut errors)
                    {
                        sockets.insert(s.name.clone(), s);
                    }
                }
            }
            "hugepages" => {
                hugepages = crate::hugepages::parse(&source, key.span().start, value, &mut errors);
            }
            other => {
                let mut d = Diagnostic::error(format!("unknown section '{other}'")).at(here);
                d = match suggest(other, SECTIONS) {
                    Some("hugepages") => d.hint("did you mean [hugepages]?"),
                    Some(s) => d.hint(format!("did you mean [{s}.NAME]?")),
                    None => d.hint(
                        "a plan has [slice.NAME] and [socket.NAME] sections and one [hugepages]",
                    ),
                };
                errors.push(d);
            }
        }
    }

    // Parents the plan does not name are created with no limits, as systemd does.
    let named: Vec<SliceName> = slices.keys().cloned().collect();
    for name in named {
        for ancestor in name.lineage() {
            if !slices.contains_key(&ancestor) {
                notes.push(
                    Diagnostic::note(format!(
                        "slice '{ancestor}' is not in the plan; it is created as the parent of '{name}' with no limits"
                    ))
                    .at(source.label())
                    .hint(format!("add [slice.{ancestor}] to set its limits")),
                );
                slices.insert(
                    ancestor.clone(),
                    SliceSpec {
                        name: ancestor,
                        loc: None,
                        description: None,
                        directives: BTreeMap::new(),
                    },
                );
            }
        }
    }

    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    Ok(Plan {
        source,
        slices,
        sockets,
        hugepages,
        notes,
    })
}

fn parse_slice(
    source: &Source,
    name_key: &Spanned<std::borrow::Cow<'_, str>>,
    body: &Spanned<DeValue<'_>>,
    slices: &mut BTreeMap<SliceName, SliceSpec>,
    errors: &mut Vec<Diagnostic>,
    notes: &mut Vec<Diagnostic>,
) {
    let loc = source.loc(name_key.span().start);
    let raw_name = name_key.get_ref().as_ref();
    let name = match SliceName::parse(raw_name) {
        Ok(n) => n,
        Err(m) => {
            errors.push(
                Diagnostic::error(format!("invalid slice name: {m}"))
                    .at(source.at(loc))
                    .context(format!("[slice.\"{raw_name}\"]")),
            );
            return;
        }
    };
    let ctx = format!("[slice.{name}]");
    if slices.contains_key(&name) {
        errors.push(
            Diagnostic::error(format!(
                "slice '{name}' is defined twice (as '{raw_name}' and once more)"
            ))
            .at(source.at(loc))
            .context(ctx),
        );
        return;
    }
    let Some(table) = body.get_ref().as_table() else {
        errors.push(
            Diagnostic::error("a slice must be a table of directives")
                .at(source.at(loc))
                .context(ctx)
                .hint(format!(
                    "write [slice.{name}] on its own line, then Directive = value lines"
                )),
        );
        return;
    };
    let mut spec = SliceSpec {
        name: name.clone(),
        loc: Some(loc),
        description: None,
        directives: BTreeMap::new(),
    };
    let mut legacy: Vec<(&'static directives::Legacy, At<super::Value>)> = Vec::new();
    for (k, v) in table.iter() {
        let key = k.get_ref().as_ref();
        let kloc = source.loc(k.span().start);
        let raw_text = source.text[v.span()].trim().to_string();
        let dctx = format!("{ctx} {key}");
        let bad_value = |(m, hint): super::directives::Bad, raw_text: &str, kloc| {
            let d = Diagnostic::error(format!("{key} = {raw_text}: {m}"))
                .at(source.at(kloc))
                .context(ctx.clone());
            match hint {
                Some(h) => d.hint(h),
                None => d,
            }
        };
        let raw = match to_raw(v.get_ref()) {
            Ok(r) => r,
            Err(m) => {
                errors.push(Diagnostic::error(m).at(source.at(kloc)).context(dctx));
                continue;
            }
        };
        if let Some(i) = info(key) {
            match check(i.kind, i.name, &raw) {
                Ok(value) => {
                    if let super::Value::Text(t) = &value {
                        if i.name == "Description" {
                            spec.description = Some(t.clone());
                            continue;
                        }
                    }
                    spec.directives.insert(
                        i.name,
                        At {
                            value,
                            loc: kloc,
                            raw: raw_text,
                        },
                    );
                }
                Err(bad) => errors.push(bad_value(bad, &raw_text, kloc)),
            }
        } else if let Some(l) = LEGACY.iter().find(|l| l.name == key) {
            match check_legacy(l, &raw) {
                Ok(value) => {
                    let value = match l.convert {
                        Some(f) => value.convert_legacy(f),
                        None => value,
                    };
                    legacy.push((
                        l,
                        At {
                            value,
                            loc: kloc,
                            raw: raw_text,
                        },
                    ));
                }
                Err(bad) => errors.push(bad_value(bad, &raw_text, kloc)),
            }
        } else {
            let names = directives::directive_names();
            let mut d = Diagnostic::error(format!("unknown directive '{key}'"))
                .at(source.at(kloc))
                .context(ctx.clone());
            d = match suggest(key, &names) {
                Some(s) => d.hint(format!("did you mean {s}?")),
                None => d.hint(format!("a slice takes: {}", names.join(", "))),
            };
            errors.push(d);
        }
    }
    // Legacy directives fill in only what the modern ones leave unset, as systemd does.
    for (l, at) in legacy {
        let here = source.at(at.loc);
        if spec.directives.contains_key(l.becomes) {
            notes.push(
                Diagnostic::warning(format!(
                    "{} is a deprecated cgroup-v1 directive and is ignored because {} is set",
                    l.name, l.becomes
                ))
                .at(here)
                .context(ctx.clone())
                .hint(format!("remove {}", l.name)),
            );
        } else {
            notes.push(
                Diagnostic::warning(format!(
                    "{} is a deprecated cgroup-v1 directive; read as {} = {}",
                    l.name,
                    l.becomes,
                    show_value(&at.value)
                ))
                .at(here)
                .context(ctx.clone())
                .hint(format!("write {} instead", l.becomes)),
            );
            spec.directives.insert(l.becomes, at);
        }
    }
    slices.insert(name, spec);
}

fn show_value(v: &super::Value) -> String {
    match v {
        super::Value::CpuWeight(super::CpuWeight::Weight(w)) | super::Value::Weight(w) => {
            w.to_string()
        }
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn to_scalar(v: &DeValue<'_>) -> Result<Scalar, String> {
    Ok(match v {
        DeValue::String(s) => Scalar::Str(s.to_string()),
        DeValue::Integer(i) => Scalar::Int(
            i128::from_str_radix(&i.as_str().replace('_', ""), i.radix())
                .map_err(|_| format!("'{}' is not a valid integer", i.as_str()))?,
        ),
        DeValue::Float(f) => Scalar::Float(
            f.as_str()
                .replace('_', "")
                .parse()
                .map_err(|_| format!("'{}' is not a valid number", f.as_str()))?,
        ),
        DeValue::Boolean(b) => Scalar::Bool(*b),
        DeValue::Datetime(_) => return Err("a date is not a valid value here".into()),
        DeValue::Array(_) | DeValue::Table(_) => {
            return Err("expected a single value, not a list or table".into())
        }
    })
}

fn to_raw(v: &DeValue<'_>) -> Result<Raw, String> {
    match v {
        DeValue::Array(a) => a
            .iter()
            .map(|i| to_scalar(i.get_ref()))
            .collect::<Result<_, _>>()
            .map(Raw::List),
        DeValue::Table(t) => t
            .iter()
            .map(|(k, v)| Ok((k.get_ref().to_string(), to_scalar(v.get_ref())?)))
            .collect::<Result<_, String>>()
            .map(Raw::Table),
        other => to_scalar(other).map(Raw::Scalar),
    }
}
