//! Which pods stall on this node: the kubelet's pod cgroups (`pod<UID>` with the cgroupfs
//! driver, `kubepods-<qos>-pod<UID>.slice` with systemd), below its QoS cgroups on the
//! unified hierarchy, each read for its pressure (cpu, memory, io), the worst few kept for
//! the BulkheadNode beside the protected slice's stall. The pressure is the kernel's, read
//! from the cgroup files, so it needs no kubelet API (the kubelet's summary API has it per
//! pod from 1.36).

use crate::crd::{PodStall, SlicePsi};
use crate::kubelet::{self, KubeletConfig};
use bulkhead::actions::status;
use std::path::Path;

/// The most pods a report names, worst first.
pub const MAX_REPORTED: usize = 5;
/// The most pod cgroups read in one pass (a kubelet runs 110 pods by default).
const MAX_PODS: usize = 1024;
/// The longest pod UID taken from a cgroup's name (a UID is 36 characters; a static pod's
/// is its manifest's 32-digit hash).
const MAX_UID: usize = 64;

/// The kubelet's QoS cgroups below the unified mount, each with the class of the pods
/// directly in it (guaranteed pods sit in kubepods itself), as its configuration names them.
fn qos_dirs(cfg: &KubeletConfig) -> Vec<(&'static str, String)> {
    let systemd = cfg.systemd();
    let root = cfg
        .cgroup_root
        .as_deref()
        .and_then(|r| kubelet::cgroup_path(r, systemd));
    if cfg.cgroups_per_qos == Some(false) {
        return vec![("", root.unwrap_or_default())];
    }
    let under = |p: String| match &root {
        Some(r) => format!("{r}/{p}"),
        None => p,
    };
    if systemd {
        // A slice's children carry its name: kubepods below a.slice is a-kubepods.slice.
        let prefix = root
            .as_deref()
            .and_then(|r| r.rsplit('/').next())
            .and_then(|s| s.strip_suffix(".slice"))
            .map_or(String::new(), |s| format!("{s}-"));
        let pods = format!("{prefix}kubepods");
        let class = |c: &str| under(format!("{pods}.slice/{pods}-{c}.slice"));
        vec![
            ("guaranteed", under(format!("{pods}.slice"))),
            ("burstable", class("burstable")),
            ("besteffort", class("besteffort")),
        ]
    } else {
        vec![
            ("guaranteed", under("kubepods".into())),
            ("burstable", under("kubepods/burstable".into())),
            ("besteffort", under("kubepods/besteffort".into())),
        ]
    }
}

/// The pod UID a pod cgroup's name carries (`pod<UID>`, `kubepods-burstable-pod<UID>.slice`
/// with the UID's dashes as underscores); None for any other name.
fn pod_uid(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".slice").unwrap_or(name);
    let at = stem.rfind("pod")?;
    if at > 0 && !stem[..at].ends_with('-') {
        return None;
    }
    let uid = stem[at + 3..].replace('_', "-");
    let ok = (1..=MAX_UID).contains(&uid.len())
        && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then_some(uid)
}

/// The pods below `unified` (the cgroup2 mount) whose tasks waited in the last 10 s, worst
/// first, at most [`MAX_REPORTED`].
pub fn stalls(unified: &Path, cfg: &KubeletConfig) -> Vec<PodStall> {
    let mut found = Vec::new();
    let mut read = 0;
    for (qos, rel) in qos_dirs(cfg) {
        let Ok(entries) = std::fs::read_dir(unified.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let Some(uid) = e.file_name().to_str().and_then(pod_uid) else {
                continue;
            };
            if read == MAX_PODS {
                break;
            }
            read += 1;
            let Some(worst) =
                status::pressure_of(&e.path()).and_then(|p| SlicePsi::from(&p).worst(&uid))
            else {
                continue;
            };
            found.push(PodStall {
                uid,
                qos: qos.to_string(),
                resource: worst.resource,
                some_avg10: worst.some_avg10,
                full_avg10: worst.full_avg10,
            });
        }
    }
    found.retain(|s| s.some_avg10 > 0.0);
    found.sort_by(|a, b| {
        b.some_avg10
            .total_cmp(&a.some_avg10)
            .then_with(|| a.uid.cmp(&b.uid))
    });
    found.truncate(MAX_REPORTED);
    found
}

#[cfg(test)]
mod tests;
