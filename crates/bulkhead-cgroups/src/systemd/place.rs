//! Placing processes through systemd: `run --scope` and `spawn --slice` move bulkhead itself
//! into a new transient scope in the slice (named and described by a [`Joiner`]: a sandbox's
//! scope is delegated, as systemd-nspawn's are); `move` attaches processes to the slice's
//! delegated scope.

use super::bus::{call_failed, short};
use super::props::{Prop, PropValue};
use super::versions;
use super::Systemd;
use crate::backend::{Joiner, PlaceError, Placement};
use bulkhead_plan::SliceName;
use bulkhead_sys::error::{Error, Result};
use std::time::Duration;

/// The properties of the transient scope `who` joins `slice` in, for systemd `version`.
fn scope_properties(
    slice: &SliceName,
    who: &Joiner,
    pid: u32,
    version: versions::Version,
) -> Vec<Prop> {
    let mut properties = vec![
        Prop::new("Description", PropValue::Str(who.description.clone())),
        Prop::new("Slice", PropValue::Str(slice.unit())),
        Prop::new("PIDs", PropValue::Pids(vec![pid])),
    ];
    if who.delegate && version >= versions::DELEGATE_SINCE {
        properties.push(Prop::new("Delegate", PropValue::Bool(true)));
    }
    if version >= versions::COLLECT_MODE_SINCE {
        properties.push(Prop::new(
            "CollectMode",
            PropValue::Str("inactive-or-failed".into()),
        ));
    }
    properties
}

/// The delegated scope `move` puts processes in.
pub fn move_scope(slice: &SliceName) -> String {
    format!("bulkhead-move-{slice}.scope")
}

impl Systemd {
    pub(super) fn join_scope(
        &self,
        slice: &SliceName,
        who: &Joiner,
    ) -> std::result::Result<(), PlaceError> {
        if !self.slice_exists(slice) {
            return Err(PlaceError::MissingSlice(slice.clone()));
        }
        let pid = std::process::id();
        let unit = format!("{}-{pid}.scope", who.prefix);
        let properties = scope_properties(slice, who, pid, self.version());
        self.start_run_scope(&unit, slice, &properties)
            .map_err(PlaceError::Failed)
    }

    fn start_run_scope(&self, unit: &str, slice: &SliceName, properties: &[Prop]) -> Result<()> {
        self.bus.start_transient(unit, properties).map_err(|e| {
            call_failed(&format!("create the scope {unit} in {}", slice.unit()), &e)
        })?;
        match self.bus.wait_settled(unit, Duration::from_secs(30))? {
            Some(s) if s == "active" => Ok(()),
            s => Err(Error::failed(format!(
                "systemd could not start the scope {unit} (it is {})",
                s.unwrap_or_else(|| "gone".into())
            ))),
        }
    }

    /// Attach a process to the slice's delegated scope `bulkhead-move-SLICE.scope`, made with
    /// the first process moved there.
    pub(super) fn move_into_scope(
        &self,
        slice: &SliceName,
        pid: i32,
    ) -> std::result::Result<(), String> {
        if self.version() < versions::ATTACH_SINCE {
            return Err(format!(
                "systemd {} is too old: moving processes needs AttachProcessesToUnit, which came in systemd {} (use --backend cgroupfs on this host)",
                self.bus.version_text,
                versions::ATTACH_SINCE
            ));
        }
        if !self.slice_exists(slice) {
            return Err(format!("slice '{slice}' does not exist"));
        }
        match bulkhead_sys::process::is_kernel_thread(pid) {
            None => return Err("no such process".into()),
            Some(true) => return Err("is a kernel thread; kernel threads cannot be moved".into()),
            Some(false) => {}
        }
        let scope = move_scope(slice);
        let active = self
            .bus
            .unit_state(&scope)
            .map_err(|e| e.to_string())?
            .is_some_and(|st| st.active_state == "active");
        if active {
            return self
                .bus
                .manager()
                .attach_processes_to_unit(&scope, "/", &[pid as u32])
                .map_err(|e| {
                    format!(
                        "systemd refused AttachProcessesToUnit({scope}): {}",
                        short(&e)
                    )
                });
        }
        let properties = vec![
            Prop::new(
                "Description",
                PropValue::Str(format!("Processes moved into {} by bulkhead", slice.unit())),
            ),
            Prop::new("Slice", PropValue::Str(slice.unit())),
            Prop::new("Delegate", PropValue::Bool(true)),
            Prop::new("PIDs", PropValue::Pids(vec![pid as u32])),
            Prop::new("CollectMode", PropValue::Str("inactive-or-failed".into())),
        ];
        self.bus
            .start_transient(&scope, &properties)
            .map_err(|e| format!("systemd refused to create {scope}: {}", short(&e)))?;
        match self.bus.wait_settled(&scope, Duration::from_secs(30)) {
            Ok(Some(s)) if s == "active" => Ok(()),
            Ok(s) => Err(format!(
                "systemd could not start {scope} (it is {})",
                s.unwrap_or_else(|| "gone".into())
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(props: &[Prop]) -> Vec<&str> {
        props.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn a_sandbox_scope_is_delegated_a_run_scope_is_not() {
        let slice = SliceName::parse("db-helper").unwrap();
        let run = scope_properties(&slice, &Joiner::run(&slice), 42, 252);
        assert_eq!(
            names(&run),
            ["Description", "Slice", "PIDs", "CollectMode"],
            "{run:?}"
        );
        assert_eq!(
            run[0].value,
            PropValue::Str("bulkhead run --scope in db-helper.slice".into())
        );
        let spawn = scope_properties(&slice, &Joiner::spawn("/srv/root (sh)"), 42, 252);
        assert_eq!(
            names(&spawn),
            ["Description", "Slice", "PIDs", "Delegate", "CollectMode"]
        );
        assert_eq!(spawn[1].value, PropValue::Str("db-helper.slice".into()));
        assert_eq!(spawn[2].value, PropValue::Pids(vec![42]));
        // Before CollectMode= (236) and Delegate= (218) systemd would refuse the properties.
        let old = scope_properties(&slice, &Joiner::spawn("x"), 42, 217);
        assert_eq!(names(&old), ["Description", "Slice", "PIDs"]);
    }
}
