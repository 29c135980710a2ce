//! The workspace's built binaries, as a test finds them: beside its own test binary (cargo
//! puts test binaries in `target/<profile>/deps` and the binaries in `target/<profile>`; in a
//! `scripts/vmhost` guest the target dir is mounted at /mnt/target, and the same holds).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root directory.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// The `target/<profile>` directory this test binary was built into.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    deps.parent().unwrap_or(deps).to_path_buf()
}

/// The binary `name` of this build (`bulkhead`, `bulkhead-agent`, `bulkhead-bench`), or None
/// when it was not built.
pub fn built(name: &str) -> Option<PathBuf> {
    Some(target_dir().join(name)).filter(|p| p.is_file())
}

/// The binary `name` of this build; a missing one is a missing prerequisite (it fails in CI,
/// skips elsewhere) and gives None. `cargo test --workspace` builds them all; one package's
/// tests build only that package's binaries.
pub fn require(name: &str, package: &str) -> Option<PathBuf> {
    let b = built(name);
    if b.is_none() {
        crate::prereq::missing(&format!(
            "{name} is not built in {} (cargo build -p {package})",
            target_dir().display()
        ));
    }
    b
}

/// This build's `bulkhead`; a test that needs it and finds none fails, naming the fix.
pub fn this_build() -> PathBuf {
    built("bulkhead").unwrap_or_else(|| {
        panic!(
            "bulkhead is not built in {} (cargo build -p bulkhead-cli)",
            target_dir().display()
        )
    })
}

/// The bulkhead under test: `BULKHEAD_UNDER_TEST` when set (the escape suite takes an older
/// build there, to show it falling to the attacks), else [`this_build`].
pub fn bulkhead() -> PathBuf {
    match std::env::var_os("BULKHEAD_UNDER_TEST") {
        Some(b) if !b.is_empty() => PathBuf::from(b),
        _ => this_build(),
    }
}

/// `program` with the environment that would change what bulkhead does removed
/// (`BULKHEAD_CONFIG`, `BULKHEAD_CGROUP_ROOT`).
pub fn clean(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env_remove("BULKHEAD_CONFIG")
        .env_remove("BULKHEAD_CGROUP_ROOT");
    c
}

/// [`bulkhead`] in a [`clean`] environment.
pub fn bulkhead_cmd() -> Command {
    clean(bulkhead())
}
