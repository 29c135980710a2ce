//! Free TCP ports on the loopback address (the benchmarks' and the tests' servers).

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// A free port on 127.0.0.1 below the ephemeral range (ip_local_port_range starts at
/// 32768), so that no outgoing connection takes it as its source port between this check and
/// the bind. Each call of a process tries a different place first, so parallel callers do
/// not race for one. None when 1000 tries between 20000 and 32000 found none free.
pub fn free_port() -> Option<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    (0..1000).find_map(|_| {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let port = 20000
            + (std::process::id()
                .wrapping_mul(7919)
                .wrapping_add(n.wrapping_mul(104729))
                % 12000) as u16;
        TcpListener::bind(("127.0.0.1", port))
            .is_ok()
            .then_some(port)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn ports_are_free_below_the_ephemeral_range_and_differ() {
        let a = super::free_port().unwrap();
        let b = super::free_port().unwrap();
        assert!((20000..32000).contains(&a) && (20000..32000).contains(&b));
        assert_ne!(a, b);
        std::net::TcpListener::bind(("127.0.0.1", a)).unwrap();
    }
}
