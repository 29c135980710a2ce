//! A per-connection sandbox runs code that came with a connection, once per connection: its
//! socket must name a slice that bounds them all. The slice (or a parent of it in the plan)
//! sets a finite TasksMax and MemoryMax; every sandbox of the socket runs in it, so one
//! connection's fork or memory bomb, or its tmpfs writes, stop at the slice's limits rather
//! than at the host's.

use super::{Mode, SocketSpec};
use crate::directives::{MemValue, TasksSpec, Value};
use crate::{SliceName, SliceSpec, Source};
use bulkhead_sys::error::Diagnostic;
use std::collections::BTreeMap;

/// Whether a directive value is a limit (not `infinity`).
fn limits(v: &Value) -> bool {
    match v {
        Value::Tasks(t) => *t != TasksSpec::Infinity,
        Value::Memory(m) => m.value != MemValue::Infinity || m.max.is_some(),
        _ => false,
    }
}

/// The directives of `want` that neither the slice nor a parent in the plan sets to a limit.
fn unbounded(
    slice: &SliceName,
    slices: &BTreeMap<SliceName, SliceSpec>,
    want: &[&'static str],
) -> Vec<&'static str> {
    want.iter()
        .copied()
        .filter(|d| {
            !slice.lineage().iter().any(|n| {
                slices
                    .get(n)
                    .and_then(|s| s.directives.get(d))
                    .is_some_and(|v| limits(&v.value))
            })
        })
        .collect()
}

pub(crate) fn check_slices(
    source: &Source,
    sockets: &BTreeMap<String, SocketSpec>,
    slices: &BTreeMap<SliceName, SliceSpec>,
    errors: &mut Vec<Diagnostic>,
) {
    const WANT: [&str; 2] = ["TasksMax", "MemoryMax"];
    for s in sockets.values() {
        let t = &s.target;
        if s.mode != Mode::PerConnection || t.rootfs.is_none() {
            continue;
        }
        let context = format!("[socket.{}.target] slice", s.name);
        let Some(name) = &t.slice else {
            errors.push(
                Diagnostic::error(format!(
                    "socket '{}' starts a sandbox per connection, and without a slice its sandboxes run in serve's own cgroup, their tasks and memory bounded only by the host",
                    s.name
                ))
                .at(source.at(t.loc))
                .context(context)
                .hint(
                    "add slice = \"NAME\" to the target, and [slice.NAME] with TasksMax and MemoryMax (e.g. TasksMax = 512, MemoryMax = \"2G\"): all of the socket's sandboxes share them",
                ),
            );
            continue;
        };
        let at = source.at(t.slice_at.unwrap_or(t.loc));
        if !slices.contains_key(name) {
            errors.push(
                Diagnostic::error(format!(
                    "slice '{name}' of socket '{}' is not in the plan, so nothing bounds its per-connection sandboxes",
                    s.name
                ))
                .at(at)
                .context(context)
                .hint(format!(
                    "add [slice.{name}] with TasksMax and MemoryMax (e.g. TasksMax = 512, MemoryMax = \"2G\")"
                )),
            );
            continue;
        }
        let missing = unbounded(name, slices, &WANT);
        if !missing.is_empty() {
            errors.push(
                Diagnostic::error(format!(
                    "slice '{name}' of socket '{}' sets no {} (nor does a parent), so one connection's sandbox can take the host's {}",
                    s.name,
                    missing.join(" and "),
                    if missing.len() == 2 {
                        "tasks and memory"
                    } else if missing[0] == "TasksMax" {
                        "tasks"
                    } else {
                        "memory"
                    }
                ))
                .at(at)
                .context(context)
                .hint(format!(
                    "add {} to [slice.{name}]: every sandbox of the socket runs in it",
                    missing
                        .iter()
                        .map(|d| if *d == "TasksMax" {
                            "TasksMax = 512"
                        } else {
                            "MemoryMax = \"2G\""
                        })
                        .collect::<Vec<_>>()
                        .join(" and ")
                )),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Plan;

    const SOCKET: &str = "[socket.inetd]\nlisten = [\"1234\"]\nmode = \"per-connection\"\n[socket.inetd.target]\nrootfs = \"/srv/root\"\ncommand = [\"/bin/sh\"]\n";

    fn errors(text: &str) -> String {
        match Plan::parse(text, Some(std::path::Path::new("p.toml"))) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_per_connection_sandbox_needs_a_slice_with_tasks_and_memory_limits() {
        let e = errors(SOCKET);
        assert!(
            e.contains("p.toml:4:")
                && e.contains("[socket.inetd.target] slice")
                && e.contains("run in serve's own cgroup")
                && e.contains("TasksMax and MemoryMax"),
            "{e}"
        );
        let e = errors(&format!("{SOCKET}slice = \"web\"\n"));
        assert!(
            e.contains("p.toml:7:")
                && e.contains("slice 'web' of socket 'inetd' is not in the plan"),
            "{e}"
        );
        let e = errors(&format!(
            "{SOCKET}slice = \"web\"\n[slice.web]\nTasksMax = 100\nMemoryMax = \"infinity\"\n"
        ));
        assert!(e.contains("sets no MemoryMax (nor does a parent)"), "{e}");
        // Set on a parent counts; a percentage of RAM is a limit.
        let ok = format!(
            "{SOCKET}slice = \"web-inetd\"\n[slice.web]\nTasksMax = 100\nMemoryMax = \"5%\"\n[slice.web-inetd]\nCPUWeight = 50\n"
        );
        Plan::parse(&ok, None).unwrap();
        // A plain per-connection command is the admin's own program: not refused.
        Plan::parse(
            "[socket.p]\nlisten = [\"1\"]\nmode = \"per-connection\"\n[socket.p.target]\ncommand = [\"/bin/cat\"]\n",
            None,
        )
        .unwrap();
    }
}
