//! Who uses huge pages, and who asked for them but did not get them.
//!
//! Per process: `/proc/PID/smaps_rollup` (totals: Anonymous, AnonHugePages, the PMD-mapped
//! shmem/file pages, hugetlb), `/proc/PID/smaps` (per area: the `hg`/`nh` flags of
//! MADV_HUGEPAGE/MADV_NOHUGEPAGE and the page size of hugetlb areas), `/proc/PID/numa_maps`
//! (pages per node), `/proc/PID/status` (`THP_enabled`, off after PR_SET_THP_DISABLE) and
//! `/proc/PID/environ` (the allocator switches `bulkhead run --hugepages` sets). Per slice:
//! the hugetlb cgroup counters and the THP share of memory.stat.

use super::state::Saved;
use bulkhead_cgroups::{CgroupFs, Layout, Version};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::hugepages::{self as sysfs, HugetlbfsMount, Meminfo, Paths, Pool, Thp};
use bulkhead_sys::host::page_size_cgroup_name;
use bulkhead_sys::units::human_bytes;
use std::fs;
use std::path::{Path, PathBuf};

/// The smaps_rollup totals, bytes. Rss does not include hugetlb pages.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Rollup {
    pub rss: u64,
    pub anonymous: u64,
    pub anon_huge: u64,
    pub shmem_pmd: u64,
    pub file_pmd: u64,
    pub hugetlb: u64,
    pub swap: u64,
}

fn kb_field(line: &str, key: &str) -> Option<u64> {
    let rest = line.strip_prefix(key)?.strip_prefix(':')?;
    let mut it = rest.split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    Some(if it.next() == Some("kB") { n << 10 } else { n })
}

pub fn parse_rollup(text: &str) -> Rollup {
    let mut r = Rollup::default();
    for l in text.lines() {
        let add = |k: &str, f: &mut u64| {
            if let Some(v) = kb_field(l, k) {
                *f += v;
            }
        };
        add("Rss", &mut r.rss);
        add("Anonymous", &mut r.anonymous);
        add("AnonHugePages", &mut r.anon_huge);
        add("ShmemPmdMapped", &mut r.shmem_pmd);
        add("FilePmdMapped", &mut r.file_pmd);
        add("Shared_Hugetlb", &mut r.hugetlb);
        add("Private_Hugetlb", &mut r.hugetlb);
        add("Swap", &mut r.swap);
    }
    r
}

/// One memory area from /proc/PID/smaps.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub inode: u64,
    pub path: String,
    pub kernel_page_size: u64,
    pub rss: u64,
    pub anonymous: u64,
    pub anon_huge: u64,
    pub hugetlb: u64,
    pub flags: Vec<String>,
}

impl Vma {
    pub fn size(&self) -> u64 {
        self.end - self.start
    }
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
    /// Private anonymous memory (heap, stacks, anonymous mmaps), not hugetlb.
    pub fn is_anon_private(&self) -> bool {
        self.perms.ends_with('p')
            && self.perms.starts_with("rw")
            && (self.inode == 0 || self.path == "[heap]")
            && !self.has("ht")
            && !self.path.starts_with("[v")
    }
}

pub fn parse_smaps(text: &str) -> Vec<Vma> {
    let mut out: Vec<Vma> = Vec::new();
    for l in text.lines() {
        let first = l.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                let mut it = l.split_whitespace().skip(1);
                let perms = it.next().unwrap_or("").to_string();
                let _offset = it.next();
                let _dev = it.next();
                let inode = it.next().and_then(|i| i.parse().ok()).unwrap_or(0);
                let path = it.collect::<Vec<_>>().join(" ");
                out.push(Vma {
                    start,
                    end,
                    perms,
                    inode,
                    path,
                    ..Default::default()
                });
                continue;
            }
        }
        let Some(v) = out.last_mut() else { continue };
        if let Some(f) = l.strip_prefix("VmFlags:") {
            v.flags = f.split_whitespace().map(String::from).collect();
        } else if let Some(x) = kb_field(l, "KernelPageSize") {
            v.kernel_page_size = x;
        } else if let Some(x) = kb_field(l, "Rss") {
            v.rss = x;
        } else if let Some(x) = kb_field(l, "Anonymous") {
            v.anonymous = x;
        } else if let Some(x) = kb_field(l, "AnonHugePages") {
            v.anon_huge = x;
        } else if let Some(x) =
            kb_field(l, "Private_Hugetlb").or_else(|| kb_field(l, "Shared_Hugetlb"))
        {
            v.hugetlb += x;
        }
    }
    out
}

