//! Protection, not starvation: a sideload that moves I/O keeps at least [`IO_KEEP`] of its
//! unthrottled I/O, whichever lever holds it back. The I/O lever stops at that floor by
//! itself; the CPU levers (quota, freeze) do not see I/O, and an I/O-bound sideload at the
//! CPU floor or frozen moves almost nothing. So its recent I/O (smoothed over [`KEEP_TAU`])
//! is watched: below the floor, it is not cut further by CPU, a freeze ends at once, and a
//! quota is doubled (at most once per half window) until its I/O is back above the floor.

use super::*;

/// The window over which a sideload's recent I/O is compared with its floor.
const KEEP_TAU: f64 = 2.0;

impl Controller {
    /// Smooth each sideload's I/O over [`KEEP_TAU`].
    pub(super) fn track_recent_io(&mut self, r: &Reading) {
        let alpha = 1.0 - (-r.dt.as_secs_f64().max(1e-3) / KEEP_TAU).exp();
        for (side, u) in self.sides.iter_mut().zip(&r.sideloads) {
            side.io_recent += alpha * (u.io_bps - side.io_recent);
        }
    }

    /// Whether sideload `i` moves I/O and now gets less than [`IO_KEEP`] of its peak.
    pub(super) fn starved(&self, i: usize) -> bool {
        let s = &self.sides[i];
        s.io_peak >= IO_ACTIVE && s.io_recent < IO_KEEP * s.io_peak
    }

    /// Give a starved sideload CPU back: thaw it, or double its quota.
    pub(super) fn keep_io(&mut self, acts: &mut Vec<Action>) {
        for i in 0..self.sides.len() {
            if !self.starved(i) {
                continue;
            }
            let keep = IO_KEEP * self.sides[i].io_peak;
            let why = format!(
                "its I/O fell to {:.0} KiB/s, below {:.0}% of its peak ({:.0} KiB/s): protection, not starvation",
                self.sides[i].io_recent / 1024.0,
                IO_KEEP * 100.0,
                keep / 1024.0
            );
            let side = &mut self.sides[i];
            if side.t.frozen {
                side.t.frozen = false;
                side.frozen_at = None;
                side.refreeze_at = self.now + (self.s.max_frozen * 2).max(Duration::from_secs(1));
            } else if let Some(q) = side.t.cpu.filter(|_| self.now >= side.keep_at) {
                let next = q * 2.0;
                side.t.cpu = (next < self.s.cpus).then_some(next);
                side.keep_at = self.now + Duration::from_secs_f64(KEEP_TAU / 2.0);
            } else {
                continue;
            }
            self.act(acts, i, "keep", (self.fast.cpu_side().0, "keep"), why);
        }
    }
}
