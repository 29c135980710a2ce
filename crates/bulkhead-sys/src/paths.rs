//! Every place bulkhead keeps something, in one file. Runtime state lives under /run (gone at
//! reboot, like the cgroups and mounts it describes); images and their store under
//! /var/lib/bulkhead. Tests move a tree with the environment variables named here.

use std::path::PathBuf;

/// Runtime state: marks, controller bookkeeping, sandbox registry, socket status.
pub const RUNTIME_DIR: &str = "/run/bulkhead";
/// The plan `-c` defaults to.
pub const DEFAULT_PLAN_PATH: &str = "/etc/bulkhead/bulkhead.toml";
/// The sandbox registry unless `BULKHEAD_STATE_DIR` says otherwise.
pub const DEFAULT_STATE_ROOT: &str = "/run/bulkhead/sandbox";
/// The images directory when no store is recorded (and the store's default mount point).
pub const DEFAULT_IMAGES_DIR: &str = "/var/lib/bulkhead/images";
/// What `image store create` writes down.
pub const DEFAULT_STORE_RECORD: &str = "/var/lib/bulkhead/store.toml";
/// The environment variable that moves the huge page record (tests).
pub const HUGEPAGES_STATE_ENV: &str = "BULKHEAD_HUGEPAGES_STATE";
/// Where a sandboxed target finds its readiness socket (inside the sandbox).
pub const NOTIFY_IN_SANDBOX: &str = "/run/bulkhead/notify";

/// `$VAR` when set and not empty, else `default`.
pub fn env_path(var: &str, default: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(default),
    }
}

/// Whether `$VAR` is set and not empty.
pub fn env_set(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty())
}

/// `/run/bulkhead`.
pub fn runtime_dir() -> PathBuf {
    PathBuf::from(RUNTIME_DIR)
}

/// Marker files for cgroups whose hierarchy refuses extended attributes.
pub fn owned_marks_dir() -> PathBuf {
    runtime_dir().join("owned")
}

/// v2 controllers bulkhead enabled on cgroups it did not create (put back by destroy).
pub fn enabled_controllers_file() -> PathBuf {
    runtime_dir().join("enabled-controllers")
}

/// The transient systemd units bulkhead created.
pub fn systemd_records_dir() -> PathBuf {
    runtime_dir().join("systemd")
}

/// The scheduler slice (CPUSchedulingSliceSec) of each slice, one file per slice, written by
/// `apply` and read by `run`, `move` and the guard.
pub fn sched_slices_dir() -> PathBuf {
    runtime_dir().join("sched-slice")
}

/// The guard's state (for `status`) and the settings its watchdog puts back.
pub fn guard_dir() -> PathBuf {
    env_path("BULKHEAD_GUARD_DIR", "/run/bulkhead/guard")
}

/// `place`'s state files (one per cgroup root: its PID, plan digest and heartbeat).
pub fn place_dir() -> PathBuf {
    env_path("BULKHEAD_PLACE_DIR", "/run/bulkhead/place")
}

/// One status file per served socket.
pub fn sockets_dir() -> PathBuf {
    runtime_dir().join("sockets")
}

/// The sandbox registry: `/run/bulkhead/sandbox`, or `$BULKHEAD_STATE_DIR` (tests).
pub fn sandbox_state_root() -> PathBuf {
    env_path("BULKHEAD_STATE_DIR", DEFAULT_STATE_ROOT)
}

/// `/var/lib/bulkhead/store.toml`, or `$BULKHEAD_STORE_RECORD` (tests).
pub fn store_record_path() -> PathBuf {
    env_path("BULKHEAD_STORE_RECORD", DEFAULT_STORE_RECORD)
}

/// The images directory without a store: `/var/lib/bulkhead/images`, or
/// `$BULKHEAD_IMAGES_DIR` (tests).
pub fn default_images_dir() -> PathBuf {
    env_path("BULKHEAD_IMAGES_DIR", DEFAULT_IMAGES_DIR)
}

/// The images directory goes with the sandbox registry in use: the machine's own when
/// neither is overridden, a test's when both are. Only then may a registry clean-up look there
/// for snapshots no entry names.
pub fn images_paired_with_registry() -> bool {
    let state = env_set("BULKHEAD_STATE_DIR");
    let images = env_set("BULKHEAD_STORE_RECORD") || env_set("BULKHEAD_IMAGES_DIR");
    state == images
}

/// The record of huge page settings bulkhead changed: `/run/bulkhead/hugepages.json`, or
/// `$BULKHEAD_HUGEPAGES_STATE`.
pub fn hugepages_state() -> PathBuf {
    match std::env::var_os(HUGEPAGES_STATE_ENV) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => runtime_dir().join("hugepages.json"),
    }
}
