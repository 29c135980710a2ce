//! Escape tests: input.

#[allow(unused_imports)]
use crate::common;