/// Memory of one process on one NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct NodeUse {
    pub node: u32,
    /// Everything mapped on the node (hugetlb included), bytes.
    pub bytes: u64,
    /// The hugetlb part.
    pub hugetlb: u64,
}

/// Pages per node from numa_maps: `N0=12` counts pages of the area's `kernelpagesize_kB`.
pub fn parse_numa_maps(text: &str) -> Vec<NodeUse> {
    let mut out: Vec<NodeUse> = Vec::new();
    for l in text.lines() {
        let words: Vec<&str> = l.split_whitespace().collect();
        let page = words
            .iter()
            .find_map(|w| w.strip_prefix("kernelpagesize_kB="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(4)
            << 10;
        let huge = words.contains(&"huge");
        for w in &words {
            let Some((n, c)) = w.strip_prefix('N').and_then(|r| r.split_once('=')) else {
                continue;
            };
            let (Ok(node), Ok(count)) = (n.parse::<u32>(), c.parse::<u64>()) else {
                continue;
            };
            let e = match out.iter_mut().find(|u| u.node == node) {
                Some(e) => e,
                None => {
                    out.push(NodeUse {
                        node,
                        ..Default::default()
                    });
                    out.last_mut().unwrap()
                }
            };
            e.bytes += count * page;
            if huge {
                e.hugetlb += count * page;
            }
        }
    }
    out.sort_by_key(|u| u.node);
    out
}

/// hugetlb cgroup counters for one page size, bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HugetlbCounter {
    pub size: u64,
    pub current: u64,
    /// `None`: no limit.
    pub max: Option<u64>,
    pub rsvd_current: Option<u64>,
    pub rsvd_max: Option<u64>,
    /// Allocations refused at the limit (v2 `events` max, v1 `failcnt`).
    pub limit_hits: u64,
}

fn limit_value(s: &str) -> Option<u64> {
    match s.trim() {
        "max" | "-1" => None,
        t => t.parse::<u64>().ok().filter(|v| *v < 1 << 62),
    }
}

/// The hugetlb counters of one cgroup directory, for every page size it has files for.
pub fn cgroup_counters(dir: &Path, version: Version, sizes: &[u64]) -> Vec<HugetlbCounter> {
    let read = |f: String| fs::read_to_string(dir.join(f)).ok();
    sizes
        .iter()
        .filter_map(|&size| {
            let n = page_size_cgroup_name(size);
            let (cur, max, rcur, rmax, hits) = match version {
                Version::V2 => (
                    read(format!("hugetlb.{n}.current"))?,
                    read(format!("hugetlb.{n}.max")),
                    read(format!("hugetlb.{n}.rsvd.current")),
                    read(format!("hugetlb.{n}.rsvd.max")),
                    read(format!("hugetlb.{n}.events")).and_then(|t| {
                        t.lines()
                            .find_map(|l| l.strip_prefix("max ")?.trim().parse::<u64>().ok())
                    }),
                ),
                Version::V1 => (
                    read(format!("hugetlb.{n}.usage_in_bytes"))?,
                    read(format!("hugetlb.{n}.limit_in_bytes")),
                    read(format!("hugetlb.{n}.rsvd.usage_in_bytes")),
                    read(format!("hugetlb.{n}.rsvd.limit_in_bytes")),
                    read(format!("hugetlb.{n}.failcnt")).and_then(|t| t.trim().parse().ok()),
                ),
            };
            Some(HugetlbCounter {
                size,
                current: cur.trim().parse().unwrap_or(0),
                max: max.as_deref().and_then(limit_value),
                rsvd_current: rcur.and_then(|t| t.trim().parse().ok()),
                rsvd_max: rmax.as_deref().and_then(limit_value),
                limit_hits: hits.unwrap_or(0),
            })
        })
        .collect()
}

/// The huge page allocator switches in a process's environment.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AllocatorEnv {
    /// The value of `glibc.malloc.hugetlb` in GLIBC_TUNABLES.
    pub glibc_hugetlb: Option<String>,
    /// The `thp:` setting in MALLOC_CONF / JE_MALLOC_CONF (jemalloc).
    pub jemalloc_thp: Option<String>,
}

