//! One `[slice.NAME]` section: its name, each directive type-checked, and the deprecated
//! cgroup-v1 directives read as their modern names where those are not set.

use super::raw::to_raw;
use crate::directives::{self, check, check_legacy, info, suggest, Bad, Legacy, LEGACY};
use crate::{At, CpuWeight, SliceName, SliceSpec, Source, Value};
use bulkhead_sys::error::Diagnostic;
use std::collections::BTreeMap;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// Where the findings go.
pub struct Out<'a> {
    pub slices: &'a mut BTreeMap<SliceName, SliceSpec>,
    pub errors: &'a mut Vec<Diagnostic>,
    pub notes: &'a mut Vec<Diagnostic>,
}

pub fn parse_slice(
    source: &Source,
    name_key: &Spanned<std::borrow::Cow<'_, str>>,
    body: &Spanned<DeValue<'_>>,
    out: Out<'_>,
) {
    let loc = source.loc(name_key.span().start);
    let Some((name, table)) = header(source, name_key, body, &*out.slices, out.errors) else {
        return;
    };
    let ctx = format!("[slice.{name}]");
    let mut spec = SliceSpec {
        name: name.clone(),
        loc: Some(loc),
        description: None,
        directives: BTreeMap::new(),
        services: Vec::new(),
    };
    let mut legacy: Vec<(&'static Legacy, At<Value>)> = Vec::new();
    for (k, v) in table.iter() {
        let d = Directive {
            source,
            ctx: &ctx,
            key: k.get_ref().as_ref(),
            loc: source.loc(k.span().start),
            raw_text: source.text[v.span()].trim().to_string(),
        };
        if let Err(e) = d.read(v.get_ref(), &mut spec, &mut legacy) {
            out.errors.push(e);
        }
    }
    merge_legacy(source, &ctx, legacy, &mut spec, out.notes);
    out.slices.insert(name, spec);
}

/// The slice's name (valid, not defined twice) and its table.
fn header<'t>(
    source: &Source,
    name_key: &Spanned<std::borrow::Cow<'_, str>>,
    body: &'t Spanned<DeValue<'_>>,
    slices: &BTreeMap<SliceName, SliceSpec>,
    errors: &mut Vec<Diagnostic>,
) -> Option<(SliceName, &'t DeTable<'t>)> {
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
            return None;
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
        return None;
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
        return None;
    };
    Some((name, table))
}

/// One `Directive = value` line.
struct Directive<'a> {
    source: &'a Source,
    ctx: &'a str,
    key: &'a str,
    loc: crate::Loc,
    raw_text: String,
}

impl Directive<'_> {
    fn at(&self, value: Value) -> At<Value> {
        At {
            value,
            loc: self.loc,
            raw: self.raw_text.clone(),
        }
    }

    fn at_service(&self, value: crate::services::Service) -> At<crate::services::Service> {
        At {
            value,
            loc: self.loc,
            raw: self.raw_text.clone(),
        }
    }

    fn bad_value(&self, (m, hint): Bad) -> Diagnostic {
        let d = Diagnostic::error(format!("{} = {}: {m}", self.key, self.raw_text))
            .at(self.source.at(self.loc))
            .context(self.ctx.to_string());
        match hint {
            Some(h) => d.hint(h),
            None => d,
        }
    }

    /// Check the value and file it: a directive, the description, or a legacy directive for
    /// later.
    fn read(
        &self,
        v: &DeValue<'_>,
        spec: &mut SliceSpec,
        legacy: &mut Vec<(&'static Legacy, At<Value>)>,
    ) -> Result<(), Diagnostic> {
        if self.key == crate::services::KEY {
            let names = crate::services::parse(v, &self.raw_text).map_err(|(m, hint)| {
                Diagnostic::error(m)
                    .at(self.source.at(self.loc))
                    .context(format!("{} {}", self.ctx, self.key))
                    .hint(hint)
            })?;
            spec.services = names.into_iter().map(|n| self.at_service(n)).collect();
            return Ok(());
        }
        let raw = to_raw(v).map_err(|m| {
            Diagnostic::error(m)
                .at(self.source.at(self.loc))
                .context(format!("{} {}", self.ctx, self.key))
        })?;
        if let Some(i) = info(self.key) {
            let value = check(i.kind, i.name, &raw).map_err(|b| self.bad_value(b))?;
            match value {
                Value::Text(t) if i.name == "Description" => spec.description = Some(t),
                value => {
                    spec.directives.insert(i.name, self.at(value));
                }
            }
            return Ok(());
        }
        if let Some(l) = LEGACY.iter().find(|l| l.name == self.key) {
            let value = check_legacy(l, &raw).map_err(|b| self.bad_value(b))?;
            let value = match l.convert {
                Some(f) => value.convert_legacy(f),
                None => value,
            };
            legacy.push((l, self.at(value)));
            return Ok(());
        }
        let names = directives::directive_names();
        let d = Diagnostic::error(format!("unknown directive '{}'", self.key))
            .at(self.source.at(self.loc))
            .context(self.ctx.to_string());
        Err(match suggest(self.key, &names) {
            Some(s) => d.hint(format!("did you mean {s}?")),
            None => d.hint(format!("a slice takes: {}", names.join(", "))),
        })
    }
}

/// Legacy directives fill in only what the modern ones leave unset, as systemd does.
fn merge_legacy(
    source: &Source,
    ctx: &str,
    legacy: Vec<(&'static Legacy, At<Value>)>,
    spec: &mut SliceSpec,
    notes: &mut Vec<Diagnostic>,
) {
    for (l, at) in legacy {
        let here = source.at(at.loc);
        if spec.directives.contains_key(l.becomes) {
            notes.push(
                Diagnostic::warning(format!(
                    "{} is a deprecated cgroup-v1 directive and is ignored because {} is set",
                    l.name, l.becomes
                ))
                .at(here)
                .context(ctx.to_string())
                .hint(format!("remove {}", l.name)),
            );
            continue;
        }
        notes.push(
            Diagnostic::warning(format!(
                "{} is a deprecated cgroup-v1 directive; read as {} = {}",
                l.name,
                l.becomes,
                show_value(&at.value)
            ))
            .at(here)
            .context(ctx.to_string())
            .hint(format!("write {} instead", l.becomes)),
        );
        spec.directives.insert(l.becomes, at);
    }
}

fn show_value(v: &Value) -> String {
    match v {
        Value::CpuWeight(CpuWeight::Weight(w)) | Value::Weight(w) => w.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}
