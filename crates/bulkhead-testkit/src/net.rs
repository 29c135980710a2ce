//! Free TCP ports on the loopback address (bulkhead-sys's `net`, which the bench uses too).

/// A free port below the ephemeral range (see `bulkhead_sys::net::free_port`); a test
/// without one cannot run, so it panics.
pub fn free_port() -> u16 {
    bulkhead_sys::net::free_port().expect("no free port between 20000 and 32000")
}
