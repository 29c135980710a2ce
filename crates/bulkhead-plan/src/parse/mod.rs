//! TOML text -> [`Plan`], keeping the line and column of every key for messages.

mod raw;
mod slice;

use crate::directives::suggest;
use crate::{Plan, SliceName, SliceSpec, Source};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::collections::BTreeMap;
use toml::de::DeTable;

/// The top-level sections a plan may have.
const SECTIONS: &[&str] = &[
    "slice",
    "socket",
    "place",
    "hugepages",
    "guard",
    "iocost",
    "check",
];

pub(super) fn parse(source: Source) -> Result<Plan> {
    let root = match DeTable::parse(&source.text) {
        Ok(t) => t,
        Err(e) => return Err(syntax_error(&source, &e)),
    };
    let mut errors = Vec::new();
    let mut notes = Vec::new();
    let mut slices: BTreeMap<SliceName, SliceSpec> = BTreeMap::new();
    let mut sockets: BTreeMap<String, crate::SocketSpec> = BTreeMap::new();
    let mut hugepages = None;
    let mut guard = None;
    let mut iocost = None;
    let mut check = None;
    let mut place = BTreeMap::new();

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
                    let out = slice::Out {
                        slices: &mut slices,
                        errors: &mut errors,
                        notes: &mut notes,
                    };
                    slice::parse_slice(&source, name_key, body, out);
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
                        crate::socket::parse_socket(&source, name_key, body, &mut errors)
                    {
                        sockets.insert(s.name.clone(), s);
                    }
                }
            }
            "place" => {
                crate::place::parse(&source, key.span().start, value, &mut place, &mut errors);
            }
            "hugepages" => {
                hugepages = crate::hugepages::parse(&source, key.span().start, value, &mut errors);
            }
            "guard" => {
                guard = crate::guard::parse(&source, key.span().start, value, &mut errors);
            }
            "iocost" => {
                iocost = crate::iocost::parse(&source, key.span().start, value, &mut errors);
            }
            "check" => {
                check = crate::check::parse(&source, key.span().start, value, &mut errors);
            }
            other => errors.push(unknown_section(other, here)),
        }
    }

    add_implicit_parents(&source, &mut slices, &mut notes);
    if let Some(g) = &guard {
        crate::guard::check_slices(&source, g, &slices, &mut errors);
    }
    crate::socket::check_slices(&source, &sockets, &slices, &mut errors);
    crate::services::check_unique(&source, &slices, &mut errors);
    crate::place::check_slices(&source, &place, &slices, &mut errors);
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    Ok(Plan {
        source,
        slices,
        sockets,
        place,
        hugepages,
        guard,
        iocost,
        check,
        notes,
    })
}

/// The plan is not TOML: where, and what the error is about.
fn syntax_error(source: &Source, e: &toml::de::Error) -> Error {
    let loc = e.span().map(|s| source.loc(s.start)).unwrap_or_default();
    let mut msg = e.message().trim().to_string();
    // Quote what the error is about ("duplicate key: `db-server`"), when it is short.
    let near = e
        .span()
        .and_then(|s| source.text.get(s))
        .map(str::trim)
        .unwrap_or_default();
    if !near.is_empty() && near.chars().count() <= 60 && !near.contains('\n') {
        msg = format!("{msg}: `{near}`");
    }
    let line = e.span().and_then(|s| {
        let start = source.text.get(..s.start)?.rfind('\n').map_or(0, |i| i + 1);
        source.text.get(start..)?.lines().next()
    });
    let hint = line.and_then(unquoted_value).unwrap_or_else(|| {
        "see https://toml.io for the syntax; slices are written [slice.NAME]".to_string()
    });
    Error::invalid(
        Diagnostic::error(format!("TOML syntax error: {msg}"))
            .at(source.at(loc))
            .hint(hint),
    )
}

/// A line `KEY = 1.5G` whose value TOML cannot read because it is a bare word with a unit
/// (a size, a share, a duration, `idle`): the hint to quote it.
fn unquoted_value(line: &str) -> Option<String> {
    let (key, value) = line.split_once('=')?;
    let key = key.trim();
    let value = value.split('#').next()?.trim();
    let bare = |c: char| c.is_ascii_alphanumeric() || ".%_-+".contains(c);
    let plain_key = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let word = !value.is_empty()
        && value.chars().all(bare)
        && value.chars().any(|c| c.is_ascii_alphabetic() || c == '%');
    (plain_key && word).then(|| {
        format!("sizes, percentages, durations and words are strings in TOML: write {key} = \"{value}\"")
    })
}

fn unknown_section(other: &str, here: String) -> Diagnostic {
    let mut d = Diagnostic::error(format!("unknown section '{other}'")).at(here);
    d = match suggest(other, SECTIONS) {
        Some(s @ ("hugepages" | "guard" | "iocost" | "check")) => {
            d.hint(format!("did you mean [{s}]?"))
        }
        Some(s) => d.hint(format!("did you mean [{s}.NAME]?")),
        None => d.hint(
            "a plan has [slice.NAME], [socket.NAME] and [place.NAME] sections, one [hugepages], one [guard], one [iocost] and one [check]",
        ),
    };
    d
}

/// Parents the plan does not name are created with no limits, as systemd does.
fn add_implicit_parents(
    source: &Source,
    slices: &mut BTreeMap<SliceName, SliceSpec>,
    notes: &mut Vec<Diagnostic>,
) {
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
                        services: Vec::new(),
                    },
                );
            }
        }
    }
}
