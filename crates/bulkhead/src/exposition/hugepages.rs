//! Huge page pools per page size, and per NUMA node, from sysfs
//! ([`bulkhead_sys::host::hugepages::pools`]). The size label is Kubernetes' spelling
//! (`2Mi`, `1Gi`), as in `hugepages-2Mi`.

use crate::exposition::text::{Kind, Sample, Value, Writer};
use bulkhead_sys::host::hugepages::Pool;

/// `2Mi`, `1Gi`; another size in KiB.
pub fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}Gi", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}Mi", b >> 20),
        b => format!("{}Ki", b >> 10),
    }
}

fn per_size(pools: &[Pool], f: impl Fn(&Pool) -> u64) -> Vec<Sample> {
    pools
        .iter()
        .map(|p| (vec![("size", size_label(p.size))], Value::Int(f(p))))
        .collect()
}

fn per_node(
    pools: &[Pool],
    f: impl Fn(&bulkhead_sys::host::hugepages::NodePool) -> u64,
) -> Vec<Sample> {
    let mut out = Vec::new();
    for p in pools {
        for n in &p.nodes {
            let l = vec![("size", size_label(p.size)), ("node", n.node.to_string())];
            out.push((l, Value::Int(f(n))));
        }
    }
    out
}

/// Write the huge page families.
pub fn write(w: &mut Writer, pools: &[Pool]) {
    let g = Kind::Gauge;
    w.family(
        "bulkhead_hugepages_pool_pages",
        g,
        "Pages in the persistent pool (nr_hugepages).",
        &per_size(pools, |p| p.total),
    );
    w.family(
        "bulkhead_hugepages_free_pages",
        g,
        "Pages of the pool not in use.",
        &per_size(pools, |p| p.free),
    );
    w.family(
        "bulkhead_hugepages_reserved_pages",
        g,
        "Pages promised to mappings but not faulted in yet.",
        &per_size(pools, |p| p.reserved),
    );
    w.family(
        "bulkhead_hugepages_surplus_pages",
        g,
        "Pages allocated beyond the persistent pool (overcommit).",
        &per_size(pools, |p| p.surplus),
    );
    w.family(
        "bulkhead_hugepages_node_pool_pages",
        g,
        "Pages in the persistent pool, per NUMA node.",
        &per_node(pools, |n| n.total),
    );
    w.family(
        "bulkhead_hugepages_node_free_pages",
        g,
        "Pages of the pool not in use, per NUMA node.",
        &per_node(pools, |n| n.free),
    );
    w.family(
        "bulkhead_hugepages_node_surplus_pages",
        g,
        "Pages allocated beyond the persistent pool, per NUMA node.",
        &per_node(pools, |n| n.surplus),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_spelled_as_kubernetes_does() {
        assert_eq!(size_label(2 << 20), "2Mi");
        assert_eq!(size_label(1 << 30), "1Gi");
        assert_eq!(size_label(64 << 10), "64Ki");
        assert_eq!(size_label(32 << 20), "32Mi");
    }
}
