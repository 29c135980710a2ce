//! [`HugepagesSpec`] + the kernel's [`Facts`] -> [`Resolved`]: page counts per pool, the room
//! left outside the pools, THP words the kernel offers, mount options.

use super::{
    Amount, HugepagesSpec, MountSpec, MountTarget, PoolSpec, PoolTarget, Resolved, ThpTarget, Word,
    KEEP_OUTSIDE_MIN, KEEP_OUTSIDE_SHARE,
};
use crate::{Loc, Source};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::hugepages::Facts;
use bulkhead_sys::units::human_bytes;

/// Resolve the section against the kernel: every error at its place in the file.
pub fn resolve(
    spec: &HugepagesSpec,
    source: &Source,
    facts: &Facts,
    force: bool,
) -> Result<Resolved> {
    let mut cx = Cx {
        source,
        facts,
        errors: Vec::new(),
    };
    let mut r = Resolved {
        memory: facts.memory,
        ..Default::default()
    };
    for p in &spec.pools {
        if let Some(t) = cx.pool(p) {
            r.pools.push(t);
        }
    }
    r.pooled_after = pooled_after(&r.pools, facts);
    if cx.errors.is_empty() && !spec.pools.is_empty() {
        cx.room(spec, &mut r, force);
    }
    for (file, w) in [("enabled", &spec.thp_enabled), ("defrag", &spec.thp_defrag)] {
        if let Some(t) = w.as_ref().and_then(|w| cx.thp(file, w)) {
            r.thp.push(t);
        }
    }
    for m in &spec.mounts {
        if let Some(t) = cx.mount(m) {
            r.mounts.push(t);
        }
    }
    if cx.errors.is_empty() {
        Ok(r)
    } else {
        Err(Error::Invalid(cx.errors))
    }
}

struct Cx<'a> {
    source: &'a Source,
    facts: &'a Facts,
    errors: Vec<Diagnostic>,
}

