//! One "stop requested" flag, set by SIGINT/SIGTERM, for the bench runner and the hogs:
//! both finish what they are doing (clean up, print their report) instead of dying.

/// Turn SIGINT and SIGTERM into a stop request.
pub fn install_handler() {
    bulkhead_sys::signals::catch_stop(&[libc::SIGTERM, libc::SIGINT]);
}

pub fn requested() -> bool {
    bulkhead_sys::signals::stop_requested()
}
