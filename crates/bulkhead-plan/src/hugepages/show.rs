//! The resolved section as `plan show` prints it: page counts, as valid plan TOML.

use super::Resolved;
use bulkhead_sys::units::human_bytes;
use std::fmt::Write as _;

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
