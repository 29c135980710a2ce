//! The running kernel's release, and version checks on it.

/// `/proc/sys/kernel/osrelease`, trimmed (empty when it cannot be read).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Whether a release string (`6.18.0-foo`) is at least `major.minor`.
pub fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut it = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// Whether the running kernel is at least `major.minor` (false when unknown).
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    release_at_least(&kernel_release(), major, minor)
}

/// The sched_ext scheduler the kernel runs now (its ops name, `scx_rusty`), if one is
/// loaded: such a BPF scheduler replaces EEVDF for the tasks it takes and honours cgroup CPU
/// weights and cpu.idle only if it implements them (most do not, sched-ext/scx#3549).
pub fn sched_ext_loaded() -> Option<String> {
    sched_ext_at(std::path::Path::new("/sys/kernel/sched_ext"))
}

/// [`sched_ext_loaded`] read from a sysfs directory (a fixture in tests): `state` is
/// `enabled` while one runs, `root/ops` names it.
pub fn sched_ext_at(dir: &std::path::Path) -> Option<String> {
    let state = std::fs::read_to_string(dir.join("state")).ok()?;
    if state.trim() != "enabled" {
        return None;
    }
    let ops = std::fs::read_to_string(dir.join("root/ops")).unwrap_or_default();
    let ops = ops.trim();
    Some(if ops.is_empty() { "unknown" } else { ops }.to_string())
}

/// Whether this kernel can have a block I/O scheduler `name` (`bfq`): built in, or a module
/// in /lib/modules/RELEASE that `modprobe` would load. False when it was built without it
/// (CONFIG_IOSCHED_BFQ not set), or when the module tree is missing (a container, a kernel
/// booted without its modules).
pub fn io_scheduler_module(name: &str) -> bool {
    let dir = std::path::Path::new("/lib/modules").join(kernel_release());
    ["modules.builtin", "modules.dep"].iter().any(|f| {
        std::fs::read_to_string(dir.join(f))
            .map(|t| t.lines().any(|l| names_module(l, name)))
            .unwrap_or(false)
    })
}

/// Whether a modules.dep or modules.builtin line is module `name` (`kernel/block/bfq.ko`,
/// `kernel/block/bfq.ko.xz: ...`).
fn names_module(line: &str, name: &str) -> bool {
    let path = line.split(':').next().unwrap_or("");
    let file = path.rsplit('/').next().unwrap_or("");
    file.strip_prefix(name)
        .and_then(|r| r.strip_prefix(".ko"))
        .is_some_and(|r| r.is_empty() || r.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_lines() {
        assert!(names_module("kernel/block/bfq.ko", "bfq"));
        assert!(names_module("kernel/block/bfq.ko.xz: kernel/x.ko", "bfq"));
        assert!(!names_module("kernel/block/bfqx.ko", "bfq"));
        assert!(!names_module(
            "kernel/drivers/x.ko: kernel/block/bfq.ko",
            "bfq"
        ));
    }

    #[test]
    fn a_loaded_sched_ext_scheduler_is_named() {
        let d = std::env::temp_dir().join(format!("bh-scx-{}", std::process::id()));
        std::fs::create_dir_all(d.join("root")).unwrap();
        assert_eq!(sched_ext_at(&d.join("absent")), None);
        std::fs::write(d.join("state"), "disabled\n").unwrap();
        assert_eq!(sched_ext_at(&d), None);
        std::fs::write(d.join("state"), "enabled\n").unwrap();
        std::fs::write(d.join("root/ops"), "scx_rusty\n").unwrap();
        assert_eq!(sched_ext_at(&d).as_deref(), Some("scx_rusty"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn releases_compare() {
        assert!(release_at_least("6.18.0-1-amd64", 5, 15));
        assert!(release_at_least("5.15", 5, 15));
        assert!(!release_at_least("5.4.0", 5, 15));
        assert!(!release_at_least("", 5, 0));
    }
}
