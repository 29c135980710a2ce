//! A process with all its descendants into a slice. Processes fork while they are moved:
//! the tree is listed again after each round and the new ones moved, until a round finds
//! none (stable) or [`MAX_ROUNDS`] have run. Parents move before their children, so a child
//! forked after its parent moved is born in the slice.

use bulkhead_sys::procs;
use std::collections::{BTreeMap, BTreeSet};

/// Rounds of "list the tree, move what is new" before giving up on a tree that keeps forking.
pub(crate) const MAX_ROUNDS: usize = 8;

/// What moving one tree did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TreeOutcome {
    /// Moved, in the order they moved (the root first).
    pub moved: Vec<i32>,
    /// Refused, with the reason (processes that exited meanwhile are not listed).
    pub failed: BTreeMap<i32, String>,
    /// Rounds it took.
    pub rounds: usize,
    /// The last round found nothing new.
    pub stable: bool,
}

/// Move `root` and its descendants with `mv` (one whole process, all its threads). `list`
/// gives the tree now (the root's descendants); `gone` says whether an error means the
/// process exited meanwhile.
pub(crate) fn move_tree(
    root: i32,
    mut list: impl FnMut() -> Vec<i32>,
    mut mv: impl FnMut(i32) -> Result<(), String>,
    gone: impl Fn(i32) -> bool,
) -> Result<TreeOutcome, String> {
    mv(root)?;
    let mut out = TreeOutcome {
        moved: vec![root],
        ..TreeOutcome::default()
    };
    let mut tried: BTreeSet<i32> = BTreeSet::from([root]);
    while out.rounds < MAX_ROUNDS {
        out.rounds += 1;
        let new: Vec<i32> = list().into_iter().filter(|p| !tried.contains(p)).collect();
        if new.is_empty() {
            out.stable = true;
            break;
        }
        for p in new {
            tried.insert(p);
            match mv(p) {
                Ok(()) => out.moved.push(p),
                Err(_) if gone(p) => {}
                Err(e) => {
                    out.failed.insert(p, e);
                }
            }
        }
    }
    Ok(out)
}

/// The root's descendants now (a fresh scan of /proc).
pub(crate) fn descendants_now(root: i32) -> Vec<i32> {
    procs::descendants(root, &procs::table())
}

/// The descendants of `pid` that are not in the cgroups `pid` is in now (children a
/// single-PID move left behind), with where the first of them is.
pub(crate) fn left_behind(pid: i32) -> (Vec<i32>, Option<String>) {
    let Some(mine) = procs::cgroup(pid) else {
        return (Vec::new(), None);
    };
    let mut first = None;
    let behind: Vec<i32> = descendants_now(pid)
        .into_iter()
        .filter(|&c| match procs::cgroup(c) {
            Some(theirs) if theirs != mine => {
                first.get_or_insert(theirs);
                true
            }
            _ => false,
        })
        .collect();
    (behind, first.map(|cg| where_is(&cg)))
}

/// One line of /proc/PID/cgroup as people name it: `cpu:/db.slice`, else the cgroup2 path.
pub(crate) fn where_is(proc_cgroup: &str) -> String {
    let lines: Vec<(&str, &str)> = proc_cgroup
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let _id = it.next()?;
            Some((it.next()?, it.next()?))
        })
        .collect();
    if let Some((_, path)) = lines
        .iter()
        .find(|(ctrls, _)| ctrls.split(',').any(|c| c == "cpu"))
    {
        return format!("cpu:{path}");
    }
    lines
        .iter()
        .find(|(ctrls, _)| ctrls.is_empty())
        .map_or_else(|| "another cgroup".to_string(), |(_, p)| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn racing_forks_move_until_stable() {
        // The tree grows while it is moved: 11 appears after the first round.
        let rounds = RefCell::new(0);
        let list = || {
            *rounds.borrow_mut() += 1;
            if *rounds.borrow() == 1 {
                vec![10]
            } else {
                vec![10, 11]
            }
        };
        let moved = RefCell::new(Vec::new());
        let out = move_tree(
            1,
            list,
            |p| {
                moved.borrow_mut().push(p);
                Ok(())
            },
            |_| false,
        )
        .unwrap();
        assert_eq!(out.moved, vec![1, 10, 11]);
        assert!(out.stable);
        assert_eq!(out.rounds, 3);
        assert_eq!(*moved.borrow(), vec![1, 10, 11]);
    }

    #[test]
    fn a_fork_bomb_is_bounded_and_refusals_are_kept() {
        let n = RefCell::new(100);
        let list = || {
            *n.borrow_mut() += 1;
            (100..=*n.borrow()).collect()
        };
        let out = move_tree(
            1,
            list,
            |p| match p {
                101 => Err("refused".into()),
                102 => Err("no such process".into()),
                _ => Ok(()),
            },
            |p| p == 102,
        )
        .unwrap();
        assert!(!out.stable);
        assert_eq!(out.rounds, MAX_ROUNDS);
        assert_eq!(out.failed.get(&101).map(String::as_str), Some("refused"));
        assert!(!out.moved.contains(&102), "an exited one is neither");
        assert!(!out.failed.contains_key(&102));
    }

    #[test]
    fn the_root_refused_is_the_error() {
        let out = move_tree(1, Vec::new, |_| Err("no such process".into()), |_| true);
        assert_eq!(out, Err("no such process".to_string()));
    }

    #[test]
    fn where_a_process_is() {
        let hybrid = "5:memory:/a\n4:cpu,cpuacct:/db.slice\n0::/x\n";
        assert_eq!(where_is(hybrid), "cpu:/db.slice");
        assert_eq!(where_is("0::/init.scope\n"), "/init.scope");
        assert_eq!(where_is(""), "another cgroup");
    }
}
