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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_compare() {
        assert!(release_at_least("6.18.0-1-amd64", 5, 15));
        assert!(release_at_least("5.15", 5, 15));
        assert!(!release_at_least("5.4.0", 5, 15));
        assert!(!release_at_least("", 5, 0));
    }
}
