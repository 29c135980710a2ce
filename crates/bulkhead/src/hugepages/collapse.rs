//! `hugepages collapse PID`: move a running process's anonymous memory onto transparent huge
//! pages now, with `process_madvise(pidfd, MADV_COLLAPSE)` (Linux 6.1+), instead of waiting
//! for khugepaged (which only looks at MADV_HUGEPAGE areas in `madvise` mode, slowly).
//!
//! The process is named by a pidfd, so a PID reused midway is never touched. Only private
//! anonymous areas are advised, and only their 2M-aligned parts; areas the program marked
//! MADV_NOHUGEPAGE are left alone. Collapsing a partly used 2M range fills it, so resident
//! memory can grow: the report shows it.

use super::usage::{parse_rollup, parse_smaps, Rollup, Vma};
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use bulkhead_sys::units::human_bytes;
use std::os::fd::OwnedFd;

/// Advice per call: large areas are advised in pieces, so a failure in one piece (no free
/// huge page there) does not hide the rest.
const CHUNK: u64 = 256 << 20;

/// Whether a kernel release (`6.1.0-13-amd64`) has MADV_COLLAPSE for process_madvise.
pub fn kernel_has_collapse(release: &str) -> bool {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (major, minor) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (major, minor) >= (6, 1)
}

/// Coverage of anonymous memory by THP at one moment.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Coverage {
    pub anonymous: u64,
    pub thp: u64,
    pub rss: u64,
    pub fraction: f64,
}

impl From<&Rollup> for Coverage {
    fn from(r: &Rollup) -> Self {
        Coverage {
            anonymous: r.anonymous,
            thp: r.anon_huge,
            rss: r.rss,
            fraction: if r.anonymous > 0 {
                r.anon_huge as f64 / r.anonymous as f64
            } else {
                0.0
            },
        }
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CollapseReport {
    pub pid: i32,
    pub comm: String,
    pub before: Coverage,
    pub after: Coverage,
    /// 2M-aligned ranges advised, and bytes in them.
    pub ranges: usize,
    pub bytes: u64,
    /// Ranges the kernel could not collapse, with its reason.
    pub failed: Vec<String>,
    /// Areas left alone because the program marked them MADV_NOHUGEPAGE.
    pub skipped_nohugepage: usize,
}

fn advise(pidfd: &OwnedFd, start: u64, len: u64) -> std::io::Result<usize> {
    use std::os::fd::AsFd;
    bulkhead_sys::process::madvise_collapse(pidfd.as_fd(), start, len)
}

fn read_proc(pid: i32, file: &str, gone: &dyn Fn() -> Error) -> Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{file}")).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) {
            gone()
        } else {
            Error::failed(format!(
                "cannot read /proc/{pid}/{file}: {}",
                errno_text(&e)
            ))
        }
    })
}

/// Collapse the process's anonymous memory onto THP and report coverage before and after.
pub fn collapse(pid: i32, pmd_size: u64) -> Result<CollapseReport> {
    if pid <= 0 {
        return Err(Error::invalid(Diagnostic::error(format!(
            "{pid} is not a process ID"
        ))));
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if !kernel_has_collapse(release.trim()) {
        return Err(no_collapse(release.trim()));
    }
    let pidfd = bulkhead_sys::process::pidfd_open(pid).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => missing(pid),
        _ => Error::failed(format!(
            "bulkhead_sys::process::pidfd_open({pid}): {}",
            errno_text(&e)
        )),
    })?;
    let comm = read_proc(pid, "comm", &|| missing(pid))?.trim().to_string();
    if super::usage::is_kernel_thread(std::path::Path::new("/proc"), pid) {
        return Err(Error::invalid(Diagnostic::error(format!(
            "PID {pid} ({comm}) is a kernel thread: it has no memory to collapse"
        ))));
    }
    let before_text = read_proc(pid, "smaps_rollup", &|| gone_midway(pid, 0))?;
    if before_text.trim().is_empty() {
        return Err(Error::invalid(Diagnostic::error(format!(
            "PID {pid} ({comm}) is a kernel thread or a zombie: it has no memory to collapse"
        ))));
    }
    let vmas = parse_smaps(&read_proc(pid, "smaps", &|| gone_midway(pid, 0))?);
    let mut r = CollapseReport {
        pid,
        comm,
        before: Coverage::from(&parse_rollup(&before_text)),
        ..Default::default()
    };
    let ranges = ranges(&vmas, pmd_size, &mut r.skipped_nohugepage);
    for (i, &(s, e)) in ranges.iter().enumerate() {
        advise_range(&pidfd, i, s, e, &mut r)?;
    }
    let after_text = read_proc(pid, "smaps_rollup", &|| gone_midway(pid, r.ranges))?;
    r.after = Coverage::from(&parse_rollup(&after_text));
    Ok(r)
}

