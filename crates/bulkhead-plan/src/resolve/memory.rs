//! MemoryMin/Low/High/Max, MemorySwapMax and HugetlbMax: bytes, percentages of RAM, floors
//! and ceilings, rounded to what the kernel counts.

use super::{limit_setting, Ctx, ResolvedSlice};
use crate::{At, MemSpec, SliceName, Value};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::host::page_size_cgroup_name;
use bulkhead_sys::units::{human_bytes, Limit};

pub fn limit(
    cx: &mut Ctx,
    name: &SliceName,
    key: &str,
    at: &At<Value>,
    spec: &MemSpec,
    r: &mut ResolvedSlice,
) {
    let (limit, from) = cx.memory(spec);
    if let Limit::Bytes(b) = limit {
        if b > cx.host.memory && key != "MemorySwapMax" {
            cx.notes.push(
                Diagnostic::warning(format!(
                    "{key} = {} is more than this host's {} of RAM, so it never limits",
                    at.raw,
                    human_bytes(cx.host.memory)
                ))
                .at(cx.plan.source.at(at.loc))
                .context(format!("[slice.{name}]")),
            );
        }
    }
    match key {
        "MemoryMin" => r.memory_min = Some(limit),
        "MemoryLow" => r.memory_low = Some(limit),
        "MemoryHigh" => r.memory_high = Some(limit),
        "MemoryMax" => r.memory_max = Some(limit),
        _ => r.memory_swap_max = Some(limit),
    }
    r.settings.push(limit_setting(key, limit, from));
}

/// HugetlbMax: per page size this kernel has, in whole pages.
pub fn hugetlb(
    cx: &mut Ctx,
    name: &SliceName,
    key: &str,
    at: &At<Value>,
    list: &[(u64, MemSpec)],
    r: &mut ResolvedSlice,
) {
    for (size, spec) in list {
        if !cx.host.hugepage_sizes.contains(size) {
            let offered: Vec<String> = cx
                .host
                .hugepage_sizes
                .iter()
                .map(|s| human_bytes(*s))
                .collect();
            cx.err(
                name,
                key,
                at,
                format!("this kernel has no {} huge pages", human_bytes(*size)),
                &format!(
                    "page sizes here (from /sys/kernel/mm/hugepages): {}",
                    offered.join(", ")
                ),
            );
            continue;
        }
        let (limit, from) = cx.memory(spec);
        // Whole pages only.
        let limit = match limit {
            Limit::Bytes(b) => Limit::Bytes(b / size * size),
            l => l,
        };
        r.hugetlb_max.insert(*size, limit);
        let mut s = limit_setting("HugetlbMax", limit, from);
        s.value = format!("{}={}", page_size_cgroup_name(*size), s.value);
        s.toml = format!("\"{}\" = {}", human_bytes(*size), s.toml);
        if let Limit::Bytes(b) = limit {
            s.from = Some(format!("{} pages of {}", b / size, human_bytes(*size)));
        }
        r.settings.push(s);
    }
}
