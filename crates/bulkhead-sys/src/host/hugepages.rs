//! Reading the kernel's huge page state: pools per size and NUMA node
//! (`/sys/kernel/mm/hugepages`, `/sys/devices/system/node/nodeN/hugepages`), the THP switches
//! (`/sys/kernel/mm/transparent_hugepage`), hugetlbfs mounts (`/proc/self/mountinfo`) and the
//! huge page lines of `/proc/meminfo`.
//!
//! Every path is taken relative to a [`Paths`] root so the parsers can be tested on fixture
//! trees.

use crate::host::meminfo_field;
use crate::mountinfo::Mount;
use std::fs;
use std::path::{Path, PathBuf};

/// Where /sys and /proc are (fixture trees in unit tests).
#[derive(Debug, Clone)]
pub struct Paths {
    pub sys: PathBuf,
    pub proc: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            sys: PathBuf::from("/sys"),
            proc: PathBuf::from("/proc"),
        }
    }
}

impl Paths {
    pub fn hugepages_dir(&self) -> PathBuf {
        self.sys.join("kernel/mm/hugepages")
    }
    pub fn thp_dir(&self) -> PathBuf {
        self.sys.join("kernel/mm/transparent_hugepage")
    }
    pub fn node_dir(&self, node: u32) -> PathBuf {
        self.sys.join(format!("devices/system/node/node{node}"))
    }
    /// The directory of one pool: system-wide, or one node's share.
    pub fn pool_dir(&self, size: u64, node: Option<u32>) -> PathBuf {
        let name = format!("hugepages-{}kB", size >> 10);
        match node {
            None => self.hugepages_dir().join(name),
            Some(n) => self.node_dir(n).join("hugepages").join(name),
        }
    }
    /// The `nr_hugepages` file of one pool.
    pub fn pool_file(&self, size: u64, node: Option<u32>) -> PathBuf {
        self.pool_dir(size, node).join("nr_hugepages")
    }
    pub fn compact_file(&self) -> PathBuf {
        self.proc.join("sys/vm/compact_memory")
    }
}

/// One node's share of a pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct NodePool {
    pub node: u32,
    pub total: u64,
    pub free: u64,
    pub surplus: u64,
}

/// One huge page size's pool (counts in pages).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Pool {
    /// Page size in bytes.
    pub size: u64,
    /// `nr_hugepages`: the persistent pool.
    pub total: u64,
    pub free: u64,
    /// Promised to mappings but not faulted in yet.
    pub reserved: u64,
    /// Allocated beyond the persistent pool (overcommit, or a pool shrunk while in use).
    pub surplus: u64,
    pub overcommit: u64,
    pub nodes: Vec<NodePool>,
}

impl Pool {
    /// Pages in use by processes (or reserved for them).
    pub fn used(&self) -> u64 {
        (self.total + self.surplus).saturating_sub(self.free)
    }
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.reserved)
    }
}

