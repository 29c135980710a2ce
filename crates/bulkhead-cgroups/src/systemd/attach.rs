//! Services attached to the plan's slices (`services = [...]`): their `Slice=` drop-ins
//! written and removed as calls (printed by `--dry-run`, undone when a later call fails), and
//! which running services need a restart to move. bulkhead never restarts a service: the
//! database's owner decides when.

use super::call::Call;
use super::export::services::{drop_ins, written};
use super::export::{ours, UnitFile};
use super::Systemd;
use bulkhead_plan::{Plan, SliceName};
use bulkhead_sys::error::{Diagnostic, Result};

impl Systemd {
    /// Writes of the drop-ins that differ (`writes`: false when `--persist` writes them with
    /// the unit files), removals of the ones bulkhead wrote for services no longer in the plan.
    pub(super) fn attach_calls(&self, plan: &Plan, writes: bool) -> Result<Vec<Call>> {
        let wanted = drop_ins(plan);
        let mut ops = Vec::new();
        if writes {
            let mut errors = Vec::new();
            for f in &wanted {
                match self.drop_in_write(f) {
                    Ok(Some(call)) => ops.push(call),
                    Ok(None) => {}
                    Err(d) => errors.push(d),
                }
            }
            if !errors.is_empty() {
                return Err(bulkhead_sys::error::Error::Invalid(errors));
            }
        }
        for (path, _) in written(&self.unit_dir) {
            if !wanted.iter().any(|f| self.unit_dir.join(&f.path) == path) {
                let previous = std::fs::read_to_string(&path).unwrap_or_default();
                ops.push(Call::RemoveFile { path, previous });
            }
        }
        Ok(ops)
    }

    fn drop_in_write(&self, f: &UnitFile) -> std::result::Result<Option<Call>, Diagnostic> {
        let path = self.unit_dir.join(&f.path);
        let previous = bulkhead_sys::statefile::read_string(&path, 64 << 10).ok();
        if previous.as_deref() == Some(f.text.as_str()) {
            return Ok(None);
        }
        if bulkhead_sys::statefile::exists(&path) && !ours(&path) {
            return Err(Diagnostic::error(
                "the drop-in exists and was not written by bulkhead; refusing to replace it",
            )
            .at(path.display().to_string())
            .hint("remove it (its Slice= would fight the plan's), then apply again"));
        }
        Ok(Some(Call::WriteFile {
            path,
            text: f.text.clone(),
            previous,
        }))
    }

    /// Removals of the drop-ins that put services in these slices (`destroy`).
    pub(super) fn detach_calls(&self, slices: &[SliceName]) -> Vec<Call> {
        let units: Vec<String> = slices.iter().map(SliceName::unit).collect();
        written(&self.unit_dir)
            .into_iter()
            .filter(|(_, slice)| units.contains(slice))
            .map(|(path, _)| {
                let previous = std::fs::read_to_string(&path).unwrap_or_default();
                Call::RemoveFile { path, previous }
            })
            .collect()
    }

    /// A warning for each running service of the plan that is not in its slice yet: it moves
    /// when restarted. A note for a service systemd does not know.
    pub(super) fn restart_notes(&self, plan: &Plan) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        for (service, slice) in bulkhead_plan::services::of_plan(plan) {
            let unit = slice.unit();
            let st = self.bus.unit_state(&service).ok().flatten();
            match st {
                Some(st) if st.load_state == "loaded" => {
                    let running = st.active_state == "active" || st.active_state == "reloading";
                    if running && !st.control_group.split('/').any(|c| c == unit) {
                        out.push(
                            Diagnostic::warning(format!(
                                "{service} runs in {}: it moves to {unit} when it restarts",
                                parent_of(&st.control_group)
                            ))
                            .context(format!("[slice.{slice}] services"))
                            .hint(format!(
                                "restart it when convenient: systemctl restart {service} (bulkhead does not restart services)"
                            )),
                        );
                    }
                }
                _ => out.push(
                    Diagnostic::note(format!(
                        "{service} is not installed here: its drop-in takes effect when it is"
                    ))
                    .context(format!("[slice.{slice}] services")),
                ),
            }
        }
        out
    }
}

/// The slice part of a unit's control group (`/system.slice` of
/// `/system.slice/postgresql@15-main.service`).
fn parent_of(cgroup: &str) -> &str {
    match cgroup.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((p, _)) => p,
    }
}
