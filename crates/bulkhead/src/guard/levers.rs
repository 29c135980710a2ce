//! The guard's hands: each sideload's [`Throttle`] made real through the chosen backend
//! (cgroupfs writes, or systemd runtime properties and FreezeUnit), only when it changes,
//! and re-asserted once a second against what the system holds (someone's `apply`,
//! `systemctl set-property` or daemon-reload).

use bulkhead_cgroups::{Chosen, ChosenOp, Throttle};
use bulkhead_plan::ResolvedSlice;
use bulkhead_sys::error::Result;
use bulkhead_sys::host::DevNum;

pub struct Levers {
    pub chosen: Chosen,
    /// The sideloads as the plan has them.
    pub slices: Vec<ResolvedSlice>,
    /// The disks I/O limits go on.
    pub disks: Vec<DevNum>,
    applied: Vec<Throttle>,
}

impl Levers {
    pub fn new(chosen: Chosen, slices: Vec<ResolvedSlice>, disks: Vec<DevNum>) -> Levers {
        let applied = vec![Throttle::none(); slices.len()];
        Levers {
            chosen,
            slices,
            disks,
            applied,
        }
    }

    /// The operations that would give sideload `i` the throttle `t` now.
    pub fn plan(&self, i: usize, t: &Throttle) -> Result<Vec<ChosenOp>> {
        self.chosen.plan_throttle(&self.slices[i], t, &self.disks)
    }

    /// Give sideload `i` the throttle `t` (nothing when it already has it).
    pub fn set(&mut self, i: usize, t: Throttle) -> Result<()> {
        if self.applied[i] == t {
            return Ok(());
        }
        self.apply(i, t)?;
        Ok(())
    }

    fn apply(&mut self, i: usize, t: Throttle) -> Result<usize> {
        let ops = self.plan(i, &t)?;
        if !ops.is_empty() {
            self.chosen.execute_throttle(&ops)?;
        }
        self.applied[i] = t;
        Ok(ops.len())
    }

    /// Plan every sideload's current throttle again and carry out what differs: the
    /// changes someone else made to them. Returns how many operations that took.
    pub fn reassert(&mut self) -> Result<usize> {
        let mut n = 0;
        for i in 0..self.slices.len() {
            if !self.applied[i].is_none() {
                n += self.apply(i, self.applied[i])?;
            }
        }
        Ok(n)
    }

    /// Every sideload back to its plan; the first error is returned after trying all.
    pub fn release_all(&mut self) -> Result<()> {
        let mut first = None;
        for i in 0..self.slices.len() {
            if let Err(e) = self.apply(i, Throttle::none()) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    pub fn applied(&self) -> &[Throttle] {
        &self.applied
    }
}
