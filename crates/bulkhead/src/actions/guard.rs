//! `guard`: prepare the feedback controller for the plan's `[guard]` section (or its dry run),
//! run it, put the plan back (`--release`), and the watchdog that does so when a guard dies.
//! The controller itself is `crate::guard`; this is its door.

pub use crate::guard::release::parse_watchdog_of;
pub use crate::guard::state::{Logged, Status};
pub use crate::guard::{
    prepare, release, run, watchdog, Event, Guard, GuardRequest, Released, Summary, WatchdogEnd,
};
