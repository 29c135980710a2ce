//! Escape tests, issue 40 #5 and #10: the NRI plugin as a pod author attacks it. The real
//! `bulkhead-agent nri` runs against a stub that plays the runtime's side of the protocol
//! (one JSON request line, one answer line), sending what the attacker's pods ask for.
//! - #5: `bulkhead.io/slice` was not gated: a pod in a namespace the operator allowed for one
//!   directive took db-server's weights by naming the slice. Now no slice may be taken until
//!   the operator lists it (`--slice`, the chart's `nri.slices`).
//! - #10: containers created and never started stayed in the plugin's pending map; after
//!   4,096 of them, every container needing a write after its creation failed. Now a removed
//!   container is forgotten (the stub's `remove`) and entries age.
//!
//! `BULKHEAD_AGENT_UNDER_TEST` runs an older plugin (the build before the fix fails both).

use crate::common::serve::PY;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn say(what: &str, result: &str) {
    println!("escape[nri]: tried {what} -> {result}");
}

/// The stub: sends the requests of `$BH_REQUESTS` one at a time, each answer to
/// `$BH_ANSWERS`, and ends after the last (the plugin then ends too).
const STUB: &str = r#"
import os, sys
answers = open(os.environ["BH_ANSWERS"], "w")
for line in open(os.environ["BH_REQUESTS"]):
    sys.stdout.write(line)
    sys.stdout.flush()
    answer = sys.stdin.readline()
    if not answer:
        break
    answers.write(answer)
"#;

fn agent() -> Option<PathBuf> {
    match std::env::var_os("BULKHEAD_AGENT_UNDER_TEST") {
        Some(p) => Some(PathBuf::from(p)),
        None => bulkhead_testkit::bins::require("bulkhead-agent", "bulkhead-agent"),
    }
}

/// A scratch directory with the agent's state (the plan it applied: a server and a helper
/// slice) and the stub.
struct Node {
    dir: bulkhead_testkit::fs::TempDir,
}

impl Node {
    fn new(tag: &str) -> Node {
        let dir = bulkhead_testkit::fs::TempDir::new(&format!("nri-{tag}"));
        let d = dir.path();
        bulkhead_testkit::write(
            d.join("state.json"),
            r#"{"plan": "db", "generation": 1, "created": []}"#,
        );
        bulkhead_testkit::write(
            d.join("plan.toml"),
            "[slice.db-server]\nCPUWeight = 1000\n[slice.db-helper]\nCPUWeight = \"idle\"\n",
        );
        let stub = d.join("stub");
        std::fs::write(&stub, format!("#!{PY}\n{STUB}")).unwrap();
        std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
        Node { dir }
    }

    /// The plugin with `args`, answering `requests` in order; its answers and its log.
    fn plugin(&self, agent: &Path, args: &[&str], requests: &[Value]) -> (Vec<Value>, String) {
        let d = self.dir.path();
        let mut text = String::new();
        for r in requests {
            text.push_str(&r.to_string());
            text.push('\n');
        }
        std::fs::write(d.join("requests"), text).unwrap();
        let o = bulkhead_testkit::bins::clean("timeout")
            .arg("120")
            .arg(agent)
            .arg("nri")
            .arg("--stub")
            .arg(d.join("stub"))
            .arg("--state-dir")
            .arg(d)
            .args(args)
            .env("BH_REQUESTS", d.join("requests"))
            .env("BH_ANSWERS", d.join("answers"))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run bulkhead-agent nri");
        let log = crate::common::stderr(&o);
        let answers = std::fs::read_to_string(d.join("answers")).unwrap_or_default();
        let answers = answers
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect();
        (answers, log)
    }
}

/// A container's creation, as the stub sends it.
fn create(seq: u64, pod: &str, annotations: Value) -> Value {
    json!({"event": "create", "id": format!("c{seq}"), "seq": seq, "namespace": "default",
           "pod": pod, "uid": format!("u-{pod}"), "container": "app", "annotations": annotations})
}

