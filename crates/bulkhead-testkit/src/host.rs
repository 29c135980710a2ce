//! The machine's facts a benchmark report names (kernel, CPUs, disks, file systems, what the
//! kernel offers for I/O), and a plan resolved for this machine, read straight from the leaf
//! and the backends: the library's front door serves the shipped binaries only.

use bulkhead_cgroups::layout::Caps;
use bulkhead_cgroups::Layout;
use bulkhead_plan::{Plan, ResolvedPlan};
use bulkhead_sys::error::Result;
use std::path::Path;

pub use bulkhead_sys::host::{CpuTimes, DevNum, Host};
pub use bulkhead_sys::psi::Totals as PressureTotals;

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
pub fn io_kernel() -> Caps {
    Layout::detect().map(|l| l.caps()).unwrap_or_default()
}
