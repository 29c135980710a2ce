//! `[hugepages]` TOML -> [`HugepagesSpec`]: pools, THP words and mounts, each value checked
//! and kept with its place in the file.

use super::{Amount, HugepagesSpec, MountSpec, PoolSpec, Word};
use crate::{Loc, Source};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::units::{human_bytes, parse_percent, parse_size};
use std::path::{Component, Path, PathBuf};
use toml::de::DeValue;
use toml::Spanned;

const KEYS: &[&str] = &["pools", "thp", "mount"];
const THP_KEYS: &[&str] = &["enabled", "defrag"];
const MOUNT_KEYS: &[&str] = &["path", "pagesize", "size", "mode"];

struct Cx<'a> {
    source: &'a Source,
    errors: &'a mut Vec<Diagnostic>,
}

impl Cx<'_> {
    fn loc(&self, span: std::ops::Range<usize>) -> Loc {
        self.source.loc(span.start)
    }
    fn raw(&self, span: std::ops::Range<usize>) -> String {
        self.source.text[span].trim().to_string()
    }
    fn err(&mut self, loc: Loc, ctx: &str, msg: impl Into<String>, hint: Option<String>) {
        let mut d = Diagnostic::error(msg)
            .at(self.source.at(loc))
            .context(ctx.to_string());
        if let Some(h) = hint {
            d = d.hint(h);
        }
        self.errors.push(d);
    }
    fn unknown_key(&mut self, loc: Loc, ctx: &str, key: &str, known: &[&str]) {
        let names: Vec<String> = known.iter().map(|s| s.to_string()).collect();
        let hint = match crate::nearest(key, &names) {
            Some(s) => format!("did you mean {s}?"),
            None => format!("{ctx} takes: {}", known.join(", ")),
        };
        self.err(loc, ctx, format!("unknown key '{key}'"), Some(hint));
    }
}

/// Parse the value of the top-level `hugepages` key. Errors go to `errors` (with
/// file:line:col); `None` when the section is unusable.
pub(crate) fn parse(
    source: &Source,
    key_start: usize,
    value: &Spanned<DeValue<'_>>,
    errors: &mut Vec<Diagnostic>,
) -> Option<HugepagesSpec> {
    let mut cx = Cx { source, errors };
    let loc = source.loc(key_start);
    let Some(table) = value.get_ref().as_table() else {
        cx.err(
            loc,
            "[hugepages]",
            "'hugepages' must be a table",
            Some(
                "write [hugepages] on its own line, then pools = ..., thp = ..., mount = ..."
                    .into(),
            ),
        );
        return None;
    };
    let before = cx.errors.len();
    let mut spec = HugepagesSpec {
        loc,
        ..Default::default()
    };
    for (k, v) in table.iter() {
        let kloc = cx.loc(k.span());
        match k.get_ref().as_ref() {
            "pools" => parse_pools(&mut cx, v, &mut spec.pools),
            "thp" => parse_thp(&mut cx, v, &mut spec),
            "mount" => match v.get_ref() {
                DeValue::Array(items) => {
                    for i in items.iter() {
                        if let Some(m) = parse_mount(&mut cx, i) {
                            spec.mounts.push(m);
                        }
                    }
                }
                _ => {
                    if let Some(m) = parse_mount(&mut cx, v) {
                        spec.mounts.push(m);
                    }
                }
            },
            other => cx.unknown_key(kloc, "[hugepages]", other, KEYS),
        }
    }
    // Two mounts on one path.
    for (i, m) in spec.mounts.iter().enumerate() {
        if spec.mounts[..i].iter().any(|o| o.path == m.path) {
            let (loc, path) = (m.loc, m.path.display().to_string());
            cx.err(
                loc,
                "[hugepages] mount",
                format!("{path} is mounted twice"),
                Some("give each hugetlbfs mount its own path".into()),
            );
        }
    }
    (cx.errors.len() == before).then_some(spec)
}

fn int_value(i: &toml::de::DeInteger<'_>) -> Option<i128> {
    i128::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok()
}

/// A pool amount: a page count (integer), memory ("8G") or a share of RAM ("25%").
fn amount(v: &DeValue<'_>, raw: &str) -> std::result::Result<Amount, (String, String)> {
    let count_hint =
        || "write a page count (4096), memory with a unit (\"8G\") or a share of RAM (\"25%\")";
    match v {
        DeValue::Integer(i) => match int_value(i) {
            Some(n) if n < 0 => Err((
                format!("{raw}: a pool cannot hold a negative number of pages"),
                "write 0 to empty the pool".into(),
            )),
            Some(n) => u64::try_from(n)
                .map(Amount::Pages)
                .map_err(|_| (format!("{raw}: too many pages"), count_hint().into())),
            None => Err((format!("{raw} is not a valid integer"), count_hint().into())),
        },
        DeValue::String(s) => {
            let t = s.trim();
            if t.starts_with('-') {
                return Err((
                    format!("{raw}: a pool cannot hold negative memory"),
                    "write \"0\" or 0 to empty the pool".into(),
                ));
            }
            if let Some(p) = parse_percent(t) {
                let p = p.map_err(|e| (e, count_hint().into()))?;
                if p > 1.0 {
                    return Err((
                        format!("{raw} is more than 100% of RAM"),
                        "a pool can hold at most the machine's RAM".into(),
                    ));
                }
                return Ok(Amount::Percent(p));
            }
            if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
                return Err((
                    format!("{raw} has no unit"),
                    format!("write {t} (without quotes) for {t} pages, or \"{t}M\" for memory"),
                ));
            }
            parse_size(t, 1024)
                .map(Amount::Bytes)
                .map_err(|e| (e, count_hint().into()))
        }
        DeValue::Float(_) => Err((
            format!("{raw} is not a whole number of pages"),
            count_hint().into(),
        )),
        _ => Err((format!("{raw} is not a pool size"), count_hint().into())),
    }
}

