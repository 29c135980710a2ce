//! bulkhead's cgroup backends. One common layer ([`backend`]: the [`Backend`] and
//! [`Placement`] traits, [`Changes`], typed errors; [`layout`]: which hierarchy holds which
//! controller) and two backends that do not import each other: [`fs`] writes cgroupfs itself
//! (pure v2, pure v1, hybrid), [`systemd`] asks systemd over D-Bus where systemd owns the tree.
//! [`chosen`] picks one for the host and is a backend itself. [`stats`] reads what slices use.
//! [`iocost`] is the host-level io.cost setting of the cgroup2 root (the plan's `[iocost]`).
//!
//! Data flows one way: a resolved plan becomes a backend's operations (plain data, printed by
//! `--dry-run`), which are executed and undone in reverse order when one fails.

#![forbid(unsafe_code)]

pub mod backend;
pub mod chosen;
pub mod container;
pub mod fs;
pub mod iocost;
pub mod layout;
pub mod stats;
pub mod systemd;
pub mod throttle;

pub use backend::{ApplyOptions, Backend, Changes, Joiner, Outcome, PlaceError, Placement};
pub use chosen::{choose, choose_here, Choice, Chosen, ChosenOp};
pub use fs::CgroupFs;
pub use layout::{Hierarchy, Layout, Version};
pub use throttle::{Throttle, LIFTED_WEIGHT};
