//! bulkhead's test kit, a dev-dependency of the crates whose tests run the real thing: every
//! helper those tests share has its one home here.
//!
//! - [`prereq`]: the one rule for a missing prerequisite: under `CI=true` it fails the test,
//!   elsewhere the test prints `SKIPPED: <what>` and returns.
//! - [`bins`]: the built binaries (`bulkhead`, `bulkhead-agent`, `bulkhead-bench`) and the
//!   repository's root.
//! - [`net`]: free TCP ports.
//! - [`cgroup`]: a scratch cgroup root in every hierarchy, removed on drop, with the state the
//!   library keeps about it forgotten through the library's own API.
//! - [`fs`]: scratch directories and reading files; [`output`]: a command's text.
//! - The benchmarks' rig (lab/bench): [`groups`], a cgroup tree of the bench's own on
//!   cgroupfs (a resolved plan's slices applied, read back, spawned into, removed, io.cost
//!   put back); [`host`], the machine's facts a bench report names.

pub mod bins;
pub mod cgroup;
pub mod fs;
pub mod groups;
pub mod host;
pub mod net;
pub mod output;
pub mod prereq;

pub use bins::bulkhead;
pub use cgroup::TestRoot;
pub use fs::{read, write, TempDir};
pub use net::free_port;
pub use output::{assert_has, first_line, ok, stderr, stdout};
pub use prereq::{ci, require};
