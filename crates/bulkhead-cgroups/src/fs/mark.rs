//! Ownership marks: bulkhead only changes or removes cgroups it created itself.
//!
//! The mark is the extended attribute `trusted.bulkhead` on the cgroup directory (only root
//! can set `trusted.*`, so it cannot be forged by the processes inside). Where a hierarchy
//! refuses extended attributes, a marker file under /run/bulkhead/owned stands in for it;
//! both live exactly as long as the cgroup (until reboot).

use bulkhead_sys::xattr;
use std::path::{Path, PathBuf};

const XATTR: &str = "trusted.bulkhead";
const VALUE: &[u8] = b"owner=bulkhead";

fn marker_file(dir: &Path) -> PathBuf {
    let escaped: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '%' } else { c })
        .collect();
    bulkhead_sys::paths::owned_marks_dir().join(escaped)
}

/// Mark `dir` as created by bulkhead.
pub fn set(dir: &Path) -> std::io::Result<()> {
    match xattr::set(dir, XATTR, VALUE) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            let f = marker_file(dir);
            std::fs::create_dir_all(bulkhead_sys::paths::owned_marks_dir())?;
            std::fs::write(f, VALUE)
        }
        r => r,
    }
}

/// Who made a cgroup, as far as this process can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// It carries bulkhead's mark.
    Bulkhead,
    /// It carries no mark: not bulkhead's.
    Other,
    /// No marker file, and this process cannot read `trusted.*` (no CAP_SYS_ADMIN): the
    /// kernel hides the attribute, so its absence says nothing.
    Unknown,
}

/// Whether this process can read the mark (`trusted.*` needs CAP_SYS_ADMIN), asked once.
pub fn readable() -> bool {
    static READABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READABLE.get_or_init(bulkhead_sys::process::has_cap_sys_admin)
}

/// Who made `dir`. The xattr is read first: where the file system takes it, the marker file
/// is never looked for (one syscall per hierarchy on `run`'s path instead of two).
pub fn owner(dir: &Path) -> Owner {
    let readable = readable();
    if readable && xattr::get(dir, XATTR, 64).is_some_and(|v| v == VALUE) {
        return Owner::Bulkhead;
    }
    if marker_file(dir).exists() {
        Owner::Bulkhead
    } else if readable {
        Owner::Other
    } else {
        Owner::Unknown
    }
}

/// Whether `dir` carries bulkhead's mark (known: [`Owner::Unknown`] is not ours).
pub fn is_ours(dir: &Path) -> bool {
    owner(dir) == Owner::Bulkhead
}

/// Whether `dir` may be bulkhead's: marked, or unknown to a reader without the capability.
/// For reading only (status, plan show), never for a change.
pub fn may_be_ours(dir: &Path) -> bool {
    owner(dir) != Owner::Other
}

/// The refusal to `verb` (adopt, delete) a slice whose mark this process cannot read: the
/// real reason, never "not created by bulkhead".
pub fn cannot_tell(name: &str, dir: &Path, verb: &str) -> bulkhead_sys::error::Diagnostic {
    bulkhead_sys::error::Diagnostic::error(format!(
        "cannot tell whether slice '{name}' was created by bulkhead: reading its trusted.bulkhead mark needs CAP_SYS_ADMIN, which this process lacks; refusing to {verb} it"
    ))
    .at(dir.display().to_string())
    .hint("run bulkhead as root with CAP_SYS_ADMIN (a container or a service with CapabilityBoundingSet= may drop it)")
}

/// Why ownership cannot be verified here, when it cannot.
pub fn unverified() -> Option<String> {
    (!readable()).then(|| {
        format!(
            "ownership not verified: uid {} cannot read bulkhead's trusted.bulkhead mark (only root can: CAP_SYS_ADMIN), so every *.slice cgroup under the root counts; run as root to verify",
            bulkhead_sys::process::euid()
        )
    })
}

/// Forget the marker file of a removed cgroup (the xattr goes with the directory).
pub fn clear(dir: &Path) {
    let _ = std::fs::remove_file(marker_file(dir));
}
