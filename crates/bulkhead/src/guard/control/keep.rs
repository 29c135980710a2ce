//! Protection, not starvation: a sideload that moves I/O keeps at least `io_keep` of its
//! unthrottled I/O, whichever lever holds it back. The I/O lever stops at that floor by
//! itself; the CPU levers (quota, freeze) do not see I/O, and an I/O-bound sideload at the
//! CPU floor or frozen moves almost nothing. So its recent I/O (smoothed over [`KEEP_TAU`])
//! is watched: below the floor, it is not cut further by CPU, a freeze ends at once, and a
//! quota is doubled (at most once per half window) until its I/O is back above the floor.
//!
//! The quota it was given back is remembered as its CPU floor for the rest of the run, and
//! it is not frozen again: without that, the next cuts halved it to the floor again within
//! a second, long before a window of seconds saw its I/O fall, and it spent most of its time
//! starved (14-21% of its I/O alone in the v2 guest against a 25% floor).

use super::*;

/// The window over which a sideload's recent I/O is compared with its floor.
const KEEP_TAU: f64 = 2.0;

impl Controller {
    /// Smooth each sideload's I/O over [`KEEP_TAU`].
    pub(super) fn track_recent_io(&mut self, r: &Reading) {
        let alpha = 1.0 - (-r.dt.as_secs_f64().max(1e-3) / KEEP_TAU).exp();
        for (side, u) in self.sides.iter_mut().zip(&r.sideloads) {
            if side.io_recent == 0.0 {
                // The first I/O seen: a window warming up from zero is not starvation.
                side.io_recent = u.io_bps;
            } else {
                side.io_recent += alpha * (u.io_bps - side.io_recent);
            }
        }
    }

    /// Whether sideload `i` moves I/O and now gets less than `io_keep` of its peak.
    pub(super) fn starved(&self, i: usize) -> bool {
        let s = &self.sides[i];
        s.io_peak >= IO_ACTIVE && s.io_recent < self.s.io_keep * s.io_peak
    }

    /// The least quota a CPU cut leaves sideload `i`: the settings' floor, or what it needed
    /// to keep its I/O floor.
    /// A sideload lifted for its progress floor on CPU (lift.rs) keeps that floor too.
    pub(super) fn cpu_floor_of(&self, i: usize) -> f64 {
        let side = &self.sides[i];
        let learned = side
            .cpu_keep
            .map_or(self.s.cpu_floor, |k| k.max(self.s.cpu_floor));
        match self.s.cpu_keep {
            Some(k) if side.t.lifted => learned.max(k),
            _ => learned,
        }
    }

    /// Give a starved sideload CPU back: thaw it, or double its quota.
    pub(super) fn keep_io(&mut self, acts: &mut Vec<Action>) {
        for i in 0..self.sides.len() {
            if !self.starved(i) {
                continue;
            }
            let keep = self.s.io_keep * self.sides[i].io_peak;
            let why = format!(
                "its I/O fell to {:.0} KiB/s, below its floor of {:.0} KiB/s ({:.0}% of its peak, {:.0} KiB/s): protection, not starvation",
                self.sides[i].io_recent / 1024.0,
                keep / 1024.0,
                self.s.io_keep * 100.0,
                self.sides[i].io_peak / 1024.0
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
            // What it runs at now is the least it needs: learned as its CPU floor.
            let q = side.t.cpu.unwrap_or(self.s.cpus);
            side.cpu_keep = Some(side.cpu_keep.map_or(q, |k| k.max(q)));
            self.act(acts, i, "keep", (self.fast.cpu_side().0, "keep"), why);
        }
    }
}
