//! bulkhead's leaf layer. Nothing here imports anything else of bulkhead's: units and sizes
//! in systemd's syntax, the error type with its diagnostics, every path bulkhead keeps state
//! in, facts about the host, and thin wrappers around the system calls the upper layers need.
//!
//! All of bulkhead's `unsafe` code lives in this crate, each block with a safety comment;
//! the crates above it forbid `unsafe`.

pub mod anonmap;
pub mod bootcg;
pub mod btrfs;
pub mod cgdir;
pub mod cgroupfs;
pub mod copy;
pub mod dir;
pub mod error;
pub mod exit;
pub mod fd;
pub mod host;
pub mod hostpath;
pub mod inroot;
pub mod launch;
pub mod listenfds;
pub mod mountinfo;
pub mod net;
pub mod notify;
pub mod notifysock;
pub mod paths;
pub mod process;
pub mod procevents;
pub mod procs;
pub mod psi;
pub mod pty;
pub mod remove;
pub mod sched;
pub mod signals;
pub mod sockdiag;
pub mod statefile;
pub mod statfs;
pub mod tree;
pub mod trusted;
pub mod units;
pub mod usage;
pub mod users;
pub mod xattr;

pub use error::{Diagnostic, Error, Result, Severity};
