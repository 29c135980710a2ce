//! `bulkhead agent ...` execs the bulkhead-agent binary built beside bulkhead, with the
//! global options (the agent itself is tested in agent.rs).

use std::path::PathBuf;
use std::process::Command;

/// bulkhead, when it and bulkhead-agent (this package's, built for its tests) are built
/// beside each other (`cargo test --workspace` builds both). Outside CI a missing one skips
/// with a SKIPPED line; in CI it fails.
fn bulkhead() -> Option<PathBuf> {
    bulkhead_testkit::bins::require("bulkhead-agent", "bulkhead-agent")?;
    bulkhead_testkit::bins::require("bulkhead", "bulkhead-cli")
}

#[test]
fn agent_crd_is_the_committed_one() {
    let Some(bulkhead) = bulkhead() else { return };
    let o = Command::new(bulkhead)
        .args(["agent", "crd"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let committed = std::fs::read(bulkhead_testkit::bins::repo().join("deploy/crd.json")).unwrap();
    assert!(
        o.stdout == committed,
        "bulkhead agent crd differs from deploy/crd.json"
    );
}

#[test]
fn agent_gets_the_global_options() {
    let Some(bulkhead) = bulkhead() else { return };
    // Accepted by the agent (a bad one would be refused by its parser), then --node is
    // missing: exit 2 from the agent's own argument parser.
    let o = Command::new(&bulkhead)
        .args([
            "--cgroup-root",
            "/nowhere",
            "--backend",
            "cgroupfs",
            "-q",
            "agent",
            "run",
        ])
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--node") && err.contains("bulkhead-agent"),
        "{err}"
    );
}

#[test]
fn nri_is_the_agents_plugin() {
    let Some(bulkhead) = bulkhead() else { return };
    // `bulkhead nri` is `bulkhead-agent nri`: an allow-list entry no container can take is
    // refused by the plugin before it starts the stub.
    let o = Command::new(&bulkhead)
        .args(["nri", "--allow", "AllowedCPUs", "--stub", "/nowhere"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--allow AllowedCPUs") && err.contains("bulkhead-agent nri"),
        "{err}"
    );
}
