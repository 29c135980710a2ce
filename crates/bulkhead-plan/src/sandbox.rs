//! The vocabulary of sandboxes, shared by `bulkhead spawn`'s options and the plan's socket
//! targets: networks, binds, user ID ranges and snapshot methods. Plain data with parsers.

use std::fmt;
use std::path::PathBuf;

/// Which network the sandbox gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Net {
    /// A new network namespace with only `lo`, and `lo` down.
    None,
    /// A new network namespace with `lo` up.
    #[default]
    Private,
    /// The host's network namespace.
    Host,
}

impl Net {
    /// The spelling `--net` and the plan's `network` take.
    pub fn name(self) -> &'static str {
        match self {
            Net::None => "none",
            Net::Private => "private",
            Net::Host => "host",
        }
    }
}

impl std::str::FromStr for Net {
    type Err = String;
    fn from_str(s: &str) -> Result<Net, String> {
        [Net::None, Net::Private, Net::Host]
            .into_iter()
            .find(|n| n.name() == s)
            .ok_or_else(|| format!("'{s}' is not a network mode (none, private, host)"))
    }
}

/// `--bind SRC:DST[:ro]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub read_only: bool,
}

impl Bind {
    /// `SRC:DST[:ro]`, as `--bind` takes it back.
    pub fn to_arg(&self) -> std::ffi::OsString {
        let mut a = self.src.as_os_str().to_os_string();
        a.push(":");
        a.push(&self.dst);
        if self.read_only {
            a.push(":ro");
        }
        a
    }
}

impl std::str::FromStr for Bind {
    type Err = String;
    fn from_str(s: &str) -> Result<Bind, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let (src, dst, ro) = match parts.as_slice() {
            [src] => (*src, *src, false),
            [src, dst] => (*src, *dst, false),
            [src, dst, opt] => match *opt {
                "ro" => (*src, *dst, true),
                "rw" => (*src, *dst, false),
                _ => {
                    return Err(format!(
                        "'{s}': the option after the second ':' must be ro or rw, not '{opt}'"
                    ))
                }
            },
            _ => return Err(format!("'{s}' is not SRC[:DST[:ro|rw]]")),
        };
        if src.is_empty() || dst.is_empty() {
            return Err(format!("'{s}': empty path"));
        }
        Ok(Bind {
            src: PathBuf::from(src),
            dst: PathBuf::from(dst),
            read_only: ro,
        })
    }
}

/// The size of every tmpfs a sandbox gets (a tmpfs without `size=` may take half the
/// host's RAM): /tmp and each `--tmpfs`, /dev/shm, and the overlay's upper layer, where an
/// ephemeral root's writes go. Bytes. Writing past one fails with ENOSPC inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmpfsSizes {
    pub tmp: u64,
    pub shm: u64,
    pub overlay: u64,
}

impl TmpfsSizes {
    /// 256M for /tmp and each --tmpfs, 64M for /dev/shm (Docker's --shm-size), 1G for the
    /// overlay's upper layer.
    pub const DEFAULT: TmpfsSizes = TmpfsSizes {
        tmp: 256 << 20,
        shm: 64 << 20,
        overlay: 1 << 30,
    };
}

impl Default for TmpfsSizes {
    fn default() -> TmpfsSizes {
        TmpfsSizes::DEFAULT
    }
}

/// The smallest size a sandbox's tmpfs may be given (0 would mean no limit to tmpfs).
pub const MIN_TMPFS: u64 = 1 << 20;

/// A tmpfs size: `64M`, `1G`, `1048576` (bytes), at least 1M.
pub fn parse_tmpfs_size(s: &str) -> Result<u64, String> {
    let n = bulkhead_sys::units::parse_size(s.trim(), 1024)?;
    if n < MIN_TMPFS {
        return Err(format!(
            "'{s}' is too small for a tmpfs: give at least 1M (e.g. \"64M\")"
        ));
    }
    Ok(n)
}

/// The mount options of a sandbox's tmpfs: its mode, its size, and inodes in proportion
/// (one per 4 KiB, at least 4096), so that empty files cannot take unbounded kernel memory.
pub fn tmpfs_options(mode: &str, bytes: u64) -> String {
    format!(
        "mode={mode},size={bytes},nr_inodes={}",
        (bytes / 4096).max(4096)
    )
}

/// A user namespace: IDs 0..size inside are base..base+size outside.
pub use bulkhead_sys::launch::IdRange as UserRange;

/// What `--private-users` (or a socket target's `private_users`) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrivateUsers {
    /// A free 64K range leased at start.
    Auto,
    Range(UserRange),
}

