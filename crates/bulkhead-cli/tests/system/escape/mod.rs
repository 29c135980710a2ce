//! The escape suite (issue 14): each test plays a hostile image, sandboxed program, local user
//! or network client, tries one attack the outside review reproduced, and checks that it
//! fails. The modules are the classes; every test prints what it tried (`--nocapture`).

mod calibrate;
mod exporter;
mod guard_log;
mod guarded;
mod identity;
mod input;
mod io_uring;
mod nesting;
mod nri;
mod paths;
mod pidfile;
mod probe;
mod reuse;
mod sandbox;
mod sockets;
mod targets;
mod trust;
