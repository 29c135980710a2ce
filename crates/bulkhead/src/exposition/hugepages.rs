//! Huge page pools per page size, and per NUMA node, from sysfs
//! ([`bulkhead_sys::host::hugepages::pools`]). The size label is Kubernetes' spelling
//! (`2Mi`, `1Gi`), as in `hugepages-2Mi`.

use crate::exposition::text::{Kind, Sample, Value, Writer};
use bulkhead_sys::host::hugepages::{NodePool, Pool};

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

fn per_node(pools: &[Pool], f: impl Fn(&NodePool) -> u64) -> Vec<Sample> {
    let mut out = Vec::new();
    for p in pools {
        for n in &p.nodes {
            let l = vec![("size", size_label(p.size)), ("node", n.node.to_string())];
            out.push((l, Value::Int(f(n))));
        }
    }
    out
}

/// A family of a table: its name, its help, and the figure of each pool (or node).
type Family<T> = (&'static str, &'static str, fn(&T) -> u64);

/// The families per page size.
const PER_SIZE: [Family<Pool>; 4] = [
    (
        "bulkhead_hugepages_pool_pages",
        "Pages in the persistent pool (nr_hugepages).",
        |p| p.total,
    ),
    (
        "bulkhead_hugepages_free_pages",
        "Pages of the pool not in use.",
        |p| p.free,
    ),
    (
        "bulkhead_hugepages_reserved_pages",
        "Pages promised to mappings but not faulted in yet.",
        |p| p.reserved,
    ),
    (
        "bulkhead_hugepages_surplus_pages",
        "Pages allocated beyond the persistent pool (overcommit).",
        |p| p.surplus,
    ),
];

/// The families per page size and NUMA node.
const PER_NODE: [Family<NodePool>; 3] = [
    (
        "bulkhead_hugepages_node_pool_pages",
        "Pages in the persistent pool, per NUMA node.",
        |n| n.total,
    ),
    (
        "bulkhead_hugepages_node_free_pages",
        "Pages of the pool not in use, per NUMA node.",
        |n| n.free,
    ),
    (
        "bulkhead_hugepages_node_surplus_pages",
        "Pages allocated beyond the persistent pool, per NUMA node.",
        |n| n.surplus,
    ),
];

/// Write the huge page families.
pub fn write(w: &mut Writer, pools: &[Pool]) {
    for (name, help, f) in PER_SIZE {
        w.family(name, Kind::Gauge, help, &per_size(pools, f));
    }
    for (name, help, f) in PER_NODE {
        w.family(name, Kind::Gauge, help, &per_node(pools, f));
    }
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
