//! What a frozen target is made of (on_idle = "freeze", [`super::freeze`]): its freeze
//! cell and what froze with it, the counters `status` shows, and the blocking work of a
//! freeze (the target's tree gathered into the cell and frozen).

use bulkhead_cgroups::fs::FreezeCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Gathers before the tree is taken as whole: each moves what forked since the last, into a
/// cell that is frozen already, so the tree stops growing after the first.
const ROUNDS: usize = 8;

/// The target while it is frozen, or was: its cell, and what else froze with it.
pub struct Frozen {
    pub cell: Arc<FreezeCell>,
    pub nested: Vec<String>,
    /// When it froze (None: thawed).
    pub since: Option<Instant>,
    /// Its processes' resident memory when it froze.
    pub memory: u64,
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

/// Move the tree of `pid` into the cell and freeze it (blocking: reads /proc whole).
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
