//! The machine's facts as the shipped callers above the library need them (the agent's
//! kubelet check and NRI plugin), so they never detect the cgroup layout themselves. The
//! benchmarks read theirs from the rig (bulkhead-testkit's `host`).

use bulkhead_cgroups::Layout;
use std::path::{Path, PathBuf};

pub use bulkhead_sys::host::{DevNum, Host};

/// Where the cgroup hierarchy that holds `controller` is mounted (on a v1 or hybrid host its
/// own hierarchy; on pure v2 the unified one). None when the layout cannot be read.
pub fn controller_mount(controller: &str) -> Option<PathBuf> {
    let layout = Layout::detect().ok()?;
    layout
        .hierarchy(controller)
        .or_else(|| layout.primary())
        .map(|h| h.mount.clone())
}

/// Where the hierarchy holding `controller` (by its v2 name) is mounted, exactly (no
/// fallback), or what is wrong.
pub fn hierarchy_of(controller: &str) -> Result<PathBuf, String> {
    let layout = Layout::detect().map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    layout
        .hierarchy(controller)
        .map(|h| h.mount.clone())
        .ok_or_else(|| format!("no {controller} hierarchy is mounted here"))
}

/// The cgroup2 mount (`/sys/fs/cgroup` on pure v2, `/sys/fs/cgroup/unified` on a hybrid
/// host), where every cgroup has its pressure files; None without one.
pub fn unified_mount() -> Option<PathBuf> {
    Layout::detect().ok()?.unified.map(|h| h.mount)
}

/// The cgroup layout's short name: `v2` (unified), `hybrid` or `v1` (legacy); None when the
/// layout cannot be read.
pub fn cgroup_version() -> Option<&'static str> {
    use bulkhead_cgroups::layout::Kind;
    Some(match Layout::detect().ok()?.kind {
        Kind::Unified => "v2",
        Kind::Hybrid => "hybrid",
        Kind::Legacy => "v1",
    })
}

/// Write a cgroup control file (one write, no truncation, as the kernel wants).
pub fn write_control(path: &Path, value: &str) -> std::io::Result<()> {
    bulkhead_sys::cgroupfs::write_file(path, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hierarchy_is_found_exactly_or_said_missing() {
        let layout = Layout::detect().expect("mountinfo");
        if let Some(h) = layout.hierarchy("memory") {
            assert_eq!(hierarchy_of("memory").unwrap(), h.mount);
        }
        let e = hierarchy_of("nosuch").unwrap_err();
        assert_eq!(e, "no nosuch hierarchy is mounted here");
    }
}
