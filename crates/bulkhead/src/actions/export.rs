//! `export systemd`: the plan as unit files for a given systemd version and host size.

use super::show::HostOverride;
use super::Context;
use bulkhead_cgroups::systemd::bus::Bus;
use bulkhead_cgroups::systemd::export::{self, Export, Written};
use bulkhead_cgroups::systemd::versions::{Version, CURRENT};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::path::Path;

/// The systemd version to write for: the one given, else this host's if it answers, else
/// the current one.
pub fn version(asked: Option<u32>) -> Result<Version> {
    match asked {
        Some(v) if v < 200 => Err(Error::invalid(
            Diagnostic::error(format!(
                "--systemd-version {v}: bulkhead writes unit files for systemd 200 and newer"
            ))
            .hint(
                "give the number `systemctl --version` prints on the target host, e.g. 219 or 252",
            ),
        )),
        Some(v) => Ok(v),
        None if bulkhead_sys::host::pid1_is_systemd() => {
            Ok(Bus::connect().map(|b| b.version).unwrap_or(CURRENT))
        }
        None => Ok(CURRENT),
    }
}

/// The unit files for the plan (nothing is written).
pub fn unit_files(cx: &Context, version: Version, memory: Option<String>) -> Result<Export> {
    let plan = cx.load_plan()?;
    let mut host = HostOverride { memory, cpus: None }.host()?;
    host.look_up_devices(plan.device_paths());
    export::unit_files(&plan, &host, version)
}

/// Write them into `dir`.
pub fn write(dir: &Path, files: &Export) -> Result<Written> {
    export::write(dir, files)
}
