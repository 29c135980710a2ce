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

/// The entry of a JSON list whose `key` is `want` (a test fails, showing the list, when there
/// is none).
#[track_caller]
pub fn entry<'a, T>(list: &'a serde_json::Value, key: &str, want: T) -> &'a serde_json::Value
where
    T: std::fmt::Debug,
    serde_json::Value: PartialEq<T>,
{
    list.as_array()
        .and_then(|l| l.iter().find(|e| e[key] == want))
        .unwrap_or_else(|| panic!("no entry with {key} = {want:?} in {list:#}"))
}

/// The embedded default plan with the helper slice at CPU weight `weight` instead of idle
/// (a busy loop there must get CPU on a busy CI machine; a weight's rollback shows).
pub fn default_weighted(weight: u32) -> String {
    bulkhead::plan::EMBEDDED_DEFAULT
        .replace("CPUWeight = \"idle\"\n", &format!("CPUWeight = {weight}\n"))
}
