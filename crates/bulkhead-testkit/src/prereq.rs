//! Prerequisites, with one rule for CI: when `CI` is `true` (or `1`) a missing prerequisite
//! fails the test, so a broken machine is never reported green; anywhere else the test prints
//! `SKIPPED: <what>` on stderr and returns early.

use std::path::Path;

/// Whether this run is CI's (`CI=true` or `CI=1`).
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// True when nothing is missing. A `problem` says what is missing (and how to get it): in CI
/// it panics with it, else it prints `SKIPPED: <problem>` and returns false.
pub fn require(problem: Option<impl AsRef<str>>) -> bool {
    match problem {
        None => true,
        Some(p) => missing(p.as_ref()),
    }
}

/// A prerequisite is missing: panics in CI, else says `SKIPPED: <what>`; always false.
pub fn missing(what: &str) -> bool {
    assert!(!ci(), "prerequisite missing in CI: {what}");
    eprintln!("SKIPPED: {what}");
    false
}

/// Whether this process runs as root (effective UID 0).
pub fn is_root() -> bool {
    bulkhead_sys::process::is_root()
}

/// Whether `prog` is a file in one of `$PATH`'s directories.
pub fn on_path(prog: &str) -> bool {
    find_on_path(prog).is_some()
}

fn find_on_path(prog: &str) -> Option<std::path::PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.is_file())
}

/// Whether `prog` is in a system binary directory (/usr/sbin, /sbin, /usr/bin, /bin), where
/// root's tools live even when `$PATH` lacks them.
pub fn in_system_dirs(prog: &str) -> bool {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(prog).exists())
}

/// Root and a mounted cgroup hierarchy: what every test that makes cgroups needs.
pub fn cgroups() -> bool {
    require(cgroups_problem())
}

/// Why cgroup tests cannot run here, if they cannot.
pub fn cgroups_problem() -> Option<&'static str> {
    if !is_root() {
        Some("these tests need root (cgroups)")
    } else if !Path::new("/proc/self/mountinfo").exists()
        || bulkhead_cgroups::Layout::detect()
            .map(|l| l.primary().is_none())
            .unwrap_or(true)
    {
        Some("no cgroup hierarchy is mounted")
    } else {
        None
    }
}

/// The first of `candidates` (absolute paths, or names looked up on `$PATH`) that exists;
/// none is a missing prerequisite named `what` (fails in CI, skips elsewhere).
pub fn program(candidates: &[&str], what: &str) -> Option<std::path::PathBuf> {
    let found = candidates.iter().find_map(|c| {
        let p = Path::new(c);
        if p.is_absolute() {
            p.is_file().then(|| p.to_path_buf())
        } else {
            find_on_path(c)
        }
    });
    if found.is_none() {
        missing(what);
    }
    found
}
