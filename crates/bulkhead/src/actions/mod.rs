//! The operations a user asks for, above the backends: each takes a [`Context`] (the global
//! options: plan file, cgroup root, backend) and its own request, does the work, and returns
//! data for the CLI to print (or an error with its diagnostics). Nothing here prints.
//!
//! - [`apply`]: the plan's slices and huge pages, as one transaction with undo.
//! - [`destroy`], [`moves`], [`status`], [`show`]: slices after the fact.
//! - [`place`]: placement rules applied to processes as they start.
//! - [`check`]: one verdict on whether protection is in force, for a monitor.
//! - [`run`]: a command in a slice (exec, a systemd service or scope, or with huge pages).
//! - [`spawn`]: a command in a sandbox.
//! - [`serve`]: socket activation.
//! - [`export`]: the plan as systemd unit files.
//! - [`guard`]: the feedback guard (run, dry run, release, watchdog).
//! - [`image`]: the image store and its images.
//! - [`iocost`]: `iocost calibrate`.
//! - [`container`]: a slice as a container takes it (the NRI plugin), with what the node lacks.
//! - [`host`]: the machine's facts a caller needs (where a controller is mounted).
//! - [`hugepages`]: `hugepages status|usage|collapse|reset`.
//! - [`metrics`]: the Prometheus exposition of the slices, once or served over HTTP.

pub mod apply;
pub mod check;
pub mod container;
pub mod destroy;
pub mod export;
pub mod guard;
pub mod host;
pub mod hugepages;
pub mod image;
pub mod iocost;
pub mod metrics;
pub mod moves;
pub mod place;
pub mod run;
pub mod serve;
pub mod show;
pub mod slices;
pub mod spawn;
pub mod status;

pub use crate::context::Context;
