//! Device arguments (`/dev/vda`, `/var/lib/postgresql`) as the whole disks the host facts
//! resolved them to. The plan reads no device itself: [`crate::Plan::device_paths`] lists what
//! to look up, `Host::look_up_devices` does it with the other host facts, and resolving only
//! reads the answers here.

use bulkhead_sys::host::{DevNum, Host};

/// What to do when a device argument leads nowhere.
pub(crate) const HINT: &str = "name a block device (/dev/vda, /dev/disk/by-id/...), a partition of it, or a path on its file system (/var/lib/postgresql), as systemd takes them";

/// A device argument as (whole disk, how the path led there), from the host facts.
pub(crate) fn look_up(host: &Host, dev: &str) -> Result<(DevNum, String), String> {
    match host.devices.get(dev) {
        Some(Ok(d)) if d.via.is_empty() => Ok((d.dev, format!("device {}", d.dev))),
        Some(Ok(d)) => Ok((d.dev, format!("device {}: {dev} {}", d.dev, d.via))),
        Some(Err(m)) => Err(m.clone()),
        None => Err(format!(
            "'{dev}' was not looked up on this host (bulkhead resolved the plan without its device facts: please report this)"
        )),
    }
}
