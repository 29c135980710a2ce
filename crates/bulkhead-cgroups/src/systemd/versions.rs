//! Which systemd version knows which directive, in one table: the transient units of
//! `apply` (D-Bus properties) and the unit files of `export systemd` and `apply --persist`
//! both ask [`spelling`] how a directive is written for a given systemd.

/// A version of systemd (the number before the first dot of `systemctl --version`).
pub type Version = u32;

/// The version assumed when none is given: one that knows every directive bulkhead writes.
pub const CURRENT: Version = 252;

/// What systemd versions know a plan directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    /// The first version that takes the directive.
    pub since: Version,
    /// The deprecated cgroup-v1 directive older versions take instead.
    pub legacy: Option<&'static str>,
}

/// The first systemd version for each directive (systemd.resource-control(5)), and the
/// directive versions before it understand. `None`: systemd has no such directive.
pub fn support(directive: &str) -> Option<Support> {
    let s = |since, legacy| Some(Support { since, legacy });
    match directive {
        "Description" => s(1, None),
        "CPUWeight" => s(232, Some("CPUShares")),
        "CPUQuota" => s(213, None),
        "CPUQuotaPeriodSec" => s(242, None),
        "AllowedCPUs" | "AllowedMemoryNodes" => s(244, None),
        "MemoryMin" => s(240, None),
        "MemoryLow" | "MemoryHigh" => s(231, None),
        "MemoryMax" => s(231, Some("MemoryLimit")),
        "MemorySwapMax" => s(232, None),
        "IOWeight" => s(230, Some("BlockIOWeight")),
        "IODeviceWeight" => s(230, Some("BlockIODeviceWeight")),
        "IOReadBandwidthMax" => s(230, Some("BlockIOReadBandwidth")),
        "IOWriteBandwidthMax" => s(230, Some("BlockIOWriteBandwidth")),
        "IOReadIOPSMax" | "IOWriteIOPSMax" => s(230, None),
        // io.latency; v2 only (systemd ignores it on v1 and hybrid, as the kernel has no file).
        "IODeviceLatencyTargetSec" => s(240, None),
        "TasksMax" | "TasksAccounting" => s(227, None),
        "CPUAccounting" | "MemoryAccounting" | "BlockIOAccounting" => s(208, None),
        "IOAccounting" => s(230, Some("BlockIOAccounting")),
        _ => None,
    }
}

/// `CPUWeight=idle` (cpu.idle) came later than CPUWeight itself.
pub const CPU_IDLE_SINCE: Version = 250;
/// Percentages of RAM in memory directives and of the task limit in TasksMax.
pub const PERCENT_SINCE: Version = 231;
/// AttachProcessesToUnit, which `move` uses.
pub const ATTACH_SINCE: Version = 238;
/// AddRef= and Type=exec, which `run` uses to wait for a transient service and read its status.
pub const RUN_SERVICE_SINCE: Version = 240;
/// CollectMode=, so failed transient units are not left behind.
pub const COLLECT_MODE_SINCE: Version = 236;
/// Delegate= on services and scopes (`spawn --slice`'s scope; a list of controllers came in
/// 236, the boolean bulkhead sets in 218).
pub const DELEGATE_SINCE: Version = 218;

/// How a directive is written for one systemd version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// Under its own name.
    Native,
    /// Under the deprecated cgroup-v1 name older versions take instead.
    Legacy(&'static str),
    /// Not at all: this version does not know it (`since`: the first one that does; None:
    /// systemd has no such directive).
    Missing { since: Option<Version> },
}

/// How `directive` is written for systemd `version`.
pub fn spelling(directive: &str, version: Version) -> Spelling {
    match support(directive) {
        Some(s) if s.since <= version => Spelling::Native,
        Some(Support {
            legacy: Some(old), ..
        }) => Spelling::Legacy(old),
        Some(s) => Spelling::Missing {
            since: Some(s.since),
        },
        None => Spelling::Missing { since: None },
    }
}

/// Whether systemd `version` takes `directive` under its own name.
pub fn knows(directive: &str, version: Version) -> bool {
    spelling(directive, version) == Spelling::Native
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_follow_the_version() {
        assert_eq!(spelling("CPUWeight", CURRENT), Spelling::Native);
        assert_eq!(spelling("CPUWeight", 219), Spelling::Legacy("CPUShares"));
        assert_eq!(spelling("MemoryMax", 230), Spelling::Legacy("MemoryLimit"));
        assert_eq!(
            spelling("MemoryHigh", 219),
            Spelling::Missing { since: Some(231) }
        );
        assert_eq!(
            spelling("HugetlbMax", CURRENT),
            Spelling::Missing { since: None }
        );
    }
}
