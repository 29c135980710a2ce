//! What a frozen target is made of (on_idle = "freeze", [`super::freeze`]): how it is held
//! (a freeze cell of serve's own, or the target's systemd unit), the counters `status` shows,
//! and the blocking work of a freeze.

use bulkhead_cgroups::fs::FreezeCell;
use bulkhead_cgroups::systemd::Systemd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Gathers before the tree is taken as whole: each moves what forked since the last, into a
/// cell that is frozen already, so the tree stops growing after the first.
const ROUNDS: usize = 8;

/// How serve freezes targets: the cgroupfs backend's slices (a cell below the slice), or
/// systemd (the target's own transient unit: FreezeUnit).
#[derive(Clone)]
pub enum Freezer {
    Cells(bulkhead_cgroups::CgroupFs),
    Units(Arc<Systemd>),
}

impl std::fmt::Debug for Freezer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Freezer::Cells(_) => "Freezer::Cells",
            Freezer::Units(_) => "Freezer::Units",
        })
    }
}

/// What holds one frozen target.
#[derive(Clone)]
pub enum Hold {
    /// Its processes in a cell below its slice, and the target's own cgroups below the slice
    /// (a booted container's), frozen with it.
    Cell {
        cell: Arc<FreezeCell>,
        nested: Vec<String>,
    },
    /// Its systemd unit (`bulkhead-run-PID.service`, `bulkhead-spawn-PID.scope`).
    Unit { systemd: Arc<Systemd>, unit: String },
}

impl Hold {
    /// Freeze or thaw it.
    pub fn set(&self, frozen: bool) -> Result<(), String> {
        match self {
            Hold::Cell { cell, nested } => cell.set(frozen, nested).map_err(|e| e.to_string()),
            Hold::Unit { systemd, unit } => {
                systemd.freeze_unit(unit, frozen).map_err(|e| e.to_string())
            }
        }
    }

    /// Where, for the log.
    pub fn describe(&self) -> String {
        match self {
            Hold::Cell { cell, .. } => cell.path().display().to_string(),
            Hold::Unit { unit, .. } => unit.clone(),
        }
    }
}

/// The target while it is frozen, or was.
pub struct Frozen {
    pub hold: Hold,
    /// When it froze (None: thawed).
    pub since: Option<Instant>,
    /// Its processes' resident memory when it froze (None: not known, under systemd).
    pub memory: Option<u64>,
}

/// Counters for the status file.
#[derive(Debug, Default, Clone, Copy)]
pub struct FreezeCounts {
    pub freezes: u64,
    pub thaws: u64,
    pub last_thaw: Option<Duration>,
}

/// The resident memory of `pids` (VmRSS), bytes.
pub fn resident(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            l.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum::<u64>()
        * 1024
}

/// Move the tree of `pid` into the cell and freeze it (blocking: reads /proc whole); the
/// cgroups below the slice that froze with it, and how many processes the tree had.
pub fn freeze_tree(cell: &FreezeCell, pid: u32) -> std::io::Result<(Vec<String>, usize)> {
    let mut nested: Vec<String> = Vec::new();
    let mut tree = Vec::new();
    for _ in 0..ROUNDS {
        let table = bulkhead_sys::procs::table();
        tree = vec![pid as i32];
        tree.extend(bulkhead_sys::procs::descendants(pid as i32, &table));
        let got = cell.gather(&tree);
        for n in got.nested {
            if !nested.contains(&n) {
                nested.push(n);
            }
        }
        cell.set(true, &nested)?;
        if got.moved == 0 {
            break;
        }
    }
    Ok((nested, tree.len()))
}

/// Freeze the target by the way serve has: (what holds it, processes, resident memory).
pub fn freeze_blocking(hold: Hold, pid: u32) -> Result<(Hold, usize, Option<u64>), String> {
    match hold {
        Hold::Cell { cell, .. } => {
            let (nested, n) = freeze_tree(&cell, pid).map_err(|e| {
                let _ = cell.set(false, &[]);
                e.to_string()
            })?;
            let memory = resident(&cell.pids());
            Ok((Hold::Cell { cell, nested }, n, Some(memory)))
        }
        Hold::Unit { .. } => {
            hold.set(true)?;
            Ok((hold, 0, None))
        }
    }
}
