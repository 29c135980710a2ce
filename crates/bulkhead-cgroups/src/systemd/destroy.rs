//! `destroy` through systemd: stop bulkhead's transient slices (killing what is left with
//! --kill), remove the unit files `--persist` wrote, reload.

use super::call::Call;
use super::{export, free, Systemd};
use crate::backend::{busy_error, removal_order, Changes, Placement};
use bulkhead_plan::SliceName;
use bulkhead_sys::error::{Error, Result};
use std::path::PathBuf;

impl Systemd {
    pub(super) fn plan_destroy_sd(
        &self,
        slices: &[SliceName],
        kill: bool,
    ) -> Result<Changes<Call>> {
        let names = removal_order(slices, self.slices());
        let mut errors = Vec::new();
        let mut ops = Vec::new();
        let mut busy = Vec::new();
        for name in &names {
            let unit = name.unit();
            let st = self.bus.unit_state(&unit)?;
            let transient = st
                .as_ref()
                .is_some_and(|s| self.is_transient_ours(&unit, s));
            let persisted = self.is_persisted_ours(&unit);
            if !transient && !persisted {
                match &st {
                    Some(s) if !free(s) => errors.push(self.foreign(name, s, "remove")),
                    _ => {}
                }
                continue;
            }
            let procs = self.processes_in(name);
            if procs > 0 {
                busy.push(format!("{name} ({procs} process(es))"));
                if kill {
                    ops.push(Call::KillUnit { unit: unit.clone() });
                }
            }
            if st.as_ref().is_some_and(|s| !free(s)) {
                ops.push(Call::StopUnit { unit: unit.clone() });
            }
            if persisted {
                ops.extend(self.file_removals(&unit));
            }
        }
        if !busy.is_empty() && !kill {
            errors.push(busy_error(
                &busy,
                "into a slice the plan keeps: bulkhead move --slice SLICE PID...",
            ));
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        ops.extend(self.detach_calls(&names));
        if ops.iter().any(|c| matches!(c, Call::RemoveFile { .. })) {
            ops.push(Call::Reload);
        }
        Ok(Changes::new(
            ops,
            names.iter().map(|n| n.to_string()).collect(),
        ))
    }

    /// Processes in a slice and below it, read from cgroupfs.
    fn processes_in(&self, name: &SliceName) -> usize {
        self.reader
            .layout
            .primary()
            .map(|h| bulkhead_sys::cgroupfs::count_procs(&self.reader.dir(h, name)))
            .unwrap_or(0)
    }

    /// The unit file `--persist` wrote for a slice, and its floor drop-in.
    fn file_removals(&self, unit: &str) -> Vec<Call> {
        let path = self.persisted_path(unit);
        let drop_in = PathBuf::from(format!("{}.d", path.display())).join(export::FLOOR_DROP_IN);
        [drop_in, path]
            .into_iter()
            .filter(|p| export::ours(p))
            .map(|p| {
                let previous = std::fs::read_to_string(&p).unwrap_or_default();
                Call::RemoveFile { path: p, previous }
            })
            .collect()
    }
}
