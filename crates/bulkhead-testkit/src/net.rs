//! Free TCP ports on the loopback address.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// A free port below the ephemeral range (ip_local_port_range starts at 32768), so that no
/// outgoing connection takes it as its source port between this check and the bind. Each
/// call of a process tries a different place first, so parallel tests do not race for one.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    for _ in 0..1000 {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let port = 20000
            + (std::process::id()
                .wrapping_mul(7919)
                .wrapping_add(n.wrapping_mul(104729))
                % 12000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000");
}
