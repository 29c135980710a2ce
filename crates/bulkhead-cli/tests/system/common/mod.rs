//! The system tests' own support: a real systemd in a container ([`container`]), busybox
//! roots ([`rootfs`]), a running `bulkhead serve` ([`serve`]) and one served socket, the
//! activation tests' fixture ([`served`]). The helpers every suite shares (prerequisites,
//! the binaries, free ports, scratch cgroup roots) live in bulkhead-testkit; the names these
//! tests call them by are re-exported here.

pub mod container;
pub mod exporter;
pub mod rootfs;
pub mod serve;
pub mod served;

/// The bulkhead under test (`BULKHEAD_UNDER_TEST`, else this build's).
pub use bulkhead_testkit::bins::bulkhead as bin;
/// Root and a mounted cgroup hierarchy (missing: fails in CI, skips elsewhere).
pub use bulkhead_testkit::prereq::cgroups as prerequisites;
pub use bulkhead_testkit::{read, stderr, stdout, TestRoot};
/// Wait for a condition, with a deadline (never a fixed pause).
pub use serve::wait_for;