fn read_u64(p: &Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// The huge page sizes the kernel offers, in bytes, smallest first.
pub fn page_sizes(p: &Paths) -> Vec<u64> {
    let mut v: Vec<u64> = fs::read_dir(p.hugepages_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| size_of_dir_name(&e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// `hugepages-2048kB` -> 2 MiB.
pub fn size_of_dir_name(n: &str) -> Option<u64> {
    n.strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse::<u64>()
        .ok()
        .map(|kb| kb << 10)
}

/// NUMA nodes that exist (online), ascending.
pub fn nodes(p: &Paths) -> Vec<u32> {
    let mut v: Vec<u32> = fs::read_dir(p.sys.join("devices/system/node"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_prefix("node")?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Every pool, with its per-node shares.
pub fn pools(p: &Paths) -> Vec<Pool> {
    let nodes = nodes(p);
    page_sizes(p)
        .into_iter()
        .map(|size| {
            let d = p.pool_dir(size, None);
            let n = |f: &str| read_u64(&d.join(f)).unwrap_or(0);
            Pool {
                size,
                total: n("nr_hugepages"),
                free: n("free_hugepages"),
                reserved: n("resv_hugepages"),
                surplus: n("surplus_hugepages"),
                overcommit: n("nr_overcommit_hugepages"),
                nodes: nodes
                    .iter()
                    .filter_map(|&node| {
                        let nd = p.pool_dir(size, Some(node));
                        Some(NodePool {
                            node,
                            total: read_u64(&nd.join("nr_hugepages"))?,
                            free: read_u64(&nd.join("free_hugepages")).unwrap_or(0),
                            surplus: read_u64(&nd.join("surplus_hugepages")).unwrap_or(0),
                        })
                    })
                    .collect(),
            }
        })
        .collect()
}

/// One pool's current size in pages (`None`: the kernel has no such pool or node).
pub fn pool_pages(p: &Paths, size: u64, node: Option<u32>) -> Option<u64> {
    read_u64(&p.pool_file(size, node))
}

/// A sysfs multiple-choice switch: `always [madvise] never`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Choice {
    pub active: String,
    pub offered: Vec<String>,
}

impl Choice {
    pub fn parse(text: &str) -> Choice {
        let mut c = Choice::default();
        for w in text.split_whitespace() {
            match w.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
                Some(a) => {
                    c.active = a.to_string();
                    c.offered.push(a.to_string());
                }
                None => c.offered.push(w.to_string()),
            }
        }
        c
    }
    pub fn read(path: &Path) -> Option<Choice> {
        let t = fs::read_to_string(path).ok()?;
        let c = Choice::parse(&t);
        (!c.offered.is_empty()).then_some(c)
    }
}

/// The transparent huge page switches and khugepaged's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Thp {
    /// `None`: the kernel has no THP (CONFIG_TRANSPARENT_HUGEPAGE off).
    pub enabled: Option<Choice>,
    pub defrag: Option<Choice>,
    pub shmem_enabled: Option<Choice>,
    /// The PMD (THP) page size, bytes.
    pub pmd_size: Option<u64>,
    pub khugepaged_pages_collapsed: Option<u64>,
    pub khugepaged_full_scans: Option<u64>,
}

pub fn thp(p: &Paths) -> Thp {
    let d = p.thp_dir();
    Thp {
        enabled: Choice::read(&d.join("enabled")),
        defrag: Choice::read(&d.join("defrag")),
        shmem_enabled: Choice::read(&d.join("shmem_enabled")),
        pmd_size: read_u64(&d.join("hpage_pmd_size")),
        khugepaged_pages_collapsed: read_u64(&d.join("khugepaged/pages_collapsed")),
        khugepaged_full_scans: read_u64(&d.join("khugepaged/full_scans")),
    }
}

/// A mounted hugetlbfs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HugetlbfsMount {
    pub path: PathBuf,
    /// Page size in bytes (the mount's `pagesize=`, else the default size).
    pub pagesize: u64,
    /// The super block options, e.g. `rw,pagesize=2M,size=...`.
    pub options: String,
}

/// hugetlbfs mounts from a mountinfo text. `default_size` fills in a mount without
/// `pagesize=` (the kernel then uses its default size).
pub fn parse_hugetlbfs_mounts(mountinfo: &str, default_size: u64) -> Vec<HugetlbfsMount> {
    hugetlbfs_of(crate::mountinfo::parse(mountinfo.as_bytes()), default_size)
}

fn hugetlbfs_of(mounts: Vec<Mount>, default_size: u64) -> Vec<HugetlbfsMount> {
    mounts
        .into_iter()
        .filter(|m| m.fstype == "hugetlbfs")
        .map(|m| {
            let pagesize = m
                .super_options
                .split(',')
                .find_map(|o| o.strip_prefix("pagesize="))
                .and_then(crate::host::parse_page_size)
                .unwrap_or(default_size);
            HugetlbfsMount {
                path: m.point,
                pagesize,
                options: m.super_options,
            }
        })
        .collect()
}

pub fn hugetlbfs_mounts(p: &Paths) -> Vec<HugetlbfsMount> {
    let mounts = crate::mountinfo::read_at(&p.proc.join("self/mountinfo")).unwrap_or_default();
    hugetlbfs_of(mounts, default_size(p))
}

/// The huge page lines of /proc/meminfo, in bytes (page counts for the HugePages_* lines).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Meminfo {
    pub mem_total: u64,
    pub mem_available: u64,
    pub anon_huge: u64,
    pub shmem_huge: u64,
    pub file_huge: u64,
    /// Memory in all hugetlb pools, every size (bytes).
    pub hugetlb: u64,
    /// The default huge page size.
    pub hugepagesize: u64,
}

pub fn parse_meminfo(text: &str) -> Meminfo {
    let f = |k: &str| meminfo_field(text, k).unwrap_or(0);
    Meminfo {
        mem_total: f("MemTotal"),
        mem_available: f("MemAvailable"),
        anon_huge: f("AnonHugePages"),
        shmem_huge: f("ShmemHugePages"),
        file_huge: f("FileHugePages"),
        hugetlb: f("Hugetlb"),
        hugepagesize: f("Hugepagesize"),
    }
}

pub fn meminfo(p: &Paths) -> Meminfo {
    parse_meminfo(&fs::read_to_string(p.proc.join("meminfo")).unwrap_or_default())
}

/// The default huge page size (what MAP_HUGETLB without a size flag and glibc's
/// `glibc.malloc.hugetlb=2` use).
pub fn default_size(p: &Paths) -> u64 {
    let m = meminfo(p).hugepagesize;
    if m > 0 {
        m
    } else {
        2 << 20
    }
}

/// One node's MemTotal, bytes.
pub fn node_memory(p: &Paths, node: u32) -> Option<u64> {
    let t = fs::read_to_string(p.node_dir(node).join("meminfo")).ok()?;
    // "Node 0 MemTotal:       24576000 kB"
    t.lines().find_map(|l| {
        let rest = l.split_once("MemTotal:")?.1;
        let mut it = rest.split_whitespace();
        let n: u64 = it.next()?.parse().ok()?;
        Some(if it.next() == Some("kB") { n << 10 } else { n })
    })
}

/// What a plan resolves against: the kernel's sizes, nodes, RAM and THP choices now.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Facts {
    pub memory: u64,
    pub page_sizes: Vec<u64>,
    pub default_size: u64,
    pub nodes: Vec<u32>,
    /// MemTotal of each node.
    pub node_memory: Vec<(u32, u64)>,
    pub pools: Vec<Pool>,
    pub thp: Thp,
    pub mounts: Vec<HugetlbfsMount>,
}

impl Facts {
    pub fn read(p: &Paths) -> Facts {
        let nodes = nodes(p);
        Facts {
            memory: meminfo(p).mem_total,
            page_sizes: page_sizes(p),
            default_size: default_size(p),
            node_memory: nodes
                .iter()
                .filter_map(|&n| Some((n, node_memory(p, n)?)))
                .collect(),
            nodes,
            pools: pools(p),
            thp: thp(p),
            mounts: hugetlbfs_mounts(p),
        }
    }
    pub fn pool(&self, size: u64) -> Option<&Pool> {
        self.pools.iter().find(|p| p.size == size)
    }
    /// `2M, 1G`: the sizes for messages.
    pub fn sizes_text(&self) -> String {
        if self.page_sizes.is_empty() {
            return "none (the kernel has no hugetlb support)".into();
        }
        self.page_sizes
            .iter()
            .map(|s| crate::units::human_bytes(*s))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Mount a hugetlbfs at `path` (nosuid, nodev) with `options` (`pagesize=2M,size=...`).
pub fn mount_hugetlbfs(path: &Path, options: &str) -> std::io::Result<()> {
    use rustix::mount::{mount, MountFlags};
    let data = std::ffi::CString::new(options)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    mount(
        "hugetlbfs",
        path,
        "hugetlbfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        data.as_c_str(),
    )
    .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_and_meminfo() {
        let c = Choice::parse("always [madvise] never\n");
        assert_eq!(c.active, "madvise");
        assert_eq!(c.offered, ["always", "madvise", "never"]);
        let m = parse_meminfo(
            "MemTotal: 1000 kB\nAnonHugePages:  4096 kB\nHugetlb:  2048 kB\nHugepagesize: 2048 kB\n",
        );
        assert_eq!(m.mem_total, 1000 << 10);
        assert_eq!(m.anon_huge, 4 << 20);
        assert_eq!(m.hugepagesize, 2 << 20);
        assert_eq!(size_of_dir_name("hugepages-1048576kB"), Some(1 << 30));
        assert_eq!(size_of_dir_name("hugepages-x"), None);
    }

    #[test]
    fn hugetlbfs_mounts_from_mountinfo() {
        let mi = "22 1 0:20 / /dev/hugepages rw,relatime shared:9 - hugetlbfs hugetlbfs rw,pagesize=2M\n\
                  23 1 0:21 / /mnt/huge\\0401g rw - hugetlbfs none rw,pagesize=1024M,size=2147483648\n\
                  24 1 0:22 / /tmp rw - tmpfs tmpfs rw\n\
                  25 1 0:23 / /mnt/d rw - hugetlbfs none rw\n";
        let m = parse_hugetlbfs_mounts(mi, 2 << 20);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].path, PathBuf::from("/dev/hugepages"));
        assert_eq!(m[0].pagesize, 2 << 20);
        assert_eq!(m[1].path, PathBuf::from("/mnt/huge 1g"));
        assert_eq!(m[1].pagesize, 1 << 30);
        assert_eq!(m[2].pagesize, 2 << 20, "default size without pagesize=");
    }

    #[test]
    fn hugetlbfs_mount_paths_keep_their_bytes() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        // The kernel writes non-ASCII bytes as they are and escapes space, tab, newline and
        // backslash as \ooo; a byte that is not UTF-8 must survive too.
        let mi = "30 1 0:30 / /mnt/datenbank-ü\\040pg rw - hugetlbfs none rw,pagesize=2M\n\
                  31 1 0:31 / /mnt/x\\377y rw - hugetlbfs none rw\n";
        let m = parse_hugetlbfs_mounts(mi, 2 << 20);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, PathBuf::from("/mnt/datenbank-ü pg"));
        assert_eq!(
            m[1].path,
            PathBuf::from(OsString::from_vec(b"/mnt/x\xffy".to_vec()))
        );
    }

    #[test]
    fn pools_from_a_fixture_tree() {
        let root = std::env::temp_dir().join(format!("bulkhead-hp-sysfs-{}", std::process::id()));
        let p = Paths {
            sys: root.join("sys"),
            proc: root.join("proc"),
        };
        let w = |f: PathBuf, v: &str| {
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, v).unwrap();
        };
        for (size, nr) in [(2u64 << 20, "16"), (1 << 30, "0")] {
            let d = p.pool_dir(size, None);
            w(d.join("nr_hugepages"), nr);
            w(d.join("free_hugepages"), "10");
            w(d.join("resv_hugepages"), "2");
            w(d.join("surplus_hugepages"), "0");
            w(d.join("nr_overcommit_hugepages"), "0");
            w(p.pool_dir(size, Some(0)).join("nr_hugepages"), nr);
        }
        w(p.thp_dir().join("enabled"), "always [madvise] never\n");
        w(
            p.node_dir(0).join("meminfo"),
            "Node 0 MemTotal:       2048 kB\n",
        );
        w(
            p.proc.join("meminfo"),
            "MemTotal: 4096 kB\nHugepagesize: 2048 kB\n",
        );
        let f = Facts::read(&p);
        assert_eq!(f.page_sizes, vec![2 << 20, 1 << 30]);
        assert_eq!(f.nodes, vec![0]);
        assert_eq!(f.node_memory, vec![(0, 2 << 20)]);
        let two = f.pool(2 << 20).unwrap();
        assert_eq!((two.total, two.free, two.reserved), (16, 10, 2));
        assert_eq!(two.used(), 6);
        assert_eq!(two.available(), 8);
        assert_eq!(two.nodes[0].total, 16);
        assert_eq!(f.thp.enabled.as_ref().unwrap().active, "madvise");
        assert_eq!(f.sizes_text(), "2M, 1G");
        let _ = fs::remove_dir_all(&root);
    }
}
