//! The escape suite (issue 14): each test plays a hostile image, sandboxed program, local user
//! or network client, tries one attack the outside review reproduced, and checks that it
//! fails. The modules are the classes; every test prints what it tried (`--nocapture`).

mod common;

#[path = "escape/exporter.rs"]
mod exporter;
#[path = "escape/guard_log.rs"]
mod guard_log;
#[path = "escape/input.rs"]
mod input;
#[path = "escape/paths.rs"]
mod paths;
#[path = "escape/probe.rs"]
mod probe;
#[path = "escape/sandbox.rs"]
mod sandbox;
#[path = "escape/sockets.rs"]
mod sockets;
#[path = "escape/targets.rs"]
mod targets;
