//! The registry: one entry per on-disk snapshot, written before the copy exists and removed
//! after it is gone, so whatever kills a sandbox, the next start finds and removes what it left.

use super::{is_our_snapshot, remove_snapshot, state_root, SNAPSHOT_PREFIX};
use bulkhead_sys::btrfs::is_subvolume;
use bulkhead_sys::error::{errno_text, io_failed, Result};
use bulkhead_sys::mountinfo::detach_under;
use bulkhead_sys::process;
use bulkhead_sys::statefile;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

static SEQ: AtomicU32 = AtomicU32::new(0);
/// A registry entry is a line and a path: anything larger is not one.
const MAX_ENTRY: u64 = 16 << 10;
static SELF_PID: AtomicU64 = AtomicU64::new(0);
static SELF_START: AtomicU64 = AtomicU64::new(0);

/// This process's start time (field 22 of /proc/self/stat), read once per process.
fn self_start(pid: u32) -> u64 {
    if SELF_PID.load(Ordering::Acquire) == pid as u64 {
        return SELF_START.load(Ordering::Relaxed);
    }
    let start = process::start_time(pid).unwrap_or(0);
    SELF_START.store(start, Ordering::Relaxed);
    SELF_PID.store(pid as u64, Ordering::Release);
    start
}

pub(super) struct Entry {
    /// The registry file `<state_root>/<pid>-<seq>`.
    pub(super) file: PathBuf,
    pub(super) pid: u32,
}

impl Entry {
    /// Create `<pid>-<seq>` (never reusing one) holding the owner and the path of the copy
    /// `disk(pid, seq)` will make: the path is recorded before the copy exists, so a crash at
    /// any point leaves a trace. One file, made with O_EXCL: a single metadata operation.
    pub(super) fn new(disk: impl Fn(u32, u32) -> PathBuf) -> Result<(Entry, PathBuf)> {
        use std::io::Write;
        let root = state_root();
        let pid = std::process::id();
        let mut made_root = false;
        loop {
            let seq = SEQ.fetch_add(1, Ordering::Relaxed);
            let file = root.join(format!("{pid}-{seq}"));
            let opened = statefile::create_new(&file, 0o600);
            match opened {
                Ok(mut f) => {
                    let path = disk(pid, seq);
                    let mut text = format!("{pid} {}\n", self_start(pid)).into_bytes();
                    text.extend_from_slice(path.as_os_str().as_bytes());
                    if let Err(e) = f.write_all(&text) {
                        let _ = statefile::remove_file(&file);
                        return Err(io_failed("cannot write the sandbox state", &file, e));
                    }
                    return Ok((Entry { file, pid }, path));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound && !made_root => {
                    made_root = true;
                    statefile::ensure_dir(&root, 0o755).map_err(|e| {
                        io_failed("cannot create the sandbox state directory", &root, e)
                    })?;
                }
                Err(e) => return Err(io_failed("cannot create the sandbox state", &file, e)),
            }
        }
    }

    pub(super) fn remove(&self) -> io::Result<()> {
        remove_entry(&self.file)
    }
}

/// An entry's owner line and recorded copy: a file `pid start\npath`, or (older layout) a
/// directory with `owner` and `snapshot` files.
fn read_entry(entry: &Path) -> (Option<String>, Option<PathBuf>) {
    if statefile::is_dir(entry) {
        let owner = statefile::read_string(&entry.join("owner"), MAX_ENTRY).ok();
        let disk = statefile::read(&entry.join("snapshot"), MAX_ENTRY)
            .ok()
            .map(|b| PathBuf::from(OsString::from_vec(b)));
        return (owner, disk);
    }
    let Ok(bytes) = statefile::read(entry, MAX_ENTRY) else {
        return (None, None);
    };
    match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => (
            Some(String::from_utf8_lossy(&bytes[..i]).into_owned()),
            (i + 1 < bytes.len())
                .then(|| PathBuf::from(OsString::from_vec(bytes[i + 1..].to_vec()))),
        ),
        None => (None, None),
    }
}

pub(super) fn remove_entry(entry: &Path) -> io::Result<()> {
    if !statefile::is_dir(entry) {
        return statefile::remove_file(entry);
    }
    // The older layout: a directory (maybe with something mounted on or left in it).
    for f in ["snapshot", "owner"] {
        statefile::remove_file(&entry.join(f))?;
    }
    if statefile::remove_dir(entry).is_err() {
        detach_under(entry);
        bulkhead_sys::tree::remove_tree(entry).map_err(|(_, e)| e)?;
    }
    Ok(())
}

