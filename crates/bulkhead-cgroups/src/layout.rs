//! Which cgroup hierarchy holds which controller: pure v2 (unified), pure v1 (legacy), or
//! hybrid (v1 controllers plus a v2 mount), read from /proc/self/mountinfo.

use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::host::kernel_at_least;
use bulkhead_sys::mountinfo::{self, Mount};
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Everything on one cgroup2 mount.
    Unified,
    /// Only v1 hierarchies.
    Legacy,
    /// v1 controllers plus a cgroup2 mount (which may hold some controllers).
    Hybrid,
}

/// One mounted hierarchy.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Hierarchy {
    pub mount: PathBuf,
    pub version: Version,
    /// v1: the controllers bound to this mount. v2: the root's cgroup.controllers.
    pub controllers: Vec<String>,
}

impl Hierarchy {
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }
    /// A short label: `memory (v1)`, `unified (v2)`.
    pub fn label(&self) -> String {
        match self.version {
            Version::V1 => format!("{} (v1)", self.controllers.join(",")),
            Version::V2 => "unified (v2)".into(),
        }
    }
}

/// The controllers bulkhead manages, by their v2 names.
pub const CONTROLLERS: &[&str] = &["cpu", "cpuset", "memory", "io", "pids", "hugetlb"];

/// What the kernel can do beyond the bare hierarchy layout.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Caps {
    /// cpu.idle exists (kernel 5.15+).
    pub cpu_idle: bool,
    /// The BFQ scheduler is registered, so *.bfq.weight files exist.
    pub bfq: bool,
    /// BFQ can be had: registered, or a module of this kernel that `modprobe bfq` loads.
    /// False where the kernel was built without it (CONFIG_IOSCHED_BFQ not set).
    pub bfq_module: bool,
    /// Disks whose active scheduler is BFQ (weights take effect there), by kernel name (or
    /// `MAJ:MIN`).
    pub bfq_devices: Vec<String>,
    /// v2 io.cost is available (io.weight works without BFQ).
    pub io_cost: bool,
    /// v2 io.latency exists (CONFIG_BLK_CGROUP_IOLATENCY; Debian 12's 6.1 kernel has none).
    pub io_latency: bool,
    /// v1 memory.memsw.* exists (swap accounting).
    pub memsw: bool,
    /// `hugetlb.<size>.rsvd.*` exists.
    pub hugetlb_rsvd: bool,
    /// v2 memory.swap.max exists (swap accounting on).
    pub swap_v2: bool,
    /// A sched_ext scheduler is loaded (its name): it replaces the fair scheduler and
    /// honours cgroup CPU weights and cpu.idle only if it implements them.
    pub sched_ext: Option<String>,
    /// The io controller is on cgroup v2 (io.cost and io.max can exist).
    pub io_v2: bool,
}

impl Caps {
    /// The finding for an I/O weight directive (`IOWeight`, `IODeviceWeight`) of `slice` when
    /// nothing here weighs I/O: no disk uses BFQ and io.cost is not enabled. Both backends
    /// say it (systemd records the weight all the same); None where a weight can act.
    pub fn weight_finding(
        &self,
        directive: &str,
        slice: impl std::fmt::Display,
    ) -> Option<Diagnostic> {
        if !self.bfq_devices.is_empty() || self.io_cost {
            return None;
        }
        Some(
            Diagnostic::warning(format!(
                "{directive} has no effect here: no disk uses the BFQ scheduler and io.cost is not enabled"
            ))
            .context(format!("[slice.{slice}]"))
            .hint(self.weight_hint("DISK")),
        )
    }