/// The allocator switches in a `/proc/PID/environ`. glibc (before 2.38) parses
/// GLIBC_TUNABLES in place at start, turning its `:` separators into NULs, so tunables can
/// follow as entries of their own.
pub fn parse_environ(raw: &[u8]) -> AllocatorEnv {
    let mut a = AllocatorEnv::default();
    let mut in_tunables = false;
    for kv in raw.split(|b| *b == 0) {
        let s = String::from_utf8_lossy(kv);
        let Some((k, v)) = s.split_once('=') else {
            continue;
        };
        if in_tunables && k.starts_with("glibc.") {
            if k == "glibc.malloc.hugetlb" {
                a.glibc_hugetlb = Some(v.to_string());
            }
            continue;
        }
        in_tunables = k == "GLIBC_TUNABLES";
        match k {
            "GLIBC_TUNABLES" => {
                a.glibc_hugetlb = v
                    .split(':')
                    .find_map(|t| t.strip_prefix("glibc.malloc.hugetlb="))
                    .map(String::from)
            }
            "MALLOC_CONF" | "JE_MALLOC_CONF" => {
                a.jemalloc_thp = v
                    .split(',')
                    .find_map(|t| t.strip_prefix("thp:"))
                    .map(String::from)
            }
            _ => {}
        }
    }
    a
}

/// hugetlb memory of one page size.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SizeBytes {
    pub size: u64,
    pub bytes: u64,
}

/// How a process's memory sits on pages.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ProcessUsage {
    pub pid: i32,
    pub comm: String,
    /// Resident memory outside hugetlb, bytes.
    pub rss: u64,
    pub anonymous: u64,
    /// Anonymous memory on transparent huge pages.
    pub thp: u64,
    /// shmem and file pages mapped as huge pages.
    pub shmem_thp: u64,
    pub file_thp: u64,
    /// Resident memory on base (4K) pages: rss minus everything PMD-mapped.
    pub base_pages: u64,
    /// hugetlb memory per page size.
    pub hugetlb: Vec<SizeBytes>,
    /// thp / anonymous.
    pub thp_coverage: f64,
    /// Areas marked MADV_HUGEPAGE (`hg`), their size and their THP part.
    pub madvised: u64,
    pub madvised_thp: u64,
    /// Areas marked MADV_NOHUGEPAGE (`nh`).
    pub refused: u64,
    /// `THP_enabled` from /proc/PID/status: false after prctl(PR_SET_THP_DISABLE).
    pub thp_enabled: Option<bool>,
    pub allocator_env: AllocatorEnv,
    pub numa: Vec<NodeUse>,
    /// The process's hugetlb cgroup and its counters.
    pub cgroup: Option<PathBuf>,
    pub cgroup_counters: Vec<HugetlbCounter>,
    /// Asked for huge pages but did not get them, and why.
    pub findings: Vec<String>,
}

impl ProcessUsage {
    pub fn hugetlb_total(&self) -> u64 {
        self.hugetlb.iter().map(|h| h.bytes).sum()
    }
}

fn no_such_process(pid: i32) -> Error {
    Error::invalid(
        Diagnostic::error(format!("no process with PID {pid}"))
            .hint("check the PID (ps -e, pgrep NAME)"),
    )
}

fn vanished(pid: i32) -> Error {
    Error::failed_with(
        Diagnostic::error(format!(
            "process {pid} exited while bulkhead was reading it"
        ))
        .hint("nothing was changed; run the command again for a process that stays"),
    )
}

