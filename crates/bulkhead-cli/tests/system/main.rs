//! bulkhead's system tests, one test binary (ripgrep's layout): the real thing on this
//! machine, as root: cgroups, mounts, namespaces, loop devices, sockets, systemd in a
//! container. One module per area; pick one with a filter:
//! `cargo test -p bulkhead-cli --test system -- escape::`.
//!
//! Every test enters the [`suite`] first: `hosts` (the host suite, also run inside the
//! `scripts/vmhost` guests) measures shared CPUs and disks, so its checks run alone; the
//! snapshot tests move the process's registry paths, so they run beside each other only;
//! every other test runs beside any other.

mod common;

mod activate;
mod boot;
mod check;
mod escape;
mod guard;
mod hosts;
mod hugepages;
mod metrics;
mod nonroot;
mod package;
mod place;
mod postgres;
mod slices;
mod snapshot_image;
mod spawn;
mod systemd;

/// Who may run at the same time. Every test enters the suite first, in one of three ways:
/// [`suite::shared`] beside any other shared test; [`suite::group`] beside the tests of its
/// own group only (the snapshot tests point the process's environment at a registry of their
/// own while they run); [`suite::alone`] with nothing else (the host suite's checks measure
/// shared CPUs and disks).
pub mod suite {
    use std::sync::{Condvar, Mutex, MutexGuard};

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Shared,
        Group(&'static str),
        Alone,
    }

    /// Which kind runs now, and how many tests of it.
    struct Running {
        kind: Option<Kind>,
        count: usize,
    }

    static RUNNING: Mutex<Running> = Mutex::new(Running {
        kind: None,
        count: 0,
    });
    static CHANGED: Condvar = Condvar::new();

    /// Held while the test runs; the last one of its kind to leave runs `leave` and lets the
    /// next kind in (also when the test panics).
    pub struct Guard {
        leave: Option<fn()>,
    }

    fn running() -> MutexGuard<'static, Running> {
        RUNNING.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enter(kind: Kind, first: Option<fn()>, leave: Option<fn()>) -> Guard {
        let mut r = running();
        while let Some(k) = r.kind {
            if k == kind && kind != Kind::Alone {
                break;
            }
            r = CHANGED.wait(r).unwrap_or_else(|p| p.into_inner());
        }
        if r.kind.is_none() {
            if let Some(f) = first {
                f();
            }
        }
        r.kind = Some(kind);
        r.count += 1;
        Guard { leave }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            let mut r = running();
            r.count -= 1;
            if r.count == 0 {
                if let Some(f) = self.leave {
                    f();
                }
                r.kind = None;
                CHANGED.notify_all();
            }
        }
    }

    /// A test that tolerates the other shared tests beside it.
    pub fn shared() -> Guard {
        enter(Kind::Shared, None, None)
    }

    /// A test of `name`'s group: beside that group's tests only. The first of a run of them
    /// calls `first`, the last `leave`, with no test of another kind running.
    pub fn group(name: &'static str, first: fn(), leave: fn()) -> Guard {
        enter(Kind::Group(name), Some(first), Some(leave))
    }

    /// [`shared`], when there are cgroups to test in (root and a mounted hierarchy; missing,
    /// they fail the test in CI and skip it elsewhere).
    pub fn cgroups() -> Option<Guard> {
        let g = shared();
        crate::common::prerequisites().then_some(g)
    }

    /// [`cgroups`] when `more` holds too (the test's other prerequisites, said by their own
    /// checks: python3, file descriptors).
    pub fn cgroups_and(more: bool) -> Option<Guard> {
        cgroups().filter(|_| more)
    }

    /// [`cgroups_and`] and a scratch directory `/var/tmp/bulkhead-PREFIX-...` of the test's own.
    pub fn scratch(prefix: &str, more: bool) -> Option<(Guard, crate::common::serve::Scratch)> {
        cgroups_and(more).map(|g| (g, crate::common::serve::Scratch::new(prefix)))
    }

    /// [`alone`], when there are cgroups to test in.
    pub fn cgroups_alone() -> Option<Guard> {
        let g = alone();
        crate::common::prerequisites().then_some(g)
    }

    /// [`cgroups`] and a scratch cgroup root of the test's own.
    pub fn rooted() -> Option<(Guard, crate::common::TestRoot)> {
        cgroups().map(|g| (g, crate::common::TestRoot::new()))
    }

    /// [`rooted`] with `text` written as the test's plan; the plan's path (a few bytes kept
    /// for the test binary's life, so that it reads as the `&str` of an argument list).
    pub fn planned(text: &str) -> Option<(Guard, crate::common::TestRoot, &'static str)> {
        let (g, t) = rooted()?;
        let plan = t.plan(text).display().to_string();
        Some((g, t, plan.leak()))
    }

    /// [`rooted`], with nothing else of this binary running (see [`alone`]).
    pub fn rooted_alone() -> Option<(Guard, crate::common::TestRoot)> {
        cgroups_alone().map(|g| (g, crate::common::TestRoot::new()))
    }

    /// A check that measures the machine: nothing else of this binary runs meanwhile.
    pub fn alone() -> Guard {
        enter(Kind::Alone, None, None)
    }
}