fn page_size_key(s: &str) -> Option<u64> {
    bulkhead_sys::host::parse_page_size(s).filter(|b| *b >= 4096 && b.is_power_of_two())
}

fn parse_pools(cx: &mut Cx<'_>, v: &Spanned<DeValue<'_>>, out: &mut Vec<PoolSpec>) {
    const CTX: &str = "[hugepages] pools";
    let Some(t) = v.get_ref().as_table() else {
        let loc = cx.loc(v.span());
        cx.err(
            loc,
            CTX,
            "pools must be a table of page size = amount",
            Some("write pools = { \"2M\" = \"8G\", \"1G\" = 0 }".into()),
        );
        return;
    };
    for (k, val) in t.iter() {
        let kloc = cx.loc(k.span());
        let key = k.get_ref().as_ref();
        let Some(size) = page_size_key(key) else {
            cx.err(
                kloc,
                CTX,
                format!("'{key}' is not a page size"),
                Some("write sizes as the kernel names them: \"2M\", \"1G\"".into()),
            );
            continue;
        };
        let mut push = |cx: &mut Cx<'_>, node: Option<u32>, val: &Spanned<DeValue<'_>>| {
            let vloc = cx.loc(val.span());
            let raw = cx.raw(val.span());
            if out.iter().any(|p| p.size == size && p.node == node) {
                cx.err(
                    vloc,
                    CTX,
                    format!(
                        "the {} pool{} is given twice",
                        human_bytes(size),
                        node.map(|n| format!(" of node {n}")).unwrap_or_default()
                    ),
                    None,
                );
                return;
            }
            match amount(val.get_ref(), &raw) {
                Ok(amount) => out.push(PoolSpec {
                    size,
                    node,
                    amount,
                    raw: format!("\"{}\" = {raw}", human_bytes(size)),
                    loc: vloc,
                }),
                Err((m, h)) => cx.err(vloc, CTX, m, Some(h)),
            }
        };
        match val.get_ref() {
            DeValue::Table(nodes) => {
                if nodes.is_empty() {
                    let loc = cx.loc(val.span());
                    cx.err(loc, CTX, format!("the {key} pool names no NUMA node"), None);
                }
                for (nk, nv) in nodes.iter() {
                    let name = nk.get_ref().as_ref();
                    let num = name.strip_prefix("node").unwrap_or(name);
                    match num.parse::<u32>() {
                        Ok(n) => push(cx, Some(n), nv),
                        Err(_) => {
                            let loc = cx.loc(nk.span());
                            cx.err(
                                loc,
                                CTX,
                                format!("'{name}' is not a NUMA node"),
                                Some(format!(
                                    "per-node pools are written {{ node0 = \"4G\", node1 = \"4G\" }}; or give the {key} pool one amount"
                                )),
                            );
                        }
                    }
                }
            }
            _ => push(cx, None, val),
        }
    }
    // A size given both for the whole machine and per node.
    for p in out.iter().filter(|p| p.node.is_none()) {
        if out.iter().any(|q| q.size == p.size && q.node.is_some()) {
            let (loc, size) = (p.loc, human_bytes(p.size));
            cx.err(
                loc,
                CTX,
                format!("the {size} pool is given both in total and per node"),
                Some("give either one amount or one per node".into()),
            );
        }
    }
}

fn word(cx: &mut Cx<'_>, v: &Spanned<DeValue<'_>>, ctx: &str) -> Option<Word> {
    let loc = cx.loc(v.span());
    match v.get_ref() {
        DeValue::String(s) if !s.trim().is_empty() => Some(Word {
            value: s.trim().to_string(),
            loc,
        }),
        _ => {
            let raw = cx.raw(v.span());
            cx.err(
                loc,
                ctx,
                format!("{raw} is not a THP mode"),
                Some("write a mode as a string: \"madvise\"".into()),
            );
            None
        }
    }
}

