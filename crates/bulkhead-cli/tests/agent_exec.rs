//! `bulkhead agent ...` execs the bulkhead-agent binary built beside bulkhead, with the
//! global options (the agent itself is tested in crates/bulkhead-agent/tests/agent.rs).

use std::path::Path;
use std::process::Command;

/// True when bulkhead-agent is beside bulkhead (`cargo test --workspace` and `cargo build`
/// build it). Outside CI a missing one skips with a SKIPPED line; in CI it fails.
fn agent_built() -> bool {
    let me = Path::new(env!("CARGO_BIN_EXE_bulkhead"));
    if me.with_file_name("bulkhead-agent").is_file() {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(!ci, "bulkhead-agent is not built beside {}", me.display());
    eprintln!("SKIPPED: bulkhead-agent is not built (cargo build -p bulkhead-agent)");
    false
}

#[test]
fn agent_crd_is_the_committed_one() {
    if !agent_built() {
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["agent", "crd"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let committed = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crd.json"
    ))
    .unwrap();
    assert!(
        o.stdout == committed,
        "bulkhead agent crd differs from deploy/crd.json"
    );
}

#[test]
fn agent_gets_the_global_options() {
    if !agent_built() {
        return;
    }
    // Accepted by the agent (a bad one would be refused by its parser), then --node is
    // missing: exit 2 from the agent's own argument parser.
    let o = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
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
    if !agent_built() {
        return;
    }
    // `bulkhead nri` is `bulkhead-agent nri`: an allow-list entry no container can take is
    // refused by the plugin before it starts the stub.
    let o = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
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
