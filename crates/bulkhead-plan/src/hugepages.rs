//! The `[hugepages]` plan section: TOML -> [`HugepagesSpec`] (type-checked, with the line and
//! column of every value), then [`resolve`] against the kernel's [`Facts`] -> [`Resolved`]
//! (page counts per pool, THP words the kernel offers, mount options).
//!
//! ```toml
//! [hugepages]
//! pools = { "2M" = "8G", "1G" = 0 }                  # memory, a page count, or "25%" of RAM
//! # pools = { "2M" = { node0 = "4G", node1 = 2048 } } # per NUMA node
//! thp = "madvise"                                     # or { enabled = "madvise", defrag = "defer+madvise" }
//! mount = { path = "/dev/hugepages", pagesize = "2M" } # or a list; size = "4G" | "50%", mode = "1770"
//! ```

use crate::{Loc, Source};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::hugepages::Facts;
use bulkhead_sys::units::{human_bytes, parse_percent, parse_size};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};
use toml::de::DeValue;
use toml::Spanned;

/// Refuse plans that leave less than this share of RAM outside the hugetlb pools...
pub const KEEP_OUTSIDE_SHARE: f64 = 0.10;
/// ...or less than this many bytes (whichever is more), unless `--force`.
pub const KEEP_OUTSIDE_MIN: u64 = 1 << 30;

/// How much a pool (or a mount's `size`) holds, as written.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Amount {
    Pages(u64),
    Bytes(u64),
    /// A fraction of RAM (of the pool, for a mount's size).
    Percent(f64),
}

/// One `pools` entry: a page size, optionally one NUMA node.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PoolSpec {
    pub size: u64,
    pub node: Option<u32>,
    pub amount: Amount,
    /// The value as written, for messages.
    pub raw: String,
    pub loc: Loc,
}

/// A word with its place (a THP mode).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Word {
    pub value: String,
    pub loc: Loc,
}

/// One hugetlbfs mount.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MountSpec {
    pub path: PathBuf,
    /// `None`: the kernel's default size.
    pub pagesize: Option<u64>,
    pub size: Option<Amount>,
    pub mode: Option<u32>,
    pub loc: Loc,
}

/// The `[hugepages]` section as written (host-independent).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HugepagesSpec {
    pub loc: Loc,
    pub pools: Vec<PoolSpec>,
    pub thp_enabled: Option<Word>,
    pub thp_defrag: Option<Word>,
    pub mounts: Vec<MountSpec>,
}

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
                let p = Path::new(s.as_ref());
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
                    m.path = p.to_path_buf();
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
            ("mode", DeValue::String(s)) => match u32::from_str_radix(s.trim(), 8) {
                Ok(n) if n <= 0o7777 => m.mode = Some(n),
                _ => cx.err(
                    vloc,
                    CTX,
                    format!("mode {raw} is not an octal file mode"),
                    Some("write it like chmod: \"1770\"".into()),
                ),
            },
            ("mode", DeValue::Integer(i)) if i.radix() == 8 => match int_value(i) {
                Some(n) if (0..=0o7777).contains(&n) => m.mode = Some(n as u32),
                _ => cx.err(vloc, CTX, format!("mode {raw} is not a file mode"), None),
            },
            ("mode", DeValue::Integer(_)) => cx.err(
                vloc,
                CTX,
                format!("mode {raw} is a decimal number"),
                Some(format!("write it as a string (\"{raw}\") or an octal number (0o{raw})")),
            ),
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

/// One pool as it should be.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PoolTarget {
    pub size: u64,
    pub node: Option<u32>,
    pub pages: u64,
    /// `[hugepages] pools "2M" = "8G"` (and how a percentage resolved).
    pub why: String,
}

/// A THP switch as it should be.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ThpTarget {
    /// `enabled` or `defrag`.
    pub file: String,
    pub value: String,
}

/// A hugetlbfs mount as it should be.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MountTarget {
    pub path: PathBuf,
    pub pagesize: u64,
    /// The mount options: `pagesize=2M,size=4G,mode=1770`.
    pub options: String,
}