fn parse_thp(cx: &mut Cx<'_>, v: &Spanned<DeValue<'_>>, spec: &mut HugepagesSpec) {
    const CTX: &str = "[hugepages] thp";
    match v.get_ref() {
        DeValue::Table(t) => {
            for (k, val) in t.iter() {
                let kloc = cx.loc(k.span());
                match k.get_ref().as_ref() {
                    "enabled" => spec.thp_enabled = word(cx, val, CTX),
                    "defrag" => spec.thp_defrag = word(cx, val, CTX),
                    other => cx.unknown_key(kloc, CTX, other, THP_KEYS),
                }
            }
        }
        _ => spec.thp_enabled = word(cx, v, CTX),
    }
}

fn parse_mount(cx: &mut Cx<'_>, v: &Spanned<DeValue<'_>>) -> Option<MountSpec> {
    const CTX: &str = "[hugepages] mount";
    let loc = cx.loc(v.span());
    let Some(t) = v.get_ref().as_table() else {
        cx.err(
            loc,
            CTX,
            "a mount must be a table",
            Some("write mount = { path = \"/dev/hugepages\", pagesize = \"2M\" }".into()),
        );
        return None;
    };
    let before = cx.errors.len();
    let mut m = MountSpec {
        path: PathBuf::new(),
        pagesize: None,
        size: None,
        mode: None,
        loc,
    };
    let mut have_path = false;
    for (k, val) in t.iter() {
        let kloc = cx.loc(k.span());
        let vloc = cx.loc(val.span());
        let raw = cx.raw(val.span());
        match (k.get_ref().as_ref(), val.get_ref()) {
            ("path", DeValue::String(s)) => {
                if let Some(p) = mount_path(cx, vloc, s, &raw) {
                    m.path = p;
                    have_path = true;
                }
            }
            ("pagesize", DeValue::String(s)) => match page_size_key(s) {
                Some(b) => m.pagesize = Some(b),
                None => cx.err(
                    vloc,
                    CTX,
                    format!("pagesize {raw} is not a page size"),
                    Some("write \"2M\" or \"1G\"".into()),
                ),
            },
            ("size", DeValue::String(s)) => match amount(val.get_ref(), &raw) {
                Ok(Amount::Percent(p)) => m.size = Some(Amount::Percent(p)),
                Ok(a) => m.size = Some(a),
                Err((msg, _)) => cx.err(
                    vloc,
                    CTX,
                    msg,
                    Some(format!(
                        "size caps the mount: memory (\"4G\") or a share of its pool (\"50%\"), not {s}"
                    )),
                ),
            },
            ("mode", v @ (DeValue::String(_) | DeValue::Integer(_))) => {
                m.mode = mount_mode(cx, vloc, v, &raw).or(m.mode)
            }
            (k @ ("path" | "pagesize" | "size"), _) => cx.err(
                vloc,
                CTX,
                format!("{k} = {raw}: expected a string"),
                None,
            ),
            (other, _) => cx.unknown_key(kloc, CTX, other, MOUNT_KEYS),
        }
    }
    if !have_path && cx.errors.len() == before {
        cx.err(
            loc,
            CTX,
            "a mount needs a path",
            Some("write mount = { path = \"/dev/hugepages\", pagesize = \"2M\" }".into()),
        );
    }
    (cx.errors.len() == before).then_some(m)
}

/// A mount's `path`: absolute, without `.`, `..` or `,`.
fn mount_path(cx: &mut Cx<'_>, vloc: Loc, s: &str, raw: &str) -> Option<PathBuf> {
    const CTX: &str = "[hugepages] mount";
    let p = Path::new(s);
    if !p.is_absolute() {
        cx.err(
            vloc,
            CTX,
            format!("path {raw} is not absolute"),
            Some("write the full path, e.g. \"/dev/hugepages\"".into()),
        );
    } else if p
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        cx.err(vloc, CTX, format!("path {raw} contains '.' or '..'"), None);
    } else if s.contains(',') {
        cx.err(vloc, CTX, format!("path {raw} contains ','"), None);
    } else {
        return Some(p.to_path_buf());
    }
    None
}

/// A mount's `mode`: an octal string or an octal integer (other types are unknown keys).
fn mount_mode(cx: &mut Cx<'_>, vloc: Loc, v: &DeValue<'_>, raw: &str) -> Option<u32> {
    const CTX: &str = "[hugepages] mount";
    let (msg, hint) = match v {
        DeValue::String(s) => match u32::from_str_radix(s.trim(), 8) {
            Ok(n) if n <= 0o7777 => return Some(n),
            _ => (
                format!("mode {raw} is not an octal file mode"),
                Some("write it like chmod: \"1770\"".into()),
            ),
        },
        DeValue::Integer(i) if i.radix() == 8 => match int_value(i) {
            Some(n) if (0..=0o7777).contains(&n) => return Some(n as u32),
            _ => (format!("mode {raw} is not a file mode"), None),
        },
        _ => (
            format!("mode {raw} is a decimal number"),
            Some(format!(
                "write it as a string (\"{raw}\") or an octal number (0o{raw})"
            )),
        ),
    };
    cx.err(vloc, CTX, msg, hint);
    None
}
