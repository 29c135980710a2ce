//! A `bulkhead exporter` started by a test: where it listens.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::Child;

/// The address a just-started `exporter --listen 127.0.0.1:0` prints on its first line
/// (`listening on http://ADDR/metrics`); its stdout must be piped.
pub fn address(child: &mut Child) -> SocketAddr {
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("a piped stdout"))
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix("listening on http://")
        .and_then(|r| r.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("first line {line:?}"))
        .parse()
        .unwrap()
}
