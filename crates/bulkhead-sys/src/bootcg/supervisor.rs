//! Controllers for a booted container on cgroup2, as systemd-nspawn gives them in a
//! delegated unit: the kernel lets a cgroup enable controllers for its children
//! (`cgroup.subtree_control`) only while no process lives in it, so bulkhead moves itself
//! from its own cgroup OWN into a child `OWN/supervisor` it makes, then enables
//! OWN's controllers below OWN; the container's cgroup, a sibling of `supervisor`, gets them.
//! Undone on drop, in reverse: the controllers enabled here turned off, bulkhead moved back
//! into OWN, `supervisor` removed. Everything goes through a descriptor of OWN opened once.
//! The caller decides whether OWN is bulkhead's to rearrange.

use rustix::fs::{AtFlags, Mode, OFlags};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The child of OWN that bulkhead's process moves into.
pub const SUPERVISOR: &str = "supervisor";

/// Bulkhead's process in `OWN/supervisor`, with the controllers it enabled in OWN.
#[derive(Debug)]
pub struct Supervisor {
    own: OwnedFd,
    own_path: PathBuf,
    enabled: Vec<String>,
}

/// The controllers of a cgroup2 list (`cgroup.controllers`, `cgroup.subtree_control`).
pub fn controllers(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

fn read_at(dir: &OwnedFd, name: &str) -> io::Result<String> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = crate::fd::read_once(fd.as_fd(), &mut buf)?;
        if n == 0 || out.len() > 1 << 20 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(out).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

fn write_at(dir: &OwnedFd, name: &str, text: &str) -> io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?;
    crate::fd::write_once(fd.as_fd(), text.as_bytes()).map(drop)
}

/// Why OWN is left as it is (the container then gets no controllers on cgroup2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// OWN is not a domain cgroup (`cgroup.type`: threaded, domain invalid, ...): a
    /// threaded subtree cannot hold the container's cgroups.
    NotDomain(String),
    /// Other processes than bulkhead's live in OWN: they would have to move too.
    Shared(Vec<u32>),
}

impl Supervisor {
    /// Move this process (all its threads: OWN is a domain cgroup, where `cgroup.procs` moves
    /// a whole process) into `OWN/supervisor`, made here (one left empty by a bulkhead that was
    /// killed is taken over), and enable each controller of `OWN/cgroup.controllers` in
    /// `OWN/cgroup.subtree_control`. `refused` hears each controller the kernel refuses
    /// (it stays off). Left alone, with the reason, when OWN is shared or not a domain.
    pub fn enter(
        own: &Path,
        refused: &mut dyn FnMut(&str, &io::Error),
    ) -> io::Result<Result<Supervisor, Skipped>> {
        let ctx = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("{what} {}: {e}", own.display()))
        };
        let dir = rustix::fs::open(
            own,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ctx("open", e.into()))?;
        let kind = read_at(&dir, "cgroup.type").map_err(|e| ctx("read cgroup.type of", e))?;
        if kind.trim() != "domain" {
            return Ok(Err(Skipped::NotDomain(kind.trim().to_string())));
        }
        let me = std::process::id();
        let procs = read_at(&dir, "cgroup.procs").map_err(|e| ctx("read cgroup.procs of", e))?;
        let others: Vec<u32> = procs
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|p| *p != me)
            .collect();
        if !others.is_empty() {
            return Ok(Err(Skipped::Shared(others)));
        }
        match rustix::fs::mkdirat(&dir, SUPERVISOR, Mode::from_raw_mode(0o755)) {
            Err(rustix::io::Errno::EXIST) if supervisor_empty(&dir) => {}
            r => r.map_err(|e| ctx(&format!("mkdir {SUPERVISOR} in"), e.into()))?,
        }
        let mut s = Supervisor {
            own: dir,
            own_path: own.to_path_buf(),
            enabled: Vec::new(),
        };
        if let Err(e) = write_at(
            &s.own,
            &format!("{SUPERVISOR}/cgroup.procs"),
            &me.to_string(),
        ) {
            let _ = s.remove_dir();
            return Err(ctx(&format!("move this process into {SUPERVISOR} of"), e));
        }
        let have = read_at(&s.own, "cgroup.controllers").map_err(|e| ctx("read", e))?;
        let on = controllers(&read_at(&s.own, "cgroup.subtree_control").unwrap_or_default());
        for c in controllers(&have).into_iter().filter(|c| !on.contains(c)) {
            match write_at(&s.own, "cgroup.subtree_control", &format!("+{c}")) {
                Ok(()) => s.enabled.push(c),
                Err(e) => refused(&c, &e),
            }
        }
        Ok(Ok(s))
    }

    /// The controllers enabled in OWN's `cgroup.subtree_control` (those it had already are
    /// not counted: they are not turned off afterwards).
    pub fn enabled(&self) -> &[String] {
        &self.enabled
    }

    /// `OWN/supervisor`.
    pub fn dir(&self) -> PathBuf {
        self.own_path.join(SUPERVISOR)
    }

    /// rmdir `OWN/supervisor`; EBUSY (a task still leaving) is retried for up to 3 s.
    fn remove_dir(&self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match rustix::fs::unlinkat(&self.own, SUPERVISOR, AtFlags::REMOVEDIR) {
                Err(rustix::io::Errno::BUSY) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(rustix::io::Errno::NOENT) => return Ok(()),
                r => return r.map_err(Into::into),
            }
        }
    }
}

/// Whether `OWN/supervisor` holds no process (left by a bulkhead killed with SIGKILL).
fn supervisor_empty(own: &OwnedFd) -> bool {
    read_at(own, &format!("{SUPERVISOR}/cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
}

impl Drop for Supervisor {
    /// Call after the container's cgroup below OWN is gone (no process may be in OWN while a
    /// controller is on below it).
    fn drop(&mut self) {
        for c in self.enabled.iter().rev() {
            let _ = write_at(&self.own, "cgroup.subtree_control", &format!("-{c}"));
        }
        let _ = write_at(&self.own, "cgroup.procs", &std::process::id().to_string());
        let _ = self.remove_dir();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_lists_are_split_on_white_space() {
        assert_eq!(controllers("cpu io  memory\n"), ["cpu", "io", "memory"]);
        assert!(controllers("\n").is_empty());
    }
}
