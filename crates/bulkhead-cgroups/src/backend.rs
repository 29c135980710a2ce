//! What every backend offers: placing processes into slices ([`Placement`]) and turning a
//! resolved plan into operations that are data ([`Backend`]: planned, printed as a dry run,
//! executed, undone on failure).

use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::fmt;

/// What an apply or destroy would do, in a backend's own operations.
#[derive(Debug, serde::Serialize)]
pub struct Changes<Op> {
    pub ops: Vec<Op>,
    /// Directives this host cannot honour, and other findings.
    pub warnings: Vec<Diagnostic>,
    /// Slices considered.
    pub slices: Vec<String>,
}

impl<Op> Changes<Op> {
    pub fn new(ops: Vec<Op>, slices: Vec<String>) -> Changes<Op> {
        Changes {
            ops,
            warnings: vec![],
            slices,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// The same changes with every operation wrapped (a chosen backend's own op type).
    pub fn map<T>(self, f: impl Fn(Op) -> T) -> Changes<T> {
        Changes {
            ops: self.ops.into_iter().map(f).collect(),
            warnings: self.warnings,
            slices: self.slices,
        }
    }
}

/// What an execution did.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Outcome {
    pub done: usize,
    /// Defaults skipped because this kernel has no file for them.
    pub skipped: usize,
}

/// How `apply` records the slices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyOptions {
    /// systemd: unit files and drop-ins that survive a reboot, instead of transient units.
    pub persist: bool,
}

/// Why a process could not be placed into a slice.
#[derive(Debug)]
pub enum PlaceError {
    /// No such slice of bulkhead's exists (not in the plan, or not applied yet).
    MissingSlice(SliceName),
    /// The slice exists but the move failed.
    Failed(Error),
}

impl From<PlaceError> for Error {
    fn from(e: PlaceError) -> Error {
        match e {
            PlaceError::MissingSlice(s) => {
                Error::invalid(Diagnostic::error(format!("slice '{s}' does not exist")))
            }
            PlaceError::Failed(e) => e,
        }
    }
}

impl fmt::Display for PlaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlaceError::MissingSlice(s) => write!(f, "slice '{s}' does not exist"),
            PlaceError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// Who joins a slice, for a backend that gives the joining process a unit of its own
/// (systemd: the transient scope `PREFIX-PID.scope` in the slice; cgroupfs needs none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joiner {
    /// The scope's name before `-PID.scope`.
    pub prefix: &'static str,
    /// The scope's Description=.
    pub description: String,
    /// Delegate=yes: the processes may manage the cgroups below the scope themselves (a
    /// sandbox, the root of its own cgroup namespace), as systemd-nspawn's scopes do.
    pub delegate: bool,
}

impl Joiner {
    /// `run` (`--scope` with systemd): bulkhead joins, then execs the command.
    pub fn run(slice: &SliceName) -> Joiner {
        Joiner {
            prefix: "bulkhead-run",
            description: format!("bulkhead run --scope in {}", slice.unit()),
            delegate: false,
        }
    }

    /// `spawn --slice`: bulkhead joins, then starts the sandbox `what` there.
    pub fn spawn(what: &str) -> Joiner {
        Joiner {
            prefix: "bulkhead-spawn",
            description: format!("bulkhead spawn: sandbox {what}"),
            delegate: true,
        }
    }
}