impl Cx<'_> {
    fn err(&mut self, loc: Loc, ctx: &str, msg: String, hint: String) {
        self.errors.push(
            Diagnostic::error(msg)
                .at(self.source.at(loc))
                .context(ctx.to_string())
                .hint(hint),
        );
    }

    fn sizes_hint(&self) -> String {
        format!(
            "page sizes this kernel offers (from /sys/kernel/mm/hugepages): {}",
            self.facts.sizes_text()
        )
    }

    /// The RAM a pool is taken from: the machine's, or its NUMA node's.
    fn ram_of(&mut self, p: &PoolSpec) -> Option<(u64, String)> {
        let facts = self.facts;
        let Some(n) = p.node else {
            return Some((facts.memory, "RAM".to_string()));
        };
        if !facts.nodes.contains(&n) {
            let nodes: Vec<String> = facts.nodes.iter().map(|n| format!("node{n}")).collect();
            self.err(
                p.loc,
                POOLS,
                format!("there is no NUMA node {n}"),
                format!(
                    "nodes here (from /sys/devices/system/node): {}",
                    nodes.join(", ")
                ),
            );
            return None;
        }
        let m = facts
            .node_memory
            .iter()
            .find(|(x, _)| *x == n)
            .map_or(facts.memory, |(_, m)| *m);
        Some((m, format!("node {n}'s RAM")))
    }

    /// One pool: a page size the kernel has, whole pages, no more than the RAM.
    fn pool(&mut self, p: &PoolSpec) -> Option<PoolTarget> {
        let size_txt = human_bytes(p.size);
        if !self.facts.page_sizes.contains(&p.size) {
            let hint = self.sizes_hint();
            self.err(
                p.loc,
                POOLS,
                format!("this kernel has no {size_txt} huge pages"),
                hint,
            );
            return None;
        }
        let (ram, ram_what) = self.ram_of(p)?;
        let mut why = format!("[hugepages] pools {}", p.raw);
        let pages = match p.amount {
            Amount::Pages(n) => n,
            Amount::Bytes(b) if b % p.size != 0 => {
                let down = human_bytes(b / p.size * p.size);
                // Checked: one page more than "15.999999999999998E" is past u64 (it overflowed).
                let hint = match (b / p.size + 1).checked_mul(p.size) {
                    Some(up) => format!("write {down} or {}, or a page count", human_bytes(up)),
                    None => format!("write {down}, or a page count"),
                };
                self.err(
                    p.loc,
                    POOLS,
                    format!(
                        "{} is not a whole number of {size_txt} pages",
                        human_bytes(b)
                    ),
                    hint,
                );
                return None;
            }
            Amount::Bytes(b) => b / p.size,
            Amount::Percent(f) => {
                let n = (ram as f64 * f) as u64 / p.size;
                why.push_str(&format!(" = {n} pages of {size_txt}"));
                n
            }
        };
        let bytes = pages.saturating_mul(p.size);
        if bytes > ram {
            self.err(
                p.loc,
                POOLS,
                format!(
                    "{pages} pages of {size_txt} ({}) is more than the {ram_what} ({})",
                    human_bytes(bytes),
                    human_bytes(ram)
                ),
                "a pool's pages are taken out of RAM; size it below what the machine has".into(),
            );
            return None;
        }
        Some(PoolTarget {
            size: p.size,
            node: p.node,
            pages,
            why,
        })
    }

    /// The pools must leave room for everything else (or `force`, said as a warning).
    fn room(&mut self, spec: &HugepagesSpec, r: &mut Resolved, force: bool) {
        let memory = self.facts.memory;
        let after = r.pooled_after;
        let keep = ((memory as f64 * KEEP_OUTSIDE_SHARE) as u64).max(KEEP_OUTSIDE_MIN);
        let outside = memory.saturating_sub(after);
        let first = spec.pools.first().map_or(spec.loc, |p| p.loc);
        if after > memory {
            self.err(
                first,
                POOLS,
                format!(
                    "the pools would hold {}, more than the RAM ({})",
                    human_bytes(after),
                    human_bytes(memory)
                ),
                "make the pools smaller".into(),
            );
            return;
        }
        if outside >= keep {
            return;
        }
        let msg = format!(
            "the pools would hold {} of {} RAM, leaving {} for everything else (the kernel, page cache, every process's ordinary memory); bulkhead keeps at least {} ({}% of RAM, at least {}) outside the pools",
            human_bytes(after),
            human_bytes(memory),
            human_bytes(outside),
            human_bytes(keep),
            (KEEP_OUTSIDE_SHARE * 100.0) as u32,
            human_bytes(KEEP_OUTSIDE_MIN)
        );
        if force {
            r.notes.push(
                Diagnostic::warning(format!("--force: {msg}"))
                    .at(self.source.at(first))
                    .context(POOLS),
            );
        } else {
            self.err(
                first,
                POOLS,
                msg,
                "make the pools smaller, or pass --force if the machine really can spare it".into(),
            );
        }
    }

    /// A THP switch: a word this kernel offers for the file.
    fn thp(&mut self, file: &str, w: &Word) -> Option<ThpTarget> {
        let ctx = format!("[hugepages] thp {file}");
        let choice = match file {
            "enabled" => &self.facts.thp.enabled,
            _ => &self.facts.thp.defrag,
        };
        let Some(choice) = choice else {
            self.err(
                w.loc,
                &ctx,
                "this kernel has no transparent huge pages".into(),
                "remove thp from the plan (the kernel was built without CONFIG_TRANSPARENT_HUGEPAGE)"
                    .into(),
            );
            return None;
        };
        if !choice.offered.contains(&w.value) {
            let near = crate::nearest(&w.value, &choice.offered)
                .map(|s| format!("did you mean {s}? "))
                .unwrap_or_default();
            let offered = choice.offered.join(", ");
            self.err(
                w.loc,
                &ctx,
                format!("this kernel does not offer THP {file} mode '{}'", w.value),
                format!(
                    "{near}modes offered (from /sys/kernel/mm/transparent_hugepage/{file}): {offered}"
                ),
            );
            return None;
        }
        Some(ThpTarget {
            file: file.to_string(),
            value: w.value.clone(),
        })
    }

    /// A hugetlbfs mount: a page size the kernel has, and its mount options.
    fn mount(&mut self, m: &MountSpec) -> Option<MountTarget> {
        let pagesize = m.pagesize.unwrap_or(self.facts.default_size);
        if !self.facts.page_sizes.contains(&pagesize) {
            let hint = self.sizes_hint();
            self.err(
                m.loc,
                "[hugepages] mount",
                format!(
                    "this kernel has no {} huge pages to mount",
                    human_bytes(pagesize)
                ),
                hint,
            );
            return None;
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
        Some(MountTarget {
            path: m.path.clone(),
            pagesize,
            options,
        })
    }
}

const POOLS: &str = "[hugepages] pools";

/// What all pools hold afterwards; a per-node plan keeps the other nodes' pages.
fn pooled_after(targets: &[PoolTarget], facts: &Facts) -> u64 {
    let mut after: u64 = 0;
    for pool in &facts.pools {
        let planned: Vec<&PoolTarget> = targets.iter().filter(|t| t.size == pool.size).collect();
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
    after
}