    /// What can make I/O weights act on `disk` here, and only that: BFQ where this kernel has
    /// it (loaded, or a module to load), io.cost where the io controller is on v2, and
    /// otherwise the limits every kernel has.
    pub fn weight_hint(&self, disk: &str) -> String {
        let caps = self;
        let mut ways = Vec::new();
        if caps.bfq {
            ways.push(format!("echo bfq > /sys/block/{disk}/queue/scheduler"));
        } else if caps.bfq_module {
            ways.push(format!(
                "modprobe bfq, then echo bfq > /sys/block/{disk}/queue/scheduler"
            ));
        }
        if caps.io_v2 {
            ways.push(
                "enable io.cost on the disk with an [iocost] section (docs/IO-LEVERS.md)".into(),
            );
        }
        if ways.is_empty() {
            return "this kernel has no BFQ (built without CONFIG_IOSCHED_BFQ) and its io controller is on cgroup v1 (no io.cost): cap the other slices instead with IOReadBandwidthMax/IOWriteBandwidthMax/IO*IOPSMax on the database's disk (blkio.throttle, which every kernel has)".into();
        }
        ways.push("or cap the other slices with IOReadBandwidthMax/IOWriteBandwidthMax".into());
        ways.join("; ")
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Layout {
    pub kind: Kind,
    /// v1 hierarchies (empty on a unified host).
    pub v1: Vec<Hierarchy>,
    /// The cgroup2 mount (/sys/fs/cgroup or /sys/fs/cgroup/unified), if any.
    pub unified: Option<Hierarchy>,
    /// Kernel capabilities; `None` until [`Layout::caps`] probes them (only planning needs
    /// them, so `run` and `move` never pay for the probe). Tests set them explicitly.
    pub caps: Option<Caps>,
}

/// v1 controller names -> the v2 names bulkhead uses.
fn v2_name(v1: &str) -> &str {
    match v1 {
        "blkio" => "io",
        other => other,
    }
}

impl Layout {
    /// Read this machine's layout.
    pub fn detect() -> std::io::Result<Layout> {
        Ok(Layout::from_mounts(mountinfo::read()?, Path::new("/")))
    }

    /// Build the layout from mountinfo text; `root` prefixes every mount point (a fixture
    /// tree in tests, `/` for the real system).
    pub fn from_mountinfo(mountinfo: &str, root: &Path) -> Layout {
        Layout::from_mounts(mountinfo::parse(mountinfo.as_bytes()), root)
    }

    fn from_mounts(mounts: Vec<Mount>, root: &Path) -> Layout {
        let mut v1: Vec<Hierarchy> = Vec::new();
        let mut unified = None;
        for m in mounts {
            let point = &m.point;
            let mount = root.join(point.strip_prefix("/").unwrap_or(point));
            match m.fstype.as_str() {
                "cgroup2" => {
                    let controllers = fs::read_to_string(mount.join("cgroup.controllers"))
                        .unwrap_or_default()
                        .split_whitespace()
                        .map(String::from)
                        .collect();
                    unified = Some(Hierarchy {
                        mount,
                        version: Version::V2,
                        controllers,
                    });
                }
                "cgroup" => {
                    let controllers: Vec<String> = m
                        .super_options
                        .split(',')
                        .filter(|o| {
                            matches!(
                                *o,
                                "cpu"
                                    | "cpuacct"
                                    | "cpuset"
                                    | "memory"
                                    | "blkio"
                                    | "pids"
                                    | "hugetlb"
                                    | "freezer"
                                    | "devices"
                                    | "net_cls"
                                    | "net_prio"
                                    | "perf_event"
                                    | "rdma"
                                    | "misc"
                            )
                        })
                        .map(String::from)
                        .collect();
                    if controllers.is_empty() {
                        continue; // name=systemd and other named hierarchies are not ours
                    }
                    if !v1.iter().any(|h| h.mount == mount) {
                        v1.push(Hierarchy {
                            mount,
                            version: Version::V1,
                            controllers,
                        });
                    }
                }
                _ => {}
            }
        }
        let kind = match (&unified, v1.is_empty()) {
            (Some(_), true) => Kind::Unified,
            (None, _) => Kind::Legacy,
            (Some(_), false) => Kind::Hybrid,
        };
        Layout {
            kind,
            v1,
            unified,
            caps: None,
        }
    }

    /// The kernel's capabilities: the ones set on the layout, else probed now.
    pub fn caps(&self) -> Caps {
        self.caps.clone().unwrap_or_else(|| self.probe_caps())
    }

    fn probe_caps(&self) -> Caps {
        let exists = |ctrl: &str, file: &str| {
            self.hierarchy(ctrl)
                .is_some_and(|h| h.mount.join(file).exists())
        };
        let cpu_idle = match self.hierarchy("cpu") {
            Some(h) if h.version == Version::V1 => h.mount.join("cpu.idle").exists(),
            Some(_) => kernel_at_least(5, 15),
            None => false,
        };
        let bfq_devices = bulkhead_sys::host::bfq_devices();
        let io_v2 = self
            .hierarchy("io")
            .is_some_and(|h| h.version == Version::V2);
        // v1 roots carry hugetlb.*.rsvd.* (Linux 5.7+); a v2 root has no hugetlb files at all.
        let hugetlb_rsvd = match self.hierarchy("hugetlb") {
            Some(h) if h.version == Version::V1 => fs::read_dir(&h.mount)
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .any(|e| e.file_name().to_string_lossy().contains(".rsvd."))
                })
                .unwrap_or(false),
            Some(_) => kernel_at_least(5, 7),
            None => false,
        };
        let bfq = bulkhead_sys::host::bfq_available();
        Caps {
            cpu_idle,
            bfq,
            bfq_module: bfq || bulkhead_sys::host::io_scheduler_module("bfq"),
            sched_ext: bulkhead_sys::host::sched_ext_loaded(),
            io_v2,
            bfq_devices,
            // io.cost works only where a device has it enabled, not merely compiled in.
            io_cost: io_v2
                && self.hierarchy("io").is_some_and(|h| {
                    fs::read_to_string(h.mount.join("io.cost.qos"))
                        .is_ok_and(|t| t.contains("enable=1"))
                }),
            swap_v2: self.swap_v2(),
            io_latency: self.io_latency(),
            memsw: exists("memory", "memory.memsw.limit_in_bytes"),
            hugetlb_rsvd,
        }
    }

