//! The `[hugepages]` plan section: TOML -> [`HugepagesSpec`] (type-checked, with the line and
//! column of every value), then [`resolve`] against the kernel's [`Facts`](bulkhead_sys::host::hugepages::Facts) -> [`Resolved`]
//! (page counts per pool, THP words the kernel offers, mount options).
//!
//! ```toml
//! [hugepages]
//! pools = { "2M" = "8G", "1G" = 0 }                  # memory, a page count, or "25%" of RAM
//! # pools = { "2M" = { node0 = "4G", node1 = 2048 } } # per NUMA node
//! thp = "madvise"                                     # or { enabled = "madvise", defrag = "defer+madvise" }
//! mount = { path = "/dev/hugepages", pagesize = "2M" } # or a list; size = "4G" | "50%", mode = "1770"
//! ```

mod parse;
mod resolve;
mod show;

pub(crate) use parse::parse;
pub use resolve::resolve;
pub use show::show_toml;

use crate::Loc;
use bulkhead_sys::error::Diagnostic;
use std::path::PathBuf;

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

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_sys::error::Result;
    use bulkhead_sys::host::hugepages::{Choice, Facts, Pool, Thp};
    use std::path::Path;

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
        // Issue 14: the page above the largest size a u64 holds overflowed.
        let e = err("[hugepages]\npools = { \"2M\" = \"15.999999999999998E\" }\n");
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
