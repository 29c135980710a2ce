//! `move`: running processes, with all their threads, into a slice (or back to the cgroup
//! root); with `tree`, each with all its descendants.

use super::slices::{parse_slice, require_slice};
use super::Context;
use crate::place::tree;
use bulkhead_cgroups::Placement;
use bulkhead_plan::SliceName;
use bulkhead_sys::error::Result;

/// What to move.
#[derive(Debug, Clone, Default)]
pub struct MoveRequest {
    pub slice: String,
    pub pids: Vec<i32>,
    /// Each PID with all its descendants.
    pub tree: bool,
    /// Only say what would move.
    pub dry_run: bool,
}

/// A process refused while its tree moved.
#[derive(Debug, serde::Serialize)]
pub struct Refused {
    pub pid: i32,
    pub error: String,
}

/// Descendants a single-PID move did not take along.
#[derive(Debug, serde::Serialize)]
pub struct LeftBehind {
    pub pids: Vec<i32>,
    /// Where the first of them is (`cpu:/`, or a cgroup2 path).
    pub cgroup: String,
}

/// One PID's outcome (with `tree`, its tree's).
#[derive(Debug, serde::Serialize)]
pub struct Moved {
    pub pid: i32,
    pub moved: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// With `tree`: every process moved (or, in a dry run, that would move), the root first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<Vec<i32>>,
    /// With `tree`: descendants that were refused.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refused>,
    /// With `tree`: the tree kept forking and was still growing after the last round.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unstable: bool,
    /// Without `tree`: descendants still outside the slice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_behind: Option<LeftBehind>,
    /// Processes (of `pid`, or of its tree) that were there already: their cgroups did not
    /// change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub already: Vec<i32>,
}

impl Moved {
    fn new(pid: i32, r: std::result::Result<(), String>) -> Moved {
        Moved {
            pid,
            moved: r.is_ok(),
            error: r.err(),
            tree: None,
            refused: Vec::new(),
            unstable: false,
            left_behind: None,
            already: Vec::new(),
        }
    }
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

/// Move each PID (or tree); a failure for one does not stop the others.
pub fn move_pids(cx: &Context, req: &MoveRequest) -> Result<(Target, Vec<Moved>)> {
    let chosen = cx.choose()?;
    let to = target(&req.slice)?;
    if let Target::Slice(s) = &to {
        require_slice(cx, &chosen, s)?;
    }
    let sched = match &to {
        Target::Slice(s) => crate::tasks::recorded(s),
        Target::Root => None,
    };
    let move_one = |pid: i32| -> std::result::Result<(), String> {
        if pid <= 0 {
            return Err("is not a process ID".to_string());
        }
        if req.dry_run {
            return match bulkhead_sys::process::is_kernel_thread(pid) {
                None => Err("no such process".into()),
                Some(true) => Err("is a kernel thread; kernel threads cannot be moved".into()),
                Some(false) => Ok(()),
            };
        }
        match &to {
            Target::Slice(s) => chosen.move_pid(s, pid)?,
            Target::Root => chosen.move_pid_out(pid)?,
        }
        if let Some(ns) = sched {
            crate::tasks::set_on_pids(&[pid], ns);
        }
        Ok(())
    };
    // The processes whose cgroups a move did not change (they were there already).
    let already = std::cell::RefCell::new(Vec::new());
    let mv = |pid: i32| -> std::result::Result<(), String> {
        let before = bulkhead_sys::procs::cgroup(pid);
        let r = move_one(pid);
        let same = before.is_some() && before == bulkhead_sys::procs::cgroup(pid);
        if r.is_ok() && !req.dry_run && same {
            already.borrow_mut().push(pid);
        }
        r
    };
    let results = req
        .pids
        .iter()
        .map(|&pid| match (req.tree, req.dry_run) {
            (false, _) => single(pid, mv(pid), req.dry_run),
            (true, true) => match mv(pid) {
                Err(e) => Moved::new(pid, Err(e)),
                Ok(()) => {
                    let mut m = Moved::new(pid, Ok(()));
                    m.moved = false;
                    m.tree = Some(
                        std::iter::once(pid)
                            .chain(tree::descendants_now(pid))
                            .collect(),
                    );
                    m
                }
            },
            (true, false) => whole_tree(pid, &mv),
        })
        .map(|mut m: Moved| {
            let mine = std::iter::once(m.pid).chain(m.tree.iter().flatten().copied());
            m.already = mine.filter(|p| already.borrow().contains(p)).collect();
            m.already.dedup();
            m
        })
        .collect();
    Ok((to, results))
}

fn single(pid: i32, r: std::result::Result<(), String>, dry_run: bool) -> Moved {
    let ok = r.is_ok();
    let mut m = Moved::new(pid, r);
    if ok {
        // In a dry run nothing moved: every descendant would stay where it is.
        let (pids, cgroup) = if dry_run {
            let d = tree::descendants_now(pid);
            let cg = d
                .first()
                .and_then(|&c| bulkhead_sys::procs::cgroup(c))
                .map(|t| tree::where_is(&t));
            (d, cg)
        } else {
            tree::left_behind(pid)
        };
        if let Some(cgroup) = cgroup.filter(|_| !pids.is_empty()) {
            m.left_behind = Some(LeftBehind { pids, cgroup });
        }
        m.moved = !dry_run;
    }
    m
}

fn whole_tree(pid: i32, mv: impl FnMut(i32) -> std::result::Result<(), String>) -> Moved {
    let gone = |p: i32| bulkhead_sys::process::is_kernel_thread(p).is_none();
    match tree::move_tree(pid, || tree::descendants_now(pid), mv, gone) {
        Err(e) => Moved::new(pid, Err(e)),
        Ok(out) => {
            let mut m = Moved::new(pid, Ok(()));
            m.tree = Some(out.moved);
            m.refused = out
                .failed
                .into_iter()
                .map(|(pid, error)| Refused { pid, error })
                .collect();
            m.unstable = !out.stable;
            m
        }
    }
}