    /// Whether v2 cgroups get io.latency. It is a file of non-root cgroups only: look at a
    /// child of the v2 root that has the io controller; with none to look at, the kernel's
    /// config (/boot/config-RELEASE) when it says, else assume yes.
    fn io_latency(&self) -> bool {
        let Some(h) = self.hierarchy("io").filter(|h| h.version == Version::V2) else {
            return false;
        };
        let child = fs::read_dir(&h.mount).ok().and_then(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .find(|p| p.join("io.stat").exists())
        });
        match child {
            Some(p) => p.join("io.latency").exists(),
            None => kernel_config("CONFIG_BLK_CGROUP_IOLATENCY").unwrap_or(true),
        }
    }

    /// Whether v2 cgroups get memory.swap.max: look at an existing cgroup with the memory
    /// controller (the root has no memory files); assume yes when there is none to look at.
    fn swap_v2(&self) -> bool {
        let Some(h) = self
            .hierarchy("memory")
            .filter(|h| h.version == Version::V2)
        else {
            return false;
        };
        let Ok(rd) = fs::read_dir(&h.mount) else {
            return true;
        };
        rd.filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.join("memory.current").exists())
            .is_none_or(|p| p.join("memory.swap.max").exists())
    }

    /// The hierarchy that holds a controller (by its v2 name: `io`, not `blkio`).
    pub fn hierarchy(&self, controller: &str) -> Option<&Hierarchy> {
        self.v1
            .iter()
            .find(|h| h.controllers.iter().any(|c| v2_name(c) == controller))
            .or_else(|| self.unified.as_ref().filter(|u| u.has(controller)))
    }

    /// The hierarchy whose membership bulkhead reads first: the unified one where it exists
    /// (it has PSI, cgroup.kill and cgroup.events), else the memory or cpu v1 hierarchy.
    pub fn primary(&self) -> Option<&Hierarchy> {
        self.unified
            .as_ref()
            .or_else(|| self.hierarchy("memory"))
            .or_else(|| self.hierarchy("cpu"))
            .or_else(|| self.v1.first())
    }

    /// The v1 hierarchy with cpuacct (CPU time on v1 hosts).
    pub fn cpuacct(&self) -> Option<&Hierarchy> {
        self.v1.iter().find(|h| h.has("cpuacct"))
    }

    /// A one-line description: `hybrid: cpu,cpuacct,... on v1; hugetlb on v2 (/sys/fs/cgroup/unified)`.
    pub fn describe(&self) -> String {
        let v1: Vec<String> = self.v1.iter().flat_map(|h| h.controllers.clone()).collect();
        let v2 = self
            .unified
            .as_ref()
            .map(|u| {
                let c = if u.controllers.is_empty() {
                    "no controllers".to_string()
                } else {
                    u.controllers.join(",")
                };
                format!("{c} on v2 ({})", u.mount.display())
            })
            .unwrap_or_default();
        match self.kind {
            Kind::Unified => format!("unified: {v2}"),
            Kind::Legacy => format!("legacy: {} on v1", v1.join(",")),
            Kind::Hybrid => format!("hybrid: {} on v1; {v2}", v1.join(",")),
        }
    }
}

/// A `CONFIG_X=y|m` / `# CONFIG_X is not set` line of the running kernel's config, if the
/// config is in /boot.
fn kernel_config(key: &str) -> Option<bool> {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let text = fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()?;
    text.lines().find_map(|l| {
        if l == format!("# {key} is not set") {
            return Some(false);
        }
        let v = l.strip_prefix(key)?.strip_prefix('=')?;
        Some(v == "y" || v == "m")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_detected() {
        let l = Layout::detect().unwrap();
        assert!(l.primary().is_some(), "{l:?}");
    }

    #[test]
    fn an_io_weight_is_a_finding_only_where_nothing_weighs_io() {
        let none = Caps {
            io_v2: true,
            ..Caps::default()
        };
        let d = none.weight_finding("IOWeight", "db-helper").unwrap();
        assert!(
            d.message.starts_with("IOWeight has no effect here"),
            "{d:?}"
        );
        let text = format!("{d:?}");
        assert!(
            text.contains("[slice.db-helper]") && text.contains("io.cost"),
            "{text}"
        );
        let bfq = Caps {
            bfq: true,
            bfq_devices: vec!["vda".into()],
            ..Caps::default()
        };
        assert!(bfq.weight_finding("IOWeight", "x").is_none());
        let cost = Caps {
            io_cost: true,
            ..Caps::default()
        };
        assert!(cost.weight_finding("IODeviceWeight", "x").is_none());
    }

    #[test]
    fn mount_points_keep_non_ascii_names() {
        let l = Layout::from_mountinfo(
            "30 25 0:26 / /sys/fs/cgroup/cpu\\040ü rw - cgroup cgroup rw,cpu\n",
            Path::new("/"),
        );
        assert_eq!(
            l.hierarchy("cpu").unwrap().mount,
            Path::new("/sys/fs/cgroup/cpu ü")
        );
    }
}