/// Putting processes into slices: what `run`, `move`, `spawn` and the guard need.
pub trait Placement {
    /// `cgroupfs` or `systemd`.
    fn name(&self) -> &'static str;
    /// Slices bulkhead created that exist now, parents first.
    fn slices(&self) -> Vec<SliceName>;
    /// Whether a slice exists (and is bulkhead's, or may be: see [`Placement::unverified`]).
    fn slice_exists(&self, slice: &SliceName) -> bool {
        self.slices().contains(slice)
    }
    /// Why this process cannot tell bulkhead's slices from others (it may not read the
    /// marks): then `slices` and `slice_exists` count what may be bulkhead's.
    fn unverified(&self) -> Option<String> {
        None
    }
    /// Move the calling process into a slice (`run`: join, then exec; `spawn`: join, then
    /// start the sandbox), as `who` (the name and settings of a scope, where the backend
    /// makes one).
    fn join(&self, slice: &SliceName, who: &Joiner) -> std::result::Result<(), PlaceError>;
    /// The slice's directory when the slice is that one cgroup2 directory and nothing else
    /// (pure v2, cgroupfs backend): a child can be cloned straight into it
    /// (CLONE_INTO_CGROUP). None where joining takes more: v1 or hybrid hierarchies, or a
    /// systemd scope.
    fn cgroup2_dir(&self, _slice: &SliceName) -> Option<std::path::PathBuf> {
        None
    }
    /// Move one whole process into a slice; on failure it is left where it was.
    fn move_pid(&self, slice: &SliceName, pid: i32) -> std::result::Result<(), String>;
    /// Move the process a caller decided on by its PID, then check with `still_same` (its
    /// pidfd alive, its start time unchanged) that the PID still names it: a process that
    /// exited during the move may have left its PID to another (issue 40 #7). Then the move
    /// is refused with the reason, and where the backend can, the process the PID names now
    /// is put where it was born (its parent's cgroups).
    fn move_held(
        &self,
        slice: &SliceName,
        pid: i32,
        still_same: &dyn Fn() -> bool,
    ) -> std::result::Result<(), String> {
        self.move_pid(slice, pid)?;
        if still_same() {
            return Ok(());
        }
        Err(format!(
            "the process exited during the move: PID {pid} may name another process now, which this backend cannot put back"
        ))
    }
    /// Whether the service manager itself puts services into their slices (systemd's `Slice=`
    /// drop-ins); where it does not, bulkhead places them by their pidfiles.
    fn attaches_services(&self) -> bool {
        false
    }
    /// Whether [`Placement::join`] gives the caller a cgroup subtree of its own, delegated
    /// (a systemd scope with `Delegate=yes`): a booted sandbox makes its cgroups below it.
    fn join_delegates(&self) -> bool {
        false
    }
    /// Move a running process out of every slice, back to the cgroup root (`move --slice /`).
    fn move_pid_out(&self, _pid: i32) -> std::result::Result<(), String> {
        Err("on systemd every process belongs to a unit: move it into another slice (bulkhead move --slice SLICE PID), stop it, or remove the slices with destroy --kill".into())
    }
}

/// A backend: slices from a resolved plan, as operations that are data.
pub trait Backend: Placement {
    /// One operation, printable for `--dry-run` and serialisable for `--json`.
    type Op: fmt::Display + fmt::Debug + serde::Serialize;
    /// One line for people: the backend and the layout it drives.
    fn describe(&self) -> String;
    /// What `apply` would do, reading the system but changing nothing.
    fn plan_apply(&self, plan: &ResolvedPlan, how: ApplyOptions) -> Result<Changes<Self::Op>>;
    /// What `destroy` would do for these slices.
    fn plan_destroy(&self, slices: &[SliceName], kill: bool) -> Result<Changes<Self::Op>>;
    /// Carry out planned changes; on failure everything already changed is put back.
    fn execute(&self, changes: &Changes<Self::Op>) -> Result<Outcome>;
}

/// The slices to remove for `slices`, children first: child slices that exist but are not
/// named (left from earlier plans) go too, since a parent cannot be removed before them.
pub fn removal_order(slices: &[SliceName], existing: Vec<SliceName>) -> Vec<SliceName> {
    let mut names: Vec<SliceName> = slices.to_vec();
    for e in existing {
        if !names.contains(&e) && e.lineage().iter().any(|a| slices.contains(a)) {
            names.push(e);
        }
    }
    names.sort_by(|a, b| (b.depth(), b.as_str()).cmp(&(a.depth(), a.as_str())));
    names.dedup();
    names
}

/// "slices still have processes: ..." with what to do: `move_out` is the command that moves
/// them out on this backend.
pub fn busy_error(busy: &[String], move_out: &str) -> Diagnostic {
    Diagnostic::error(format!("slices still have processes: {}", busy.join("; "))).hint(format!(
        "stop them, move them out ({move_out}), or pass --kill to kill them"
    ))
}

/// A note for a slice an earlier apply made that the plan no longer has.
pub fn left_over_note(slice: &SliceName) -> Diagnostic {
    Diagnostic::note(format!(
        "slice '{slice}' exists from an earlier apply but is not in this plan; it is left as it is"
    ))
    .hint(format!("remove it with: bulkhead destroy --slice {slice}"))
}
