//! `apply --persist`: unit files and drop-ins under /etc/systemd/system, a daemon-reload, and
//! a start of each slice that is not active yet.

use super::call::Call;
use super::export::{self, Export};
use super::{free, Systemd};
use crate::backend::Changes;
use bulkhead_plan::ResolvedPlan;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::path::Path;

impl Systemd {
    pub(super) fn plan_persist(&self, resolved: &ResolvedPlan) -> Result<Changes<Call>> {
        let version = self.version();
        let mut warnings = self.layout_warnings(resolved);
        for s in &resolved.slices {
            warnings.extend(super::slice_props::slice_props(s, version).warnings);
        }
        let files = export::unit_files(&resolved.plan, &resolved.host, version)?;
        let mut errors = self.persist_conflicts(resolved)?;
        if let Err(e) = export::check_targets(&self.unit_dir, &files) {
            errors.extend(e.diagnostics());
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        let mut ops = self.file_calls(&files);
        ops.extend(self.attach_calls(&resolved.plan, false)?);
        if !ops.is_empty() {
            ops.push(Call::Reload);
        }
        for s in &resolved.slices {
            let unit = s.name().unit();
            let active = self
                .bus
                .unit_state(&unit)?
                .is_some_and(|st| st.active_state == "active");
            if !active && !s.implicit {
                ops.push(Call::StartUnit { unit });
            }
        }
        warnings.extend(self.left_over(resolved));
        warnings.extend(self.restart_notes(&resolved.plan));
        let mut c = Changes::new(
            ops,
            resolved
                .slices
                .iter()
                .map(|s| s.name().to_string())
                .collect(),
        );
        c.warnings = warnings;
        Ok(c)
    }

    /// Slices that exist in systemd in a form `--persist` must not take over.
    fn persist_conflicts(&self, resolved: &ResolvedPlan) -> Result<Vec<Diagnostic>> {
        let mut errors = Vec::new();
        for s in &resolved.slices {
            let unit = s.name().unit();
            let Some(st) = self.bus.unit_state(&unit)? else {
                continue;
            };
            let mine = self.persisted_path(&unit);
            if self.is_transient_ours(&unit, &st) {
                errors.push(
                    Diagnostic::error(format!(
                        "slice '{}' is a transient unit from an earlier apply without --persist",
                        s.name()
                    ))
                    .hint(format!(
                        "remove it first: bulkhead destroy --slice {}",
                        s.name()
                    )),
                );
            } else if !st.fragment_path.is_empty()
                && (Path::new(&st.fragment_path) != mine || !export::ours(&mine))
            {
                errors.push(self.foreign(s.name(), &st, "replace"));
            } else if st.fragment_path.is_empty() && !free(&st) {
                errors.push(self.foreign(s.name(), &st, "adopt"));
            }
        }
        Ok(errors)
    }

    /// Writes of the files that differ, removals of floor drop-ins no longer needed.
    fn file_calls(&self, files: &Export) -> Vec<Call> {
        let mut ops = Vec::new();
        for f in &files.files {
            let path = self.unit_dir.join(&f.path);
            let previous = std::fs::read_to_string(&path).ok();
            if previous.as_deref() == Some(f.text.as_str()) {
                continue;
            }
            ops.push(Call::WriteFile {
                path,
                text: f.text.clone(),
                previous,
            });
        }
        for s in &files.stale {
            let path = self.unit_dir.join(s);
            if export::ours(&path) {
                let previous = std::fs::read_to_string(&path).unwrap_or_default();
                ops.push(Call::RemoveFile { path, previous });
            }
        }
        ops
    }
}