/// Read a /proc/PID file, turning ENOENT/ESRCH into "gone".
fn proc_read(p: &Paths, pid: i32, file: &str) -> std::result::Result<Vec<u8>, bool> {
    fs::read(p.proc.join(pid.to_string()).join(file)).map_err(|e| {
        matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
            || e.kind() == std::io::ErrorKind::NotFound
    })
}

/// Whether a PID is a kernel thread (PF_KTHREAD in the flags of /proc/PID/stat).
pub fn is_kernel_thread(proc_: &Path, pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(proc_.join(pid.to_string()).join("stat")) else {
        return false;
    };
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|f| f & 0x0020_0000 != 0)
}

/// Everything about one process. `layout` adds its hugetlb cgroup counters.
pub fn process_usage(
    paths: &Paths,
    pid: i32,
    layout: Option<&Layout>,
    sizes: &[u64],
) -> Result<ProcessUsage> {
    if pid <= 0 {
        return Err(Error::invalid(Diagnostic::error(format!(
            "{pid} is not a process ID"
        ))));
    }
    let text = |file: &str, first: bool| -> Result<String> {
        match proc_read(paths, pid, file) {
            Ok(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
            Err(true) if first => Err(no_such_process(pid)),
            Err(true) => Err(vanished(pid)),
            Err(false) => Err(Error::failed(format!(
                "cannot read /proc/{pid}/{file} (bulkhead needs root to read other users' processes)"
            ))),
        }
    };
    let comm = text("comm", true)?.trim().to_string();
    if is_kernel_thread(&paths.proc, pid) {
        return Err(Error::invalid(Diagnostic::error(format!(
            "PID {pid} ({comm}) is a kernel thread: it has no user memory"
        ))));
    }
    let rollup_text = text("smaps_rollup", false)?;
    if rollup_text.trim().is_empty() {
        return Err(Error::invalid(Diagnostic::error(format!(
            "PID {pid} ({comm}) is a kernel thread or a zombie: it has no user memory"
        ))));
    }
    let roll = parse_rollup(&rollup_text);
    let vmas = parse_smaps(&text("smaps", false)?);
    let numa = parse_numa_maps(&text("numa_maps", false).unwrap_or_default());
    let status = text("status", false)?;
    let environ = proc_read(paths, pid, "environ").unwrap_or_default();
    let mut u = ProcessUsage {
        pid,
        comm,
        rss: roll.rss,
        anonymous: roll.anonymous,
        thp: roll.anon_huge,
        shmem_thp: roll.shmem_pmd,
        file_thp: roll.file_pmd,
        base_pages: roll
            .rss
            .saturating_sub(roll.anon_huge + roll.shmem_pmd + roll.file_pmd),
        thp_coverage: if roll.anonymous > 0 {
            roll.anon_huge as f64 / roll.anonymous as f64
        } else {
            0.0
        },
        thp_enabled: status
            .lines()
            .find_map(|l| l.strip_prefix("THP_enabled:").map(|v| v.trim() == "1")),
        allocator_env: parse_environ(&environ),
        numa,
        ..Default::default()
    };
    for v in &vmas {
        if v.hugetlb > 0 || v.has("ht") {
            let size = v.kernel_page_size;
            match u.hugetlb.iter_mut().find(|h| h.size == size) {
                Some(h) => h.bytes += v.hugetlb,
                None => u.hugetlb.push(SizeBytes {
                    size,
                    bytes: v.hugetlb,
                }),
            }
        }
        if v.has("hg") {
            u.madvised += v.size();
            u.madvised_thp += v.anon_huge;
        }
        if v.has("nh") {
            u.refused += v.size();
        }
    }
    u.hugetlb.retain(|h| h.bytes > 0);
    u.hugetlb.sort_by_key(|h| h.size);
    if let Some(h) = layout.and_then(|l| l.hierarchy("hugetlb")) {
        let cg = text("cgroup", false).unwrap_or_default();
        if let Some(rel) = bulkhead_cgroups::fs::original_path(&cg, h) {
            let dir = h.mount.join(rel.trim_start_matches('/'));
            u.cgroup_counters = cgroup_counters(&dir, h.version, sizes);
            u.cgroup = Some(PathBuf::from(rel));
        }
    }
    Ok(u)
}

/// Why a process that asked for huge pages has none (empty: it has them, or never asked).
pub fn findings(u: &ProcessUsage, thp: &Thp, pools: &[Pool], default_size: u64) -> Vec<String> {
    let mut f = Vec::new();
    let thp_mode = thp
        .enabled
        .as_ref()
        .map(|c| c.active.clone())
        .unwrap_or_else(|| "unavailable".into());
    let pmd = thp.pmd_size.unwrap_or(2 << 20);
    if u.thp_enabled == Some(false) {
        f.push(
            "THP is switched off for this process (prctl PR_SET_THP_DISABLE; Redis does this with disable-thp when THP is 'always')".to_string(),
        );
    }
    if u.madvised >= pmd && u.madvised_thp == 0 {
        let why = if thp_mode == "never" || thp_mode == "unavailable" {
            format!("THP is '{thp_mode}'")
        } else {
            "no free huge page blocks at fault time, or the areas are not touched yet; `bulkhead hugepages collapse PID` can move them now".to_string()
        };
        f.push(format!(
            "asked for THP on {} (MADV_HUGEPAGE) but got none: {why}",
            human_bytes(u.madvised)
        ));
    }
    if let Some(v) = &u.allocator_env.glibc_hugetlb {
        let wants_hugetlb = v.parse::<u64>().is_ok_and(|n| n >= 2);
        if wants_hugetlb && u.hugetlb_total() == 0 && u.anonymous >= 2 * default_size {
            let size = match v.parse::<u64>() {
                Ok(2) => default_size,
                Ok(n) => n,
                _ => default_size,
            };
            let free = pools
                .iter()
                .find(|p| p.size == size)
                .map(|p| p.available())
                .unwrap_or(0);
            f.push(format!(
                "GLIBC_TUNABLES asks glibc's malloc for hugetlb pages (glibc.malloc.hugetlb={v}) but the process has none: glibc falls back to normal pages without a word when the {} pool is empty ({free} pages free now) or the program does not use glibc's malloc",
                human_bytes(size)
            ));
        }
        if v == "1" && u.thp == 0 && u.anonymous >= 2 * pmd {
            let glibc = match super::allocator::glibc_version() {
                Some(g) if super::allocator::glibc_thp_check_flaky(g) => format!(
                    "; glibc {}.{} misses THP's madvise mode at some starts",
                    g.0, g.1
                ),
                _ => String::new(),
            };
            f.push(format!(
                "GLIBC_TUNABLES asks glibc's malloc for THP (glibc.malloc.hugetlb=1) but the process has none (THP is '{thp_mode}'; a program with its own allocator, like jemalloc, ignores it{glibc})"
            ));
        }
    }
    if u.allocator_env.jemalloc_thp.as_deref() == Some("always")
        && u.thp == 0
        && u.anonymous >= 2 * pmd
    {
        f.push(format!(
            "MALLOC_CONF asks jemalloc for THP (thp:always) but the process has none (THP is '{thp_mode}')"
        ));
    }
    f
}

/// A slice's huge page use.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SliceUse {
    pub slice: String,
    pub hugetlb: Vec<HugetlbCounter>,
    /// Anonymous THP charged to the slice (memory.stat anon_thp, v1 total_rss_huge).
    pub thp: Option<u64>,
}

