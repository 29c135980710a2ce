//! The machine's facts as callers above the library need them (the agent's kubelet check and
//! NRI plugin, the benchmarks), so they never detect the cgroup layout or read the host's
//! files themselves.

use bulkhead_cgroups::Layout;
use bulkhead_plan::{Plan, ResolvedPlan};
use bulkhead_sys::error::Result;
use std::path::{Path, PathBuf};

/// Where the cgroup hierarchy that holds `controller` is mounted (on a v1 or hybrid host its
/// own hierarchy; on pure v2 the unified one). None when the layout cannot be read.
pub fn controller_mount(controller: &str) -> Option<PathBuf> {
    let layout = Layout::detect().ok()?;
    layout
        .hierarchy(controller)
        .or_else(|| layout.primary())
        .map(|h| h.mount.clone())
}

pub use bulkhead_sys::host::{CpuTimes, DevNum, Host};
pub use bulkhead_sys::psi::Totals as PressureTotals;

/// Whether the node is pure cgroup v2 (no v1 hierarchy beside the unified one); false when
/// the layout cannot be read.
pub fn pure_v2() -> bool {
    matches!(Layout::detect(), Ok(l) if l.v1.is_empty() && l.unified.is_some())
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

/// Write a cgroup control file (one write, no truncation, as the kernel wants).
pub fn write_control(path: &Path, value: &str) -> std::io::Result<()> {
    bulkhead_sys::cgroupfs::write_file(path, value)
}

/// A resolved plan for this machine (its device arguments looked up here).
pub fn resolve(plan: &Plan) -> Result<ResolvedPlan> {
    plan.resolve(&Host::detect_for(plan.device_paths()))
}

/// The CPUs online.
pub fn cpu_count() -> usize {
    Host::detect().cpu_count()
}

/// The kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    bulkhead_sys::host::kernel_release()
}

/// The machine's CPU time so far, by kind (/proc/stat).
pub fn cpu_times() -> Option<CpuTimes> {
    bulkhead_sys::host::cpu_times()
}

/// The active I/O scheduler of a disk (`/sys/block/DISK/queue/scheduler`).
pub fn io_scheduler(disk: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/sys/block/{disk}/queue/scheduler")).ok()?;
    bulkhead_sys::host::active_scheduler(&s)
}

/// The totals of a pressure (PSI) file.
pub fn pressure_totals(path: &Path) -> Option<PressureTotals> {
    bulkhead_sys::psi::read_totals(path)
}

/// The magic number of the file system `path` is on (statfs's f_type).
pub fn fs_magic(path: &Path) -> Option<u32> {
    bulkhead_sys::statfs::fs_magic(path)
}

/// A file system's name from its magic (`ext4`, `btrfs`).
pub fn fs_name(magic: u32) -> String {
    bulkhead_sys::statfs::fs_name(magic)
}

/// What this kernel offers for I/O protection (BFQ, io.cost, io.latency, ...): the
/// capabilities the mapping plans with.
pub fn io_kernel() -> bulkhead_cgroups::layout::Caps {
    Layout::detect().map(|l| l.caps()).unwrap_or_default()
}
