//! The machine's facts as callers above the library need them (the agent's kubelet check),
//! so they never detect the cgroup layout themselves.

use bulkhead_cgroups::Layout;
use std::path::PathBuf;

/// Where the cgroup hierarchy that holds `controller` is mounted (on a v1 or hybrid host its
/// own hierarchy; on pure v2 the unified one). None when the layout cannot be read.
pub fn controller_mount(controller: &str) -> Option<PathBuf> {
    let layout = Layout::detect().ok()?;
    layout
        .hierarchy(controller)
        .or_else(|| layout.primary())
        .map(|h| h.mount.clone())
}
