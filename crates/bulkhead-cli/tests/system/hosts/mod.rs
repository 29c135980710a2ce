//! The host suite (issue 15): what each directive *does* on the host the test runs on, not
//! only which file it wrote. It runs here (hybrid, no systemd, cgroupfs under a test root) and
//! inside the `scripts/vmhost` guests: pure v2, v1 and hybrid, each with systemd (slices made
//! by systemd over D-Bus, as users get them) and without (cgroupfs). Every check prints one
//! line `hosts: <layout> <backend> | <directive>: <what was measured>`, which is what
//! README's per-layout table is made from.
//!
//! The checks run one at a time ([`serial`]): they share CPUs and disks and measure them.
//! Busy loops, allocations and huge page maps are this test binary itself, run again with
//! `BH_CHILD=...` set (see `child.rs`), so the guests need nothing but the binary.

mod boot;
mod child;
mod cpu;
mod host;
mod io;
mod limits;
mod memory;
mod nri;
mod placement;
mod sandbox;
mod systemd;

/// One check at a time, and nothing else of this test binary beside it: they measure shared
/// CPUs and disks.
pub fn serial() -> crate::suite::Guard {
    crate::suite::alone()
}