/// One line of the process table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessLine {
    pub pid: i32,
    pub comm: String,
    pub anonymous: u64,
    pub thp: u64,
    pub hugetlb: u64,
    pub thp_coverage: f64,
    pub findings: Vec<String>,
}

/// The whole picture for `hugepages status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    pub default_size: u64,
    pub pools: Vec<Pool>,
    pub thp: Thp,
    pub meminfo: Meminfo,
    pub mounts: Vec<HugetlbfsMount>,
    pub slices: Vec<SliceUse>,
    /// Processes with the most huge page memory.
    pub top: Vec<ProcessLine>,
    /// Processes that asked for huge pages and did not get them.
    pub wanting: Vec<ProcessLine>,
    /// What `hugepages reset` would put back.
    pub saved: Saved,
    pub state_file: PathBuf,
}

/// Read everything. `top` processes by huge page memory are listed.
pub fn status(fs_: &CgroupFs, paths: &Paths, top: usize, state: &Path) -> Result<Status> {
    let pools = sysfs::pools(paths);
    let thp = sysfs::thp(paths);
    let default_size = sysfs::default_size(paths);
    let sizes: Vec<u64> = pools.iter().map(|p| p.size).collect();
    let mut slices = Vec::new();
    for s in fs_.slices_on_system() {
        let hugetlb = match (fs_.layout.hierarchy("hugetlb"), fs_.dir_for("hugetlb", &s)) {
            (Some(h), Some(d)) => cgroup_counters(&d, h.version, &sizes),
            _ => vec![],
        };
        let thp_bytes = fs_.dir_for("memory", &s).and_then(|d| {
            let t = fs::read_to_string(d.join("memory.stat")).ok()?;
            let get = |k: &str| {
                t.lines().find_map(|l| {
                    l.strip_prefix(k)?
                        .strip_prefix(' ')?
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
            };
            get("anon_thp").or_else(|| get("total_rss_huge"))
        });
        slices.push(SliceUse {
            slice: s.to_string(),
            hugetlb,
            thp: thp_bytes,
        });
    }
    let mut lines = Vec::new();
    let mut wanting = Vec::new();
    if let Ok(rd) = fs::read_dir(&paths.proc) {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            // Processes that exit meanwhile, kernel threads: not in the table.
            let Ok(u) = process_usage(paths, pid, None, &sizes) else {
                continue;
            };
            let fnd = findings(&u, &thp, &pools, default_size);
            let line = ProcessLine {
                pid,
                comm: u.comm.clone(),
                anonymous: u.anonymous,
                thp: u.thp,
                hugetlb: u.hugetlb_total(),
                thp_coverage: u.thp_coverage,
                findings: fnd.clone(),
            };
            if !fnd.is_empty() {
                wanting.push(line.clone());
            }
            if line.thp + line.hugetlb > 0 {
                lines.push(line);
            }
        }
    }
    lines.sort_by_key(|l| std::cmp::Reverse(l.thp + l.hugetlb));
    lines.truncate(top);
    wanting.sort_by_key(|l| l.pid);
    Ok(Status {
        default_size,
        pools,
        thp,
        meminfo: sysfs::meminfo(paths),
        mounts: sysfs::hugetlbfs_mounts(paths),
        slices,
        top: lines,
        wanting,
        saved: Saved::load(state).unwrap_or_default(),
        state_file: state.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a0000000-55d0a0021000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
KernelPageSize:        4 kB
Rss:                  12 kB
Anonymous:            12 kB
AnonHugePages:         0 kB
Private_Hugetlb:       0 kB
VmFlags: rd wr mr mw me ac sd
7f0000000000-7f0004000000 rw-p 00000000 00:00 0
Size:              65536 kB
KernelPageSize:        4 kB
Rss:               65536 kB
Anonymous:         65536 kB
AnonHugePages:     61440 kB
Private_Hugetlb:       0 kB
VmFlags: rd wr mr mw me ac sd hg
7f1000000000-7f1000800000 rw-p 00000000 00:0f 12345                      /anon_hugepage (deleted)
Size:               8192 kB
KernelPageSize:     2048 kB
Rss:                   0 kB
Anonymous:             0 kB
AnonHugePages:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:    8192 kB
VmFlags: rd wr mr mw me de ac sd ht
";

    #[test]
    fn smaps_areas_flags_and_hugetlb() {
        let v = parse_smaps(SMAPS);
        assert_eq!(v.len(), 3);
        assert!(v[0].is_anon_private() && v[0].path == "[heap]");
        assert!(v[1].has("hg") && v[1].is_anon_private());
        assert_eq!(v[1].anon_huge, 60 << 20);
        assert!(!v[2].is_anon_private(), "hugetlb is not THP material");
        assert_eq!((v[2].kernel_page_size, v[2].hugetlb), (2 << 20, 8 << 20));
    }

    #[test]
    fn rollup_numa_environ() {
        let r = parse_rollup(
            "Rss: 100 kB\nAnonymous: 80 kB\nAnonHugePages: 40 kB\nPrivate_Hugetlb: 2048 kB\nShared_Hugetlb: 2048 kB\n",
        );
        assert_eq!(r.rss, 100 << 10);
        assert_eq!(r.hugetlb, 4 << 20);
        let n = parse_numa_maps(
            "7f00 default anon=10 dirty=10 N0=10 kernelpagesize_kB=4\n7f10 default file=/anon_hugepage\\040(deleted) huge dirty=4 N0=3 N1=1 kernelpagesize_kB=2048\n",
        );
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].bytes, (10 << 12) + (3 << 21));
        assert_eq!(n[0].hugetlb, 3 << 21);
        assert_eq!(n[1].hugetlb, 2 << 20);
        let a = parse_environ(
            b"PATH=/bin\0GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2\0MALLOC_CONF=narenas:1,thp:always\0",
        );
        assert_eq!(a.glibc_hugetlb.as_deref(), Some("2"));
        assert_eq!(a.jemalloc_thp.as_deref(), Some("always"));
        // As glibc leaves it after parsing.
        let a = parse_environ(
            b"GLIBC_TUNABLES=glibc.malloc.arena_max=2\0glibc.malloc.hugetlb=1\0HOME=/root\0",
        );
        assert_eq!(a.glibc_hugetlb.as_deref(), Some("1"));
    }

    #[test]
    fn cgroup_counters_v1_and_v2() {
        let d = std::env::temp_dir().join(format!("bulkhead-hp-cg-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        for (f, v) in [
            ("hugetlb.2MB.current", "4194304\n"),
            ("hugetlb.2MB.max", "8388608\n"),
            ("hugetlb.2MB.rsvd.current", "4194304\n"),
            ("hugetlb.2MB.rsvd.max", "max\n"),
            ("hugetlb.2MB.events", "max 3\n"),
            ("hugetlb.1GB.usage_in_bytes", "0\n"),
            ("hugetlb.1GB.limit_in_bytes", "9223372036854771712\n"),
            ("hugetlb.1GB.failcnt", "2\n"),
        ] {
            fs::write(d.join(f), v).unwrap();
        }
        let v2 = cgroup_counters(&d, Version::V2, &[2 << 20, 1 << 30]);
        assert_eq!(v2.len(), 1, "no v2 files for 1G here");
        assert_eq!(
            v2[0],
            HugetlbCounter {
                size: 2 << 20,
                current: 4 << 20,
                max: Some(8 << 20),
                rsvd_current: Some(4 << 20),
                rsvd_max: None,
                limit_hits: 3,
            }
        );
        let v1 = cgroup_counters(&d, Version::V1, &[2 << 20, 1 << 30]);
        assert_eq!(v1.len(), 1);
        assert_eq!(
            (v1[0].size, v1[0].max, v1[0].limit_hits),
            (1 << 30, None, 2)
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn findings_name_what_was_asked_and_missed() {
        let thp = Thp {
            enabled: Some(sysfs::Choice::parse("always madvise [never]")),
            pmd_size: Some(2 << 20),
            ..Default::default()
        };
        let u = ProcessUsage {
            anonymous: 64 << 20,
            madvised: 64 << 20,
            allocator_env: AllocatorEnv {
                glibc_hugetlb: Some("2".into()),
                jemalloc_thp: None,
            },
            thp_enabled: Some(false),
            ..Default::default()
        };
        let pools = vec![Pool {
            size: 2 << 20,
            ..Default::default()
        }];
        let f = findings(&u, &thp, &pools, 2 << 20);
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f[0].contains("PR_SET_THP_DISABLE"));
        assert!(f[1].contains("THP is 'never'"));
        assert!(f[2].contains("0 pages free"));
        let got = ProcessUsage {
            thp: 60 << 20,
            madvised_thp: 60 << 20,
            ..u
        };
        let mut ok = got.clone();
        ok.thp_enabled = Some(true);
        ok.hugetlb = vec![SizeBytes {
            size: 2 << 20,
            bytes: 8 << 20,
        }];
        assert!(findings(&ok, &thp, &pools, 2 << 20).is_empty());
    }
}