/// No process has that PID (nothing was done yet).
fn missing(pid: i32) -> Error {
    Error::invalid(
        Diagnostic::error(format!("no process with PID {pid}"))
            .hint("check the PID (ps -e, pgrep NAME); nothing was changed"),
    )
}

/// The process exited after `done` ranges were collapsed.
fn gone_midway(pid: i32, done: usize) -> Error {
    Error::failed_with(
        Diagnostic::error(format!("process {pid} exited during the collapse")).hint(format!(
            "{done} range(s) were collapsed before it went; nothing else changed"
        )),
    )
}

/// The 2M-aligned parts of the private anonymous areas with something resident, in pieces of
/// at most [`CHUNK`]; areas marked MADV_NOHUGEPAGE are counted in `skipped` and left alone.
fn ranges(vmas: &[Vma], pmd_size: u64, skipped: &mut usize) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    for v in vmas.iter().filter(|v| v.is_anon_private()) {
        if v.has("nh") {
            *skipped += 1;
            continue;
        }
        let start = v.start.div_ceil(pmd_size) * pmd_size;
        let end = v.end / pmd_size * pmd_size;
        // Only ranges with something resident: collapsing untouched memory would fill it.
        if end <= start || v.rss == 0 {
            continue;
        }
        let mut s = start;
        while s < end {
            let e = (s + CHUNK).min(end);
            ranges.push((s, e));
            s = e;
        }
    }
    ranges
}

/// Advise the range `s..e` (the `i`th), trying twice more while the kernel says EAGAIN; a
/// range the kernel cannot collapse goes into the report's failures.
fn advise_range(pidfd: &OwnedFd, i: usize, s: u64, e: u64, r: &mut CollapseReport) -> Result<()> {
    let pid = r.pid;
    let mut tries = 0;
    loop {
        let err = match advise(pidfd, s, e - s) {
            Ok(_) => {
                r.ranges += 1;
                r.bytes += e - s;
                return Ok(());
            }
            Err(err) => err,
        };
        match err.raw_os_error() {
            Some(libc::ESRCH) => return Err(gone_midway(pid, i)),
            Some(libc::EAGAIN) if tries < 2 => tries += 1,
            Some(libc::EPERM) => {
                return Err(Error::failed_with(
                    Diagnostic::error(format!(
                        "process_madvise on PID {pid}: {}",
                        errno_text(&err)
                    ))
                    .hint("collapse needs root (CAP_SYS_NICE and ptrace access to the process)"),
                ))
            }
            _ => {
                r.failed.push(format!(
                    "{:#x}-{:#x} ({}): {}",
                    s,
                    e,
                    human_bytes(e - s),
                    errno_text(&err)
                ));
                return Ok(());
            }
        }
    }
}

fn no_collapse(release: &str) -> Error {
    Error::invalid(
        Diagnostic::error(format!(
            "this kernel ({release}) has no MADV_COLLAPSE for process_madvise (Linux 6.1 or newer has it); nothing was changed"
        ))
        .hint("start the program with `bulkhead run --hugepages thp` instead, or let khugepaged collapse MADV_HUGEPAGE areas in the background"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapse_needs_6_1() {
        assert!(kernel_has_collapse("6.1.0-13-amd64"));
        assert!(kernel_has_collapse("6.18.44-fc-v470"));
        assert!(kernel_has_collapse("7.0"));
        assert!(!kernel_has_collapse("6.0.19"));
        assert!(!kernel_has_collapse("5.15.0-91-generic"));
        assert!(!kernel_has_collapse("garbage"));
        assert!(no_collapse("5.15.0")
            .to_string()
            .contains("no MADV_COLLAPSE"));
        assert_eq!(no_collapse("5.15.0").exit_code(), 2);
    }
}
