//! One "stop requested" flag, set by SIGINT/SIGTERM, for the bench runner and the hogs:
//! both finish what they are doing (clean up, print their report) instead of dying.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Turn SIGINT and SIGTERM into a stop request.
pub fn install_handler() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
}

pub fn requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
