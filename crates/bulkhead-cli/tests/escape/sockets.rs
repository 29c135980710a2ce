//! Escape tests: sockets.

#[allow(unused_imports)]
use crate::common;
