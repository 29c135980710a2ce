//! Every process of the machine as `check` needs it: its PID, its name (`comm`) and its
//! `/proc/PID/cgroup` text, read once per process, at most [`MAX_PROCESSES`] of them.

use std::fs;
use std::path::Path;

/// The most processes one scan reads (a bound on the work of one `check` or scrape).
pub const MAX_PROCESSES: usize = 65_536;

/// One process as the scan saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProcEntry {
    pub pid: u32,
    /// `/proc/PID/comm`: the first 15 bytes of the executable's name (or what it set).
    pub comm: String,
    /// `/proc/PID/cgroup`, as the kernel prints it.
    #[serde(skip)]
    pub cgroup: String,
}

/// What one scan read.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub procs: Vec<ProcEntry>,
    /// More processes than [`MAX_PROCESSES`] existed: the rest were not read.
    pub truncated: bool,
}

/// Read every process under `proc` (normally `/proc`). A process that exits during the
/// scan, or whose files cannot be read, is left out; kernel threads (no cgroup of their
/// own to judge) are too.
pub fn scan(proc: &Path) -> Scan {
    let mut out = Scan::default();
    let Ok(dir) = fs::read_dir(proc) else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if out.procs.len() >= MAX_PROCESSES {
            out.truncated = true;
            break;
        }
        if let Some(p) = read_one(&e.path(), pid) {
            out.procs.push(p);
        }
    }
    out.procs.sort_by_key(|p| p.pid);
    out
}

fn read_one(dir: &Path, pid: u32) -> Option<ProcEntry> {
    // Kernel threads have an empty command line; they are not workloads.
    let cmdline = fs::read(dir.join("cmdline")).ok()?;
    if cmdline.is_empty() {
        return None;
    }
    let comm = fs::read_to_string(dir.join("comm")).ok()?;
    let cgroup = fs::read_to_string(dir.join("cgroup")).ok()?;
    Some(ProcEntry {
        pid,
        comm: comm.trim_end_matches('\n').to_string(),
        cgroup,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_processes_and_leaves_out_kernel_threads() {
        let d = std::env::temp_dir().join(format!("bulkhead-proclist-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        for (pid, comm, cmdline) in [
            ("7", "redis-server\n", "redis-server\0"),
            ("2", "kthreadd\n", ""),
        ] {
            let p = d.join(pid);
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("comm"), comm).unwrap();
            fs::write(p.join("cmdline"), cmdline).unwrap();
            fs::write(p.join("cgroup"), "0::/db.slice\n").unwrap();
        }
        fs::create_dir_all(d.join("self")).unwrap();
        let s = scan(&d);
        fs::remove_dir_all(&d).unwrap();
        assert_eq!(s.procs.len(), 1);
        assert_eq!(s.procs[0].pid, 7);
        assert_eq!(s.procs[0].comm, "redis-server");
        assert_eq!(s.procs[0].cgroup, "0::/db.slice\n");
        assert!(!s.truncated);
    }
}
