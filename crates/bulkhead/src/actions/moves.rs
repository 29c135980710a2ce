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

/// Move each PID; a failure for one does not stop the others.
pub fn move_pids(cx: &Context, slice: &str, pids: &[i32]) -> Result<(SliceName, Vec<Moved>)> {
    let chosen = cx.choose()?;
    let slice = parse_slice(slice)?;
    require_slice(cx, &chosen, &slice)?;
    let sched = crate::tasks::recorded(&slice);
    let results = pids
        .iter()
        .map(|&pid| {
            let r = if pid <= 0 {
                Err("is not a process ID".to_string())
            } else {
                chosen.move_pid(&slice, pid)
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
    Ok((slice, results))
}
