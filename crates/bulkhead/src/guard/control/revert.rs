//! PARTIES for I/O, and its proof: cuts that did not lower the stall are reverted, and a
//! revert after which the stall rises is the proof that they did help.
//!
//! In a closed loop the protected service's own I/O stall sits above the baseline the guard
//! calibrated at part load, so at the sideload's floor the harm can stay above [`ENTER`]
//! although the cuts took most of it away. A revert then hands the sideload its whole
//! bandwidth for the back-off (2 s), and the stall jumps: on a real disk beside Redis a
//! `find | grep` took the first second of the closed loop down to a third of its rate. So
//! a stall that rises to half again its level at the revert (and at least twice the
//! allowance) ends the back-off at once, and the sideload is not judged again until the
//! I/O calms: throttling it is what helps.

use super::*;

/// How much the I/O harm must rise after a revert to prove the cuts helped.
const PROOF: f64 = 1.5;

/// Where a sideload's I/O cuts stand with the judge in this I/O episode.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) enum Verdict {
    /// Not judged yet, or judged and kept.
    #[default]
    Open,
    /// Reverted when the I/O harm was this.
    Reverted(f64),
    /// A rise after a revert proved that throttling it helps: not judged again.
    Proven,
}

impl Controller {
    /// PARTIES for I/O: a sideload held at its I/O floor for [`JUDGE`] periods while the I/O
    /// harm has not come down is not what the protected slice waits for (or throttling it
    /// holds the protected slice up: a journal commit waiting for the throttled writer's
    /// data), so its I/O limit goes back to where the episode began and I/O cuts back off.
    ///
    /// "Come down" is from the episode's worst harm, not from the harm at its first cut: the
    /// smoothed harm is still rising when it first crosses [`ENTER`], so cuts that took it
    /// from 10x down to 3x would otherwise look useless against the 1.2x of the first cut
    /// (an O_DIRECT writer beside Redis on a real disk: the revert gave it 2 s unlimited).
    pub(super) fn judge_io(&mut self, acts: &mut Vec<Action>) {
        let harm = self.fast.io_side().0;
        for side in &mut self.sides {
            if let Some((_, worst)) = &mut side.io_episode {
                *worst = worst.max(harm);
            }
        }
        for i in 0..self.sides.len() {
            let at_floor = self.sides[i]
                .t
                .io_bps
                .is_some_and(|b| b <= self.io_floor_of(i));
            if !at_floor || self.sides[i].io_verdict == Verdict::Proven {
                self.sides[i].io_floor_since = None;
                continue;
            }
            let since = *self.sides[i].io_floor_since.get_or_insert(self.now);
            let Some((before, worst)) = self.sides[i].io_episode else {
                continue;
            };
            if self.now < since + self.s.period * JUDGE || harm < ENTER * 0.9 || harm < 0.8 * worst
            {
                continue;
            }
            let side = &mut self.sides[i];
            side.t.io_bps = before;
            side.io_episode = None;
            side.io_floor_since = None;
            side.io_verdict = Verdict::Reverted(harm);
            self.io_backoff_until = self.now + self.io_backoff;
            let why = format!(
                "holding its I/O at the floor did not lower the I/O stall ({harm:.1}x): it is not the cause; no I/O cuts for {:?}",
                self.io_backoff
            );
            self.io_backoff = (self.io_backoff * 2).min(BACKOFF_MAX);
            self.act(acts, i, "revert", (harm, "judge"), why);
        }
    }

    /// A sideload whose I/O limit was given back and whose stall then rose is the cause:
    /// the back-off ends and it is not judged again in this episode. Returns why, for the
    /// cut that follows.
    pub(super) fn io_proven_by_revert(&mut self, harm: f64) -> Option<String> {
        let mut why = None;
        for side in &mut self.sides {
            let Verdict::Reverted(at) = side.io_verdict else {
                continue;
            };
            if harm >= (PROOF * at).max(2.0 * ENTER) {
                side.io_verdict = Verdict::Proven;
                why = Some(format!(
                    "the I/O stall rose from {at:.1}x to {harm:.1}x after its limit was given back: throttling it helps"
                ));
            }
        }
        if why.is_some() {
            self.io_backoff_until = self.now;
            self.io_backoff = BACKOFF_MIN;
        }
        why
    }
}
