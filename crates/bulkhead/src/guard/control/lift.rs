//! The progress floor on CPU (`[guard] cpu_keep`): a sideload in idle scheduling (the plan's
//! CPUWeight=idle, or the guard's cut) gets nothing while the protected slice keeps every
//! CPU busy, and a backup placed there never finishes. So each sideload's CPU use and CPU
//! wait (its cpu.pressure `some` share) are smoothed over [`LIFT_TAU`]; one whose tasks wait
//! most of the time ([`WANTS`]) while it runs less than `cpu_keep`, for `keep_after`, is
//! lifted: CPUWeight=100 instead of idle, bounded by a quota of `cpu_keep`, so the server
//! loses at most that much. CPU cuts stop at that floor and it is not frozen.
//!
//! The lift ends (the quota it had before comes back, and the plan's idle) once it no longer
//! needs it for `keep_after`: it stopped waiting for a CPU and uses less than half its floor
//! (its work is done), or the host has CPU to spare ([`SPARE`]), which idle scheduling gives
//! it anyway with no quota.

use super::*;

/// The window over which a sideload's CPU use and wait are smoothed.
const LIFT_TAU: f64 = 1.0;
/// The share of time its tasks wait for a CPU above which a sideload wants more.
const WANTS: f64 = 0.5;
/// Below this wait share it no longer wants CPU.
const SATED: f64 = 0.1;
/// The host's idle share (of all CPUs) above which idle scheduling serves a sideload.
const SPARE: f64 = 0.25;

impl Controller {
    /// Lift starving sideloads to their CPU floor, and let them down when it is not needed.
    pub(super) fn keep_cpu(&mut self, r: &Reading, acts: &mut Vec<Action>) {
        let Some(keep) = self.s.cpu_keep else {
            return;
        };
        let alpha = 1.0 - (-r.dt.as_secs_f64().max(1e-3) / LIFT_TAU).exp();
        let spare = r.host_idle.is_some_and(|idle| idle >= SPARE);
        for i in 0..self.sides.len() {
            let Some(u) = r.sideloads.get(i).filter(|u| u.wait.is_some()) else {
                continue;
            };
            let side = &mut self.sides[i];
            side.cpu_recent += alpha * (u.cpu - side.cpu_recent);
            side.wait_recent += alpha * (u.wait.unwrap_or(0.0) - side.wait_recent);
            if side.t.frozen {
                side.lift_since = None; // frozen tasks do not wait: nothing to judge
                continue;
            }
            let change = if side.t.lifted {
                let done = side.wait_recent < SATED && side.cpu_recent < 0.5 * keep;
                done || spare
            } else {
                side.wait_recent >= WANTS && side.cpu_recent < keep && !spare
            };
            if !change {
                side.lift_since = None;
                continue;
            }
            let since = *side.lift_since.get_or_insert(self.now);
            if self.now < since + self.s.keep_after {
                continue;
            }
            side.lift_since = None;
            if side.t.lifted {
                self.let_down(i, spare, acts);
            } else {
                self.lift(i, keep, acts);
            }
        }
    }

    fn lift(&mut self, i: usize, keep: f64, acts: &mut Vec<Action>) {
        let side = &mut self.sides[i];
        side.quota_before_lift = side.t.cpu;
        side.t.lifted = true;
        side.t.cpu = Some(keep.min(self.s.cpus));
        side.t.period_us = self.s.quota_period_us;
        let why = format!(
            "its tasks waited for a CPU {:.0}% of the time while it ran {:.1}% of one CPU, for {:?}: lifted out of idle to its progress floor (cpu_keep {:.0}%): protection, not starvation",
            side.wait_recent * 100.0,
            side.cpu_recent * 100.0,
            self.s.keep_after,
            keep * 100.0
        );
        self.act(acts, i, "keep", (self.fast.cpu_side().0, "cpu_keep"), why);
    }

    fn let_down(&mut self, i: usize, spare: bool, acts: &mut Vec<Action>) {
        let side = &mut self.sides[i];
        side.t.lifted = false;
        side.t.cpu = side.quota_before_lift.take();
        let why = if spare {
            "the host has CPU to spare: idle scheduling serves it without a quota".to_string()
        } else {
            format!(
                "it no longer waits for a CPU ({:.0}% of the time) for {:?}: back to its plan",
                side.wait_recent * 100.0,
                self.s.keep_after
            )
        };
        self.act(
            acts,
            i,
            "release",
            (self.slow.cpu_side().0, "cpu_keep"),
            why,
        );
    }
}