/// The namespace gate, where the plugin has one (the build before issue 40 had none: every
/// namespace was allowed).
fn allowed_namespace(agent: &Path) -> Vec<&'static str> {
    let help = bulkhead_testkit::bins::clean(agent)
        .args(["nri", "--help"])
        .output()
        .expect("bulkhead-agent nri --help");
    if String::from_utf8_lossy(&help.stdout).contains("--namespace") {
        vec!["--namespace", "default"]
    } else {
        vec![]
    }
}

/// Whether an answer gives the container anything (an OCI adjustment with a value).
fn adjusts(answer: &Value) -> bool {
    answer
        .get("adjust")
        .and_then(Value::as_object)
        .is_some_and(|m| {
            m.values()
                .any(|v| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()))
        })
}

#[test]
fn a_pod_cannot_take_the_servers_slice_unless_the_operator_lists_it() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let Some(agent) = agent() else { return };
    let node = Node::new("slice");
    // The operator allowed one directive in one namespace, and listed no slice.
    let mut args = vec!["--allow", "CPUWeight"];
    args.extend(allowed_namespace(&agent));
    let attack = [
        create(1, "attacker", json!({"bulkhead.io/slice": "db-server"})),
        create(2, "helper", json!({"bulkhead.io/CPUWeight": "50"})),
    ];
    let (answers, log) = node.plugin(&agent, &args, &attack);
    assert_eq!(
        answers.len(),
        2,
        "one answer per request: {answers:?}\n{log}"
    );
    say(
        "bulkhead.io/slice: db-server, no slice listed",
        &answers[0].to_string(),
    );
    assert!(
        !adjusts(&answers[0]),
        "the pod took db-server's weights: {}\n{log}",
        answers[0]
    );
    assert!(
        log.contains("no slice may be taken on this node"),
        "the refusal names the operator's switch:\n{log}"
    );
    // The directive the operator allowed still applies: the gate is not a blanket refusal.
    assert!(adjusts(&answers[1]), "{}\n{log}", answers[1]);
    // Listed, the slice is what the operator chose to give.
    args.extend(["--slice", "db-server"]);
    let (answers, log) = node.plugin(&agent, &args, &attack[..1]);
    say("the same pod, db-server listed", &answers[0].to_string());
    assert!(adjusts(&answers[0]), "{}\n{log}", answers[0]);
}

#[test]
fn containers_created_and_removed_do_not_fill_the_plugins_table() {
    let Some(_suite) = crate::suite::cgroups() else {
        return;
    };
    let Some(agent) = agent() else { return };
    let node = Node::new("pending");
    let mut args = vec!["--allow", "CPUWeight", "--slice", "db-helper"];
    args.extend(allowed_namespace(&agent));
    // The helper's slice lowers the pod's own cgroup: a write after creation on every layout.
    let helper = json!({"bulkhead.io/slice": "db-helper"});
    const ATTACK: u64 = 4200;
    let mut requests = Vec::new();
    for seq in 1..=ATTACK {
        requests.push(create(seq, &format!("attacker-{seq}"), helper.clone()));
        // Each is removed before it starts (a pod deleted at once, an image that fails).
        requests.push(
            json!({"event": "remove", "id": format!("c{seq}"), "seq": seq,
                             "namespace": "default", "pod": format!("attacker-{seq}")}),
        );
    }
    let victim = ATTACK + 1;
    requests.push(create(victim, "victim", helper));
    let (answers, log) = node.plugin(&agent, &args, &requests);
    assert_eq!(
        answers.len(),
        requests.len(),
        "one answer per request\n{log}"
    );
    let first = &answers[0];
    assert_eq!(
        first["post"],
        json!(true),
        "the first wants a write: {first}"
    );
    let last = answers.last().unwrap();
    say(
        &format!("{ATTACK} containers created and removed, then one more"),
        &last.to_string(),
    );
    assert!(last.get("error").is_none(), "{last}\n{}", tail(&log));
    assert_eq!(
        last["post"],
        json!(true),
        "the victim's writes were dropped: {last}\n{}",
        tail(&log)
    );
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}
