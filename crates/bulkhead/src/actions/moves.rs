//! `move`: running processes, with all their threads, into a slice.

use super::slices::{parse_slice, require_slice};
use super::Context;
use bulkhead_cgroups::Placement;
use bulkhead_plan::SliceName;
use bulkhead_sys::error::Result;

/// One process's outcome.
#[derive(Debug, serde::Serialize)]
pub struct Moved {
    pub pid: i32,
    pub moved: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where `move` puts processes: a slice, or back to the cgroup root (`--slice /`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum Target {
    Slice(SliceName),
    #[serde(serialize_with = "root_text")]
    Root,
}

fn root_text<S: serde::Serializer>(s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str("/")
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Slice(s) => f.write_str(&s.unit()),
            Target::Root => f.write_str("the cgroup root (out of every slice)"),
        }
    }
}

/// `--slice`'s text: `/` (or systemd's name of the root slice, `-.slice`) is the root.
fn target(slice: &str) -> Result<Target> {
    match slice {
        "/" | "-" | "-.slice" => Ok(Target::Root),
        s => parse_slice(s).map(Target::Slice),
    }
}

/// Move each PID; a failure for one does not stop the others.
pub fn move_pids(cx: &Context, slice: &str, pids: &[i32]) -> Result<(Target, Vec<Moved>)> {
    let chosen = cx.choose()?;
    let to = target(slice)?;
    if let Target::Slice(s) = &to {
        require_slice(cx, &chosen, s)?;
    }
    let sched = match &to {
        Target::Slice(s) => crate::tasks::recorded(s),
        Target::Root => None,
    };
    let results = pids
        .iter()
        .map(|&pid| {
            let r = match &to {
                _ if pid <= 0 => Err("is not a process ID".to_string()),
                Target::Slice(s) => chosen.move_pid(s, pid),
                Target::Root => chosen.move_pid_out(pid),
            };
            if let (Ok(()), Some(ns)) = (&r, sched) {
                crate::tasks::set_on_pids(&[pid], ns);
            }
            Moved {
                pid,
                moved: r.is_ok(),
                error: r.err(),
            }
        })
        .collect();
    Ok((to, results))
}