/// Remove what dead sandboxes left: for every registry entry whose owner is gone (or whose
/// PID now belongs to another process), unmount what is mounted below it, remove the
/// snapshot it records (only a `.#bulkhead-…-<pid>-<seq>` path) and the entry. Returns one
/// line per thing removed, or per thing that could not be.
///
/// `images` gives the images directory, asked for only once per boot: snapshots there that no
/// registry entry names are orphans of a crash and a reboot.
pub fn clean_stale(images: impl FnOnce() -> Option<PathBuf>) -> Vec<String> {
    let mut out = Vec::new();
    let root = state_root();
    if statefile::ensure_dir(&root, 0o755).is_err() {
        return out;
    }
    let Ok(names) = statefile::names(&root) else {
        return out;
    };
    let mut boot: Option<Option<f64>> = None;
    for name in names {
        let Some((pid, seq)) = name.to_str().and_then(parse_entry_name) else {
            continue;
        };
        let dir = root.join(&name);
        let Some(why) = stale_reason(&dir, pid, &mut boot) else {
            continue;
        };
        let who = format!("sandbox {pid}-{seq} ({why})");
        for m in detach_under(&dir) {
            out.push(format!("unmounted {} of {who}", m.display()));
        }
        if let (_, Some(disk)) = read_entry(&dir) {
            if !is_our_snapshot(&disk, pid, seq) {
                out.push(format!(
                    "left {} alone: not a {SNAPSHOT_PREFIX}*-{pid}-{seq} path ({who})",
                    disk.display()
                ));
            } else if statefile::exists(&disk) {
                for m in detach_under(&disk) {
                    out.push(format!("unmounted {} of {who}", m.display()));
                }
                let subvol = is_subvolume(&disk);
                match remove_snapshot(&disk) {
                    Ok(()) => out.push(format!(
                        "removed the {}snapshot {} of {who}",
                        if subvol { "btrfs " } else { "" },
                        disk.display()
                    )),
                    Err((p, err)) => {
                        out.push(format!(
                            "could not remove the snapshot {} of {who}: {}: {}",
                            disk.display(),
                            p.display(),
                            errno_text(&err)
                        ));
                        continue;
                    }
                }
            }
        }
        match remove_entry(&dir) {
            Ok(()) => out.push(format!("removed the state {} of {who}", dir.display())),
            Err(err) => out.push(format!(
                "could not remove the state {} of {who}: {}",
                dir.display(),
                errno_text(&err)
            )),
        }
    }
    // Orphans can only come from a registry that was lost, i.e. from before this boot: look
    // once per boot (the marker lives in /run), once the images directory can be read.
    let marker = root.join(".orphans-checked");
    if bulkhead_sys::paths::images_paired_with_registry() && !statefile::exists(&marker) {
        if let Some(images) = images() {
            clean_orphans(&images, &root, &mut out);
            let _ = statefile::write_atomic(&marker, b"", 0o644);
        }
    }
    out
}

/// Snapshots in the images directory that no registry entry names. An entry is written before
/// its snapshot exists and removed after it is gone, so these are left by a crash that the
/// registry did not survive (a reboot empties /run).
fn clean_orphans(images: &Path, root: &Path, out: &mut Vec<String>) {
    // Snapshots live in the private directory beside their image (before: beside it).
    let holder = images.join(super::SNAPSHOT_DIR);
    let entries = [images, holder.as_path()].into_iter().flat_map(|d| {
        statefile::names(d)
            .unwrap_or_default()
            .into_iter()
            .map(move |n| d.join(n))
    });
    for disk in entries {
        let Some(n) = disk.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !n.starts_with(SNAPSHOT_PREFIX) {
            continue;
        }
        let mut parts = n.rsplitn(3, '-');
        let (Some(seq), Some(pid)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Some((pid, seq)) = parse_entry_name(&format!("{pid}-{seq}")) else {
            continue;
        };
        if !is_our_snapshot(&disk, pid, seq)
            || statefile::exists(&root.join(format!("{pid}-{seq}")))
        {
            continue;
        }
        detach_under(&disk);
        match remove_snapshot(&disk) {
            // Gone meanwhile: its owner discarded it.
            Ok(()) if !statefile::exists(&disk) => out.push(format!(
                "removed the orphaned snapshot {} (no sandbox state names it: a crash or a reboot left it)",
                disk.display()
            )),
            Ok(()) => {}
            Err((_, err)) if err.kind() == io::ErrorKind::NotFound => {}
            Err((p, err)) => out.push(format!(
                "could not remove the orphaned snapshot {}: {}: {}",
                disk.display(),
                p.display(),
                errno_text(&err)
            )),
        }
    }
}

fn parse_entry_name(name: &str) -> Option<(u32, u32)> {
    let (p, s) = name.split_once('-')?;
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(p) || !all_digits(s) {
        return None;
    }
    Some((p.parse().ok()?, s.parse().ok()?))
}

/// Why the entry's owner is gone, or None while it lives.
fn stale_reason(dir: &Path, name_pid: u32, boot: &mut Option<Option<f64>>) -> Option<String> {
    match read_entry(dir).0 {
        Some(text) => {
            let mut it = text.split_whitespace();
            let pid: Option<u32> = it.next().and_then(|t| t.parse().ok());
            let start: Option<u64> = it.next().and_then(|t| t.parse().ok());
            match (pid, start) {
                (Some(pid), Some(start)) => match process::start_time(pid) {
                    None => Some(format!("process {pid} is gone")),
                    Some(now) if now != start => {
                        Some(format!("PID {pid} belongs to another process now"))
                    }
                    Some(_) => None,
                },
                _ => owner_missing(dir, name_pid, boot),
            }
        }
        None => owner_missing(dir, name_pid, boot),
    }
}

/// An entry without a readable owner is being made or removed, or its owner died in between.
/// It is stale when its PID is gone, or when the process with that PID started after the
/// entry was last changed.
fn owner_missing(dir: &Path, pid: u32, boot: &mut Option<Option<f64>>) -> Option<String> {
    let Some(start) = process::start_time(pid) else {
        return Some(format!("process {pid} is gone"));
    };
    let boot = *boot.get_or_insert_with(process::boot_time);
    let st = statefile::lstat(dir).ok()??;
    let mtime = st.st_mtime as f64 + st.st_mtime_nsec as f64 / 1e9;
    let hz = process::clock_ticks() as f64;
    let started = boot? + start as f64 / hz;
    (started > mtime + 2.0).then(|| format!("PID {pid} belongs to another process now"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names() {
        assert_eq!(parse_entry_name("123-4"), Some((123, 4)));
        for bad in ["123", "-4", "123-", "a-1", "1-2-3", "1-+2", ".tmp"] {
            assert_eq!(parse_entry_name(bad), None, "{bad}");
        }
        assert_eq!(
            self_start(std::process::id()),
            process::start_time(std::process::id()).unwrap()
        );
    }
}
