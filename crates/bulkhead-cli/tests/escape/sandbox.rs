//! Escape tests: sandbox.

#[allow(unused_imports)]
use crate::common;
