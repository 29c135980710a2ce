//! bulkhead: isolate the workloads of a database host with cgroups, namespaces,
//! copy-on-write snapshots and huge pages, without Docker.
//!
//! [`actions`] is the front door: every operation a user asks for (apply, run, spawn, serve,
//! status, guard, huge pages, images, ...) takes a [`actions::Context`] and returns data to
//! print. Data flows one way below it: a plan file is parsed and validated ([`plan`]),
//! resolved against the host, and turned into backend operations (bulkhead-cgroups) that can
//! be printed as a dry run or applied. The modules below `actions` are the crate's own;
//! the few still public are marked below.

#![forbid(unsafe_code)]

pub mod actions;
pub(crate) mod calibrate;
pub(crate) mod check;
pub(crate) mod context;
pub(crate) mod exposition;
pub(crate) mod guard;
// Still public for the system tests' set-up (issue 27's test kit will take them over):
// `hugepages::allocator`, `image::images_dir`, `snapshot`; and
// `activate::proxyproto` for tests/props_proxy.rs.
pub mod activate;
pub mod hugepages;
pub mod image;
pub(crate) mod place;
pub mod run;
pub(crate) mod sandbox;
pub mod snapshot;
pub(crate) mod tasks;

// Types callers name.
pub use bulkhead_cgroups::Choice;
pub use bulkhead_plan as plan;
pub use bulkhead_sys::{error, units};
pub use bulkhead_sys::{Diagnostic, Error, Result};

// Leaf wrappers of the OS a caller may use directly (docs/ARCHITECTURE.md, "Front door"):
// processes (kill, alive, is_root, clock), signals. The rest of `sys`, `host` and `cgroup` stay
// reachable only for the system tests' set-up (the CLI, the agent and the bench go through
// `actions`; scripts/check-architecture fails on any other use in their sources).
pub use bulkhead_cgroups as cgroup;
pub use bulkhead_sys as sys;
pub use bulkhead_sys::host;
