//! Exit codes for commands bulkhead starts (podman's and coreutils' conventions).

/// The command never started: bulkhead could not set it up.
pub const RUN_FAILED: i32 = 125;
/// The command exists but cannot be executed.
pub const NOT_EXECUTABLE: i32 = 126;
/// No such command.
pub const NOT_FOUND: i32 = 127;
/// `--timeout` killed it (timeout(1)'s code).
pub const TIMEOUT: i32 = 124;
