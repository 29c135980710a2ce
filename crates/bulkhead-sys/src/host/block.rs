//! Block devices: numbers, whole disks, kernel names and their I/O schedulers, from /sys.

use std::fs;

/// A block device number, `MAJ:MIN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct DevNum {
    pub major: u32,
    pub minor: u32,
}

impl std::fmt::Display for DevNum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl DevNum {
    pub(super) fn from_raw(rdev: u64) -> DevNum {
        DevNum {
            major: libc::major(rdev),
            minor: libc::minor(rdev),
        }
    }

    /// The kernel name (`vda`, `loop3`) when /sys knows the device.
    pub fn kernel_name(self) -> Option<String> {
        let link = fs::read_link(format!("/sys/dev/block/{self}")).ok()?;
        Some(link.file_name()?.to_string_lossy().into_owned())
    }

    /// The active I/O scheduler of this disk (`bfq`, `mq-deadline`, `none`).
    pub fn scheduler(self) -> Option<String> {
        let s = fs::read_to_string(format!("/sys/dev/block/{self}/queue/scheduler")).ok()?;
        active_scheduler(&s)
    }
}

/// `none [mq-deadline] kyber bfq` -> `mq-deadline`.
pub fn active_scheduler(line: &str) -> Option<String> {
    let start = line.find('[')?;
    let end = line[start..].find(']')? + start;
    Some(line[start + 1..end].to_string())
}

/// The disks I/O limits can apply to: every device in /sys/block with a queue, except RAM
/// disks (ram, zram) and loop devices with nothing attached.
pub fn disks() -> Vec<DevNum> {
    let Ok(dir) = fs::read_dir("/sys/block") else {
        return vec![];
    };
    let mut out: Vec<DevNum> = dir
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let attached = !n.starts_with("loop") || p.join("loop/backing_file").exists();
            attached && !n.starts_with("ram") && !n.starts_with("zram") && p.join("queue").is_dir()
        })
        .filter_map(|e| {
            let t = fs::read_to_string(e.path().join("dev")).ok()?;
            let (a, b) = t.trim().split_once(':')?;
            Some(DevNum {
                major: a.parse().ok()?,
                minor: b.parse().ok()?,
            })
        })
        .collect();
    out.sort();
    out
}

/// Block devices whose active scheduler is BFQ, by kernel name.
pub fn bfq_devices() -> Vec<String> {
    let Ok(dir) = fs::read_dir("/sys/block") else {
        return vec![];
    };
    let mut out: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter(|e| {
            fs::read_to_string(e.path().join("queue/scheduler"))
                .ok()
                .and_then(|s| active_scheduler(&s))
                .as_deref()
                == Some("bfq")
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// Whether the kernel has the BFQ scheduler at all (built in or loaded).
pub fn bfq_available() -> bool {
    fs::read_dir("/sys/block")
        .map(|d| {
            d.filter_map(|e| e.ok()).any(|e| {
                fs::read_to_string(e.path().join("queue/scheduler"))
                    .map(|s| {
                        s.split_whitespace()
                            .any(|w| w.trim_matches(['[', ']']) == "bfq")
                    })
                    .unwrap_or(false)
            })
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_names() {
        assert_eq!(active_scheduler("none [bfq] kyber").as_deref(), Some("bfq"));
        assert_eq!(active_scheduler("none"), None);
    }
}
