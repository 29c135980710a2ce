//! Control files and directories of cgroupfs: one write(2) per value, the processes of a
//! cgroup, killing them, and removing a cgroup whose tasks are still leaving.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Write a control file in one write(2), as the kernel expects.
pub fn write_file(path: &Path, value: &str) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(false)
        .open(path)?;
    f.write_all(value.as_bytes())
}

/// The PIDs in a cgroup (its own `cgroup.procs`).
pub fn procs(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The PIDs in a cgroup and every cgroup below it.
pub fn procs_tree(dir: &Path) -> Vec<i32> {
    let mut out = procs(dir);
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(procs_tree(&e.path()));
            }
        }
    }
    out
}

/// Processes in a cgroup and everything below it.
pub fn count_procs(dir: &Path) -> usize {
    let own = fs::read_to_string(dir.join("cgroup.procs")).map_or(0, |s| s.lines().count());
    let children: usize = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                // The entry's type from the directory read (d_type): no stat per control file.
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| count_procs(&e.path()))
                .sum()
        })
        .unwrap_or(0);
    own + children
}

/// Kill every process in these cgroups and wait until they are gone. `cgroup.kill` (v2,
/// Linux 5.14+) kills a subtree at once; else SIGKILL in a loop, so that processes forked
/// meanwhile are caught too.
pub fn kill_all(dirs: &[PathBuf]) -> std::io::Result<()> {
    for d in dirs {
        let k = d.join("cgroup.kill");
        if k.exists() {
            let _ = write_file(&k, "1");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids: Vec<i32> = dirs.iter().flat_map(|d| procs(d)).collect();
        if pids.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("processes {pids:?} are still alive 5s after SIGKILL"),
            ));
        }
        for p in pids {
            let _ = crate::process::kill(p, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Remove a cgroup directory. Exiting tasks leave a cgroup a moment after they are reaped, so
/// EBUSY is retried for up to 3 s; a cgroup that is already gone is fine.
pub fn rmdir(dir: &Path) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            r => return r,
        }
    }
}