/// The section resolved for this kernel: every value checked, in pages.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Resolved {
    pub pools: Vec<PoolTarget>,
    pub thp: Vec<ThpTarget>,
    pub mounts: Vec<MountTarget>,
    /// Bytes in all pools once applied (sizes the plan leaves out count as they are now).
    pub pooled_after: u64,
    pub memory: u64,
    pub notes: Vec<Diagnostic>,
}

/// Check the section against this kernel and work out page counts.
pub fn resolve(
    spec: &HugepagesSpec,
    source: &Source,
    facts: &Facts,
    force: bool,
) -> Result<Resolved> {
    let mut errors = Vec::new();
    let mut r = Resolved {
        memory: facts.memory,
        ..Default::default()
    };
    let err = |loc: Loc, ctx: &str, msg: String, hint: String| {
        Diagnostic::error(msg)
            .at(source.at(loc))
            .context(ctx.to_string())
            .hint(hint)
    };
    let sizes_hint = || {
        format!(
            "page sizes this kernel offers (from /sys/kernel/mm/hugepages): {}",
            facts.sizes_text()
        )
    };
    for p in &spec.pools {
        const CTX: &str = "[hugepages] pools";
        let size_txt = human_bytes(p.size);
        if !facts.page_sizes.contains(&p.size) {
            errors.push(err(
                p.loc,
                CTX,
                format!("this kernel has no {size_txt} huge pages"),
                sizes_hint(),
            ));
            continue;
        }
        let (ram, ram_what) = match p.node {
            None => (facts.memory, "RAM".to_string()),
            Some(n) => {
                if !facts.nodes.contains(&n) {
                    errors.push(err(
                        p.loc,
                        CTX,
                        format!("there is no NUMA node {n}"),
                        format!(
                            "nodes here (from /sys/devices/system/node): {}",
                            facts
                                .nodes
                                .iter()
                                .map(|n| format!("node{n}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                    continue;
                }
                let m = facts
                    .node_memory
                    .iter()
                    .find(|(x, _)| *x == n)
                    .map_or(facts.memory, |(_, m)| *m);
                (m, format!("node {n}'s RAM"))
            }
        };
        let mut why = format!("[hugepages] pools {}", p.raw);
        let pages = match p.amount {
            Amount::Pages(n) => n,
            Amount::Bytes(b) => {
                if b % p.size != 0 {
                    errors.push(err(
                        p.loc,
                        CTX,
                        format!(
                            "{} is not a whole number of {size_txt} pages",
                            human_bytes(b)
                        ),
                        format!(
                            "write {} or {}, or a page count",
                            human_bytes(b / p.size * p.size),
                            human_bytes((b / p.size + 1) * p.size)
                        ),
                    ));
                    continue;
                }
                b / p.size
            }
            Amount::Percent(f) => {
                let n = (ram as f64 * f) as u64 / p.size;
                why.push_str(&format!(" = {n} pages of {size_txt}"));
                n
            }
        };
        let bytes = pages.saturating_mul(p.size);
        if bytes > ram {
            errors.push(err(
                p.loc,
                CTX,
                format!(
                    "{pages} pages of {size_txt} ({}) is more than the {ram_what} ({})",
                    human_bytes(bytes),
                    human_bytes(ram)
                ),
                "a pool's pages are taken out of RAM; size it below what the machine has".into(),
            ));
            continue;
        }
        r.pools.push(PoolTarget {
            size: p.size,
            node: p.node,
            pages,
            why,
        });
    }
    // What all pools hold afterwards; a per-node plan keeps the other nodes' pages.
    let mut after: u64 = 0;
    for pool in &facts.pools {
        let planned: Vec<&PoolTarget> = r.pools.iter().filter(|t| t.size == pool.size).collect();
        let pages = if let Some(t) = planned.iter().find(|t| t.node.is_none()) {
            t.pages
        } else if planned.is_empty() {
            pool.total
        } else {
            pool.nodes
                .iter()
                .map(|n| {
                    planned
                        .iter()
                        .find(|t| t.node == Some(n.node))
                        .map_or(n.total, |t| t.pages)
                })
                .sum()
        };
        after = after.saturating_add(pages.saturating_mul(pool.size));
    }
    r.pooled_after = after;
    if errors.is_empty() && !spec.pools.is_empty() {
        let keep = ((facts.memory as f64 * KEEP_OUTSIDE_SHARE) as u64).max(KEEP_OUTSIDE_MIN);
        let outside = facts.memory.saturating_sub(after);
        let first = spec.pools.first().map_or(spec.loc, |p| p.loc);
        if after > facts.memory {
            errors.push(err(
                first,
                "[hugepages] pools",
                format!(
                    "the pools would hold {}, more than the RAM ({})",
                    human_bytes(after),
                    human_bytes(facts.memory)
                ),
                "make the pools smaller".into(),
            ));
        } else if outside < keep {
            let msg = format!(
                "the pools would hold {} of {} RAM, leaving {} for everything else (the kernel, page cache, every process's ordinary memory); bulkhead keeps at least {} ({}% of RAM, at least {}) outside the pools",
                human_bytes(after),
                human_bytes(facts.memory),
                human_bytes(outside),
                human_bytes(keep),
                (KEEP_OUTSIDE_SHARE * 100.0) as u32,
                human_bytes(KEEP_OUTSIDE_MIN)
            );
            if force {
                r.notes.push(
                    Diagnostic::warning(format!("--force: {msg}"))
                        .at(source.at(first))
                        .context("[hugepages] pools"),
                );
            } else {
                errors.push(err(
                    first,
                    "[hugepages] pools",
                    msg,
                    "make the pools smaller, or pass --force if the machine really can spare it"
                        .into(),
                ));
            }
        }
    }
    for (file, w) in [("enabled", &spec.thp_enabled), ("defrag", &spec.thp_defrag)] {
        let Some(w) = w else { continue };
        let ctx = format!("[hugepages] thp {file}");
        let choice = match file {
            "enabled" => &facts.thp.enabled,
            _ => &facts.thp.defrag,
        };
        let Some(choice) = choice else {
            errors.push(err(
                w.loc,
                &ctx,
                "this kernel has no transparent huge pages".into(),
                "remove thp from the plan (the kernel was built without CONFIG_TRANSPARENT_HUGEPAGE)"
                    .into(),
            ));
            continue;
        };
        if !choice.offered.contains(&w.value) {
            let near = crate::nearest(&w.value, &choice.offered)
                .map(|s| format!("did you mean {s}? "))
                .unwrap_or_default();
            errors.push(err(
                w.loc,
                &ctx,
                format!("this kernel does not offer THP {file} mode '{}'", w.value),
                format!(
                    "{near}modes offered (from /sys/kernel/mm/transparent_hugepage/{file}): {}",
                    choice.offered.join(", ")
                ),
            ));
            continue;
        }
        r.thp.push(ThpTarget {
            file: file.to_string(),
            value: w.value.clone(),
        });
    }
    for m in &spec.mounts {
        let pagesize = m.pagesize.unwrap_or(facts.default_size);
        if !facts.page_sizes.contains(&pagesize) {
            errors.push(err(
                m.loc,
                "[hugepages] mount",
                format!(
                    "this kernel has no {} huge pages to mount",
                    human_bytes(pagesize)
                ),
                sizes_hint(),
            ));
            continue;
        }
        let mut options = format!("pagesize={}", human_bytes(pagesize));
        match m.size {
            Some(Amount::Bytes(b)) => options.push_str(&format!(",size={b}")),
            Some(Amount::Percent(p)) => {
                options.push_str(&format!(",size={}%", (p * 100.0).round() as u64))
            }
            Some(Amount::Pages(n)) => options.push_str(&format!(",size={}", n * pagesize)),
            None => {}
        }
        if let Some(mode) = m.mode {
            options.push_str(&format!(",mode={mode:o}"));
        }
        r.mounts.push(MountTarget {
            path: m.path.clone(),
            pagesize,
            options,
        });
    }
    if errors.is_empty() {
        Ok(r)
    } else {
        Err(Error::Invalid(errors))
    }
}

/// The section as `plan show` prints it: page counts, as valid plan TOML.
pub fn show_toml(r: &Resolved) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\n[hugepages]");
    if !r.pools.is_empty() {
        let mut parts: Vec<String> = Vec::new();
        let mut sizes: Vec<u64> = r.pools.iter().map(|p| p.size).collect();
        sizes.dedup();
        for size in sizes {
            let of: Vec<_> = r.pools.iter().filter(|p| p.size == size).collect();
            let name = human_bytes(size);
            if of.iter().all(|p| p.node.is_none()) {
                parts.push(format!("\"{name}\" = {}", of[0].pages));
            } else {
                let nodes: Vec<String> = of
                    .iter()
                    .map(|p| format!("node{} = {}", p.node.unwrap_or(0), p.pages))
                    .collect();
                parts.push(format!("\"{name}\" = {{ {} }}", nodes.join(", ")));
            }
        }
        let _ = writeln!(
            o,
            "pools = {{ {} }}    # pages; all pools: {} of {} RAM",
            parts.join(", "),
            human_bytes(r.pooled_after),
            human_bytes(r.memory)
        );
    }
    if !r.thp.is_empty() {
        let parts: Vec<String> = r
            .thp
            .iter()
            .map(|t| format!("{} = \"{}\"", t.file, t.value))
            .collect();
        let _ = writeln!(o, "thp = {{ {} }}", parts.join(", "));
    }
    for m in &r.mounts {
        let _ = writeln!(
            o,
            "[[hugepages.mount]]\npath = \"{}\"\npagesize = \"{}\"",
            m.path.display(),
            human_bytes(m.pagesize)
        );
        for opt in m.options.split(',') {
            match opt.split_once('=') {
                Some(("size", v)) if v.ends_with('%') => {
                    let _ = writeln!(o, "size = \"{v}\"");
                }
                Some(("size", v)) => {
                    let b = v.parse::<u64>().unwrap_or(0);
                    let _ = writeln!(o, "size = \"{}\"", human_bytes(b));
                }
                Some(("mode", v)) => {
                    let _ = writeln!(o, "mode = \"{v}\"");
                }
                _ => {}
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_sys::host::hugepages::{Choice, Pool, Thp};

    fn facts() -> Facts {
        Facts {
            memory: 24 << 30,
            page_sizes: vec![2 << 20, 1 << 30],
            default_size: 2 << 20,
            nodes: vec![0],
            node_memory: vec![(0, 24 << 30)],
            pools: vec![
                Pool {
                    size: 2 << 20,
                    ..Default::default()
                },
                Pool {
                    size: 1 << 30,
                    total: 2,
                    ..Default::default()
                },
            ],
            thp: Thp {
                enabled: Some(Choice::parse("always [madvise] never")),
                defrag: Some(Choice::parse("always defer defer+madvise [madvise] never")),
                ..Default::default()
            },
            mounts: vec![],
        }
    }

    fn parse_text(text: &str) -> Result<crate::Plan> {
        crate::Plan::parse(text, Some(Path::new("p.toml")))
    }

    fn resolve_text(text: &str, force: bool) -> Result<Resolved> {
        let plan = parse_text(text)?;
        resolve(
            plan.hugepages.as_ref().expect("section"),
            &plan.source,
            &facts(),
            force,
        )
    }

    fn err(text: &str) -> String {
        match resolve_text(text, false) {
            Ok(r) => panic!("expected an error for {text}: {r:?}"),
            Err(e) => {
                assert_eq!(e.exit_code(), 2);
                e.to_string()
            }
        }
    }

    #[test]
    fn the_issue_example_resolves() {
        let r = resolve_text(
            "[hugepages]\npools = { \"2M\" = \"8G\", \"1G\" = 0 }\nthp = \"madvise\"\nmount = { path = \"/dev/hugepages\", pagesize = \"2M\" }\n",
            false,
        )
        .unwrap();
        let pool = |size: u64| r.pools.iter().find(|p| p.size == size).unwrap();
        assert_eq!(r.pools.len(), 2);
        assert_eq!(pool(2 << 20).pages, 4096);
        assert_eq!(pool(1 << 30).pages, 0);
        assert_eq!(r.pooled_after, 8 << 30);
        assert_eq!(r.thp[0].value, "madvise");
        assert_eq!(r.mounts[0].options, "pagesize=2M");
    }

    #[test]
    fn forms_of_amounts_nodes_and_mounts() {
        let r = resolve_text(
            "[hugepages]\npools = { \"2M\" = { node0 = 100 }, \"1G\" = \"4%\" }\nthp = { enabled = \"never\", defrag = \"defer\" }\n[[hugepages.mount]]\npath = \"/mnt/a\"\nsize = \"50%\"\nmode = 0o1770\n[[hugepages.mount]]\npath = \"/mnt/b\"\npagesize = \"1G\"\nsize = \"2G\"\n",
            false,
        )
        .unwrap();
        let pool = |size: u64| r.pools.iter().find(|p| p.size == size).unwrap();
        assert_eq!(pool(2 << 20).node, Some(0));
        assert_eq!(pool(2 << 20).pages, 100);
        // 4% of 24G = 0.96G: no whole 1G page.
        assert_eq!(pool(1 << 30).pages, 0);
        assert!(pool(1 << 30).why.contains("0 pages of 1G"));
        assert_eq!(r.thp.len(), 2);
        assert_eq!(r.mounts[0].options, "pagesize=2M,size=50%,mode=1770");
        assert_eq!(r.mounts[1].options, "pagesize=1G,size=2147483648");
    }

    #[test]
    fn bad_input_says_where_and_what() {
        let e = err("[hugepages]\npools = { \"4M\" = 2 }\n");
        assert!(e.contains("p.toml:2:"), "{e}");
        assert!(e.contains("no 4M huge pages"), "{e}");
        assert!(e.contains("2M, 1G"), "{e}");
        let e = err("[hugepages]\npools = { \"2M\" = -1 }\n");
        assert!(e.contains("negative"), "{e}");
        let e = err("[hugepages]\npools = { \"2M\" = \"-2G\" }\n");
        assert!(e.contains("negative"), "{e}");
        let e = err("[hugepages]\npools = { \"2M\" = \"64T\" }\n");
        assert!(e.contains("more than the RAM"), "{e}");
        let e = err("[hugepages]\npools = { \"2M\" = \"150%\" }\n");
        assert!(e.contains("more than 100% of RAM"), "{e}");
        let e = err("[hugepages]\npools = { \"2M\" = \"3M\" }\n");
        assert!(e.contains("not a whole number of 2M pages"), "{e}");
        let e = err("[hugepages]\npools = { \"2M\" = \"512\" }\n");
        assert!(e.contains("no unit"), "{e}");
        let e = err("[hugepages]\npools = { \"2M\" = { node3 = 1 } }\n");
        assert!(e.contains("no NUMA node 3") && e.contains("node0"), "{e}");
        let e = err("[hugepages]\nthp = \"madvice\"\n");
        assert!(
            e.contains("does not offer") && e.contains("did you mean madvise"),
            "{e}"
        );
        let e = err("[hugepages]\nthp = { defrag = \"within_size\" }\n");
        assert!(e.contains("defrag mode 'within_size'"), "{e}");
        let e = err("[hugepages]\npool = 1\n");
        assert!(e.contains("did you mean pools?"), "{e}");
        let e = err("[hugepages]\nmount = { path = \"dev/hugepages\" }\n");
        assert!(e.contains("not absolute"), "{e}");
        let e = err("[hugepages]\nmount = { path = \"/x\", mode = 755 }\n");
        assert!(e.contains("decimal"), "{e}");
        let e = err("[hugepages]\nmount = { pagesize = \"2M\" }\n");
        assert!(e.contains("needs a path"), "{e}");
    }

    #[test]
    fn pools_must_leave_room_unless_forced() {
        // 23G in the 2M pool plus the 2G already in the 1G pool: more than 24G.
        let text = "[hugepages]\npools = { \"2M\" = \"23G\" }\n";
        let e = err(text);
        assert!(e.contains("more than the RAM"), "{e}");
        let text = "[hugepages]\npools = { \"2M\" = \"21G\" }\n";
        let e = err(text);
        assert!(
            e.contains("bulkhead keeps at least") && e.contains("--force"),
            "{e}"
        );
        let r = resolve_text(text, true).unwrap();
        assert!(r.notes[0].message.contains("--force"));
        assert_eq!(r.pooled_after, 23 << 30);
    }
}