/// `auto` or `BASE[:SIZE]` (SIZE 65536 by default). The error says what was wrong and what
/// to write instead.
pub fn parse_private_users(s: &str) -> Result<PrivateUsers, (String, &'static str)> {
    if s == "auto" {
        return Ok(PrivateUsers::Auto);
    }
    let bad = || {
        (
            format!("'{s}' is not auto or BASE[:SIZE]"),
            "e.g. auto, or 524288:65536",
        )
    };
    let (b, n) = match s.split_once(':') {
        Some((b, n)) => (b, Some(n)),
        None => (s, None),
    };
    let base: u32 = b.parse().map_err(|_| bad())?;
    let size: u32 = match n {
        Some(n) => n.parse().map_err(|_| bad())?,
        None => 0x10000,
    };
    if base == 0 || size == 0 || base.checked_add(size).is_none() {
        return Err((
            format!("'{s}': the range must start above 0 and fit in 32 bits"),
            "root inside is BASE outside; BASE 0 would be the host's root",
        ));
    }
    Ok(PrivateUsers::Range(UserRange { base, size }))
}

/// How a snapshot is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// A btrfs snapshot of a subvolume: constant time, shares everything.
    Btrfs,
    /// A copy whose files share extents with the source (FICLONE), on XFS or btrfs.
    Reflink,
    /// overlayfs: the source as the lower layer, changes in a tmpfs upper layer.
    Overlay,
    /// A full copy (copy_file_range), only when asked for.
    Copy,
}

impl Method {
    pub const ALL: [Method; 4] = [
        Method::Btrfs,
        Method::Reflink,
        Method::Overlay,
        Method::Copy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::Btrfs => "btrfs",
            Method::Reflink => "reflink",
            Method::Overlay => "overlay",
            Method::Copy => "copy",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const VALID_CHOICES: &str = "auto, btrfs, reflink, overlay, copy";

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Method, String> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!("unknown snapshot method '{s}' (valid: btrfs, reflink, overlay, copy)")
            })
    }
}

/// What the caller allows: the best method available, or exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Choice {
    #[default]
    Auto,
    Only(Method),
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Choice::Auto => f.write_str("auto"),
            Choice::Only(m) => m.fmt(f),
        }
    }
}

impl std::str::FromStr for Choice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Choice, String> {
        if s == "auto" {
            return Ok(Choice::Auto);
        }
        s.parse::<Method>()
            .map(Choice::Only)
            .map_err(|_| format!("unknown snapshot method '{s}' (valid: {VALID_CHOICES})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmpfs_sizes_are_bounded_and_spelled_for_mount() {
        assert_eq!(parse_tmpfs_size("64M"), Ok(64 << 20));
        assert_eq!(parse_tmpfs_size(" 2G "), Ok(2 << 30));
        assert!(parse_tmpfs_size("0").unwrap_err().contains("at least 1M"));
        assert!(parse_tmpfs_size("512K").is_err());
        assert!(parse_tmpfs_size("lots").is_err());
        assert!(parse_tmpfs_size("99999999999999999999999G").is_err());
        assert_eq!(
            tmpfs_options("1777", 64 << 20),
            "mode=1777,size=67108864,nr_inodes=16384"
        );
        assert_eq!(
            tmpfs_options("0755", 1 << 20),
            "mode=0755,size=1048576,nr_inodes=4096"
        );
    }

    #[test]
    fn method_and_choice_names_round_trip() {
        for m in Method::ALL {
            assert_eq!(m.to_string().parse::<Method>().unwrap(), m);
            assert_eq!(m.to_string().parse::<Choice>().unwrap(), Choice::Only(m));
        }
        assert_eq!("auto".parse::<Choice>().unwrap(), Choice::Auto);
        assert_eq!(Choice::Auto.to_string(), "auto");
        let e = "zfs".parse::<Choice>().unwrap_err();
        assert!(
            e.contains("'zfs'") && e.contains("auto, btrfs, reflink, overlay, copy"),
            "{e}"
        );
        assert!("Btrfs".parse::<Method>().is_err());
    }

    #[test]
    fn binds_and_networks() {
        let b: Bind = "/a:/b:ro".parse().unwrap();
        assert_eq!(
            (b.src, b.dst, b.read_only),
            ("/a".into(), "/b".into(), true)
        );
        assert!("/a:/b:xx".parse::<Bind>().is_err());
        assert_eq!("host".parse::<Net>().unwrap(), Net::Host);
    }
}
