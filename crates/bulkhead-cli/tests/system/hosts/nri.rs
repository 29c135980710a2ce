//! The NRI plugin's mapping on this host's kernel: what a pod's container gets of a slice
//! (the library's one mapping, `bulkhead::actions::container`) is written into a real pod and
//! container cgroup pair as the runtime and the plugin would (the runtime's unified keys on
//! v2, the plugin's files after creation), and every write succeeds: a directive this kernel
//! cannot apply is a finding with its reason, never a write that fails (issue 38: a pod
//! annotated IOWeight went into CrashLoopBackOff on a kernel without BFQ).

use super::host::Host;
use crate::common::TestRoot;
use bulkhead::actions::container;
use bulkhead::plan::Plan;
use std::path::PathBuf;

const POD: &str = "CPUWeight = \"idle\"\nCPUQuota = \"50%\"\nMemoryHigh = \"512M\"\nMemoryMax = \"1G\"\nIOWeight = 20\nTasksMax = 64\n";

#[test]
fn nri_mapping_writes_only_what_this_kernel_has() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    // systemd enables a controller in the root's cgroup.subtree_control only while a unit
    // asks for it, and takes it back when none does (seen in the v2 guest after the other
    // checks' slices were gone: no cpu.idle below the root). The kubelet's pods sit in
    // slices that ask; here a scope that asks for every controller the pod uses holds them
    // for the test.
    let _keep = h.systemd.then(ControllersKept::start);
    let root = TestRoot::new();
    let node = container::node().expect("the node's layout");
    let plan = Plan::parse(&format!("[slice.pod]\n{POD}"), None).unwrap();
    let slice = bulkhead_testkit::host::resolve(&plan).unwrap().slices[0].clone();
    let r = container::resources(&slice, &node);
    // A pod cgroup and its container's, in the hierarchy of every controller runc manages.
    let mut made: Vec<PathBuf> = Vec::new();
    let dir = |controller: &str, pod: bool| -> PathBuf {
        let base = root.controller_dir(controller, "pod");
        if pod {
            base
        } else {
            base.join("ctr")
        }
    };
    if node.is_v2() {
        enable_below(
            &root.controller_dir("cpu", ""),
            &["cpu", "memory", "io", "pids"],
        );
    }
    for c in node.versions.keys() {
        for pod in [true, false] {
            let d = dir(c, pod);
            if !d.exists() {
                std::fs::create_dir(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
                made.push(d.clone());
            }
            if node.is_v2() && pod {
                // The kubelet enables the controllers for the container below the pod.
                enable_below(&d, &["cpu", "memory", "io", "pids"]);
            }
        }
    }
    let mut written = Vec::new();
    if node.is_v2() {
        for (file, value) in &r.oci.unified {
            let c = file.split('.').next().unwrap();
            let p = dir(c, false).join(file);
            write(&p, value);
            written.push(file.clone());
        }
    }
    for w in &r.writes {
        let p = dir(&w.controller, w.pod).join(&w.file);
        write(&p, &w.value);
        written.push(format!("{}{}", if w.pod { "pod " } else { "" }, w.file));
    }
    let unapplied: Vec<String> = r.unapplied().map(|d| d.message.clone()).collect();
    h.report(
        "NRI mapping",
        &format!(
            "BFQ {} io.cost {} -> written: {}; not applied: {}",
            node.caps.bfq,
            node.caps.io_cost,
            written.join(", "),
            if unapplied.is_empty() {
                "nothing".to_string()
            } else {
                unapplied.join("; ")
            }
        ),
    );
    for d in made.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
    // The IO weight is applied exactly where the kernel can, and said otherwise.
    let io_applies = if node.is_v2() {
        node.caps.bfq || node.caps.io_cost
    } else {
        node.caps.bfq
    };
    let io_written = written
        .iter()
        .any(|w| w.contains("weight") && !w.contains("cpu"));
    assert_eq!(io_written, io_applies, "{written:?} {unapplied:?}");
    // "IOWeight is not applied" exactly when nothing is written; where BFQ is loaded but no
    // disk uses it, the weight is written and the finding says it has no effect yet.
    assert_eq!(
        unapplied
            .iter()
            .any(|u| u.starts_with("IOWeight is not applied")),
        !io_applies,
        "{unapplied:?}"
    );
    // cpu.idle (Linux 5.15) on the container and its pod.
    if node.caps.cpu_idle {
        assert!(
            written.iter().any(|w| w.ends_with("cpu.idle")),
            "{written:?}"
        );
    }
}

/// A transient scope (`systemd-run --scope`) asking for the CPU, I/O, memory and task
/// controllers, so systemd keeps them enabled at the root while the test runs; its process is
/// killed by PID when dropped.
struct ControllersKept(std::process::Child);

impl ControllersKept {
    fn start() -> ControllersKept {
        let unit = format!("bh-nri-keep-{}", std::process::id());
        let child = std::process::Command::new("systemd-run")
            .args(["--scope", "--quiet", "--unit", &unit])
            .args([
                "-p",
                "CPUWeight=100",
                "-p",
                "IOWeight=100",
                "-p",
                "MemoryAccounting=yes",
            ])
            .args(["-p", "TasksAccounting=yes", "--", "sleep", "infinity"])
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("systemd-run");
        let has = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
        let want: Vec<&str> = ["cpu", "io", "memory", "pids"]
            .into_iter()
            .filter(|c| has.split_whitespace().any(|h| h == *c))
            .collect();
        crate::common::wait_for(
            "systemd to enable the pod's controllers at the root",
            || {
                std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control")
                    .is_ok_and(|t| want.iter().all(|c| t.split_whitespace().any(|on| on == *c)))
            },
        );
        ControllersKept(child)
    }
}

impl Drop for ControllersKept {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Turn on the controllers this cgroup has for its children (those its parent gave it).
fn enable_below(d: &std::path::Path, want: &[&str]) {
    let have = std::fs::read_to_string(d.join("cgroup.controllers")).unwrap_or_default();
    let on: Vec<String> = want
        .iter()
        .filter(|c| have.split_whitespace().any(|h| h == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if !on.is_empty() {
        write(&d.join("cgroup.subtree_control"), &on.join(" "));
    }
}

fn write(p: &std::path::Path, value: &str) {
    std::fs::write(p, value).unwrap_or_else(|e| panic!("write {} = {value}: {e}", p.display()));
}
