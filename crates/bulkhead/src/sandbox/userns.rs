//! `--private-users auto`: a 64K range of host IDs for each live sandbox, never shared by two
//! of them. A lease is a file `/run/bulkhead/userns/<base>` holding its owner (PID and start
//! time), created under a lock, removed when the sandbox ends; a lease whose owner is gone is
//! taken over. As systemd-nspawn, ranges come from 0x80000-0x6FFEFFFF; ranges that
//! /etc/subuid or /etc/subgid give to users are skipped, and when they give ranges to the user
//! `bulkhead`, only those are used (as podman uses the `containers` entries).

use super::UserRange;
use bulkhead_sys::error::{io_failed, Diagnostic, Error, Result};
use bulkhead_sys::process::start_time;
use bulkhead_sys::statefile;
use std::io::Write;
use std::path::{Path, PathBuf};

/// IDs per sandbox: root inside is the range's first, and 65536 IDs cover every ID a
/// distribution's files use.
pub const RANGE: u32 = 0x10000;
const FIRST: u32 = 0x80000;
const END: u32 = 0x6FFF_0000;
/// The user whose subordinate ranges, when listed, are bulkhead's to hand out.
const OWNER: &str = "bulkhead";

/// A range held for one sandbox; the lease is given up on drop.
#[derive(Debug)]
pub struct Lease {
    pub range: UserRange,
    file: PathBuf,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = statefile::remove_file(&self.file);
    }
}

/// The lease directory: `/run/bulkhead/userns`.
pub fn leases_dir() -> PathBuf {
    bulkhead_sys::paths::runtime_dir().join("userns")
}

/// Take a free range.
pub fn allocate() -> Result<Lease> {
    let dir = leases_dir();
    statefile::ensure_dir(&dir, 0o755).map_err(|e| io_failed("cannot create", &dir, e))?;
    let lock_path = dir.join(".lock");
    let lock = statefile::open_lock(&lock_path, 0o600)
        .map_err(|e| io_failed("cannot open", &lock_path, e))?;
    bulkhead_sys::process::lock_file(&lock, true)
        .map_err(|e| io_failed("cannot lock", &lock_path, e))?;
    let slots = candidates(&read_ids("/etc/subuid"), &read_ids("/etc/subgid"));
    let start = std::process::id() as usize;
    for i in 0..slots.len() {
        let base = slots[(start + i) % slots.len()];
        let file = dir.join(base.to_string());
        if held(&file) {
            continue;
        }
        let _ = statefile::remove_file(&file);
        let mut f = statefile::create_new(&file, 0o644)
            .map_err(|e| io_failed("cannot create the lease", &file, e))?;
        let pid = std::process::id();
        writeln!(f, "{pid} {}", start_time(pid).unwrap_or(0))
            .map_err(|e| io_failed("cannot write the lease", &file, e))?;
        return Ok(Lease {
            range: UserRange { base, size: RANGE },
            file,
        });
    }
    Err(Error::failed_with(
        Diagnostic::error(format!(
            "--private-users auto: every range is taken ({} live sandboxes hold one each)",
            slots.len()
        ))
        .hint(format!(
            "end some sandboxes, or give more ranges to the user {OWNER} in /etc/subuid and /etc/subgid"
        )),
    ))
}

/// A lease whose owner still runs (the same PID with the same start time).
fn held(file: &Path) -> bool {
    let Ok(text) = statefile::read_string(file, 4096) else {
        return false;
    };
    let mut it = text.split_whitespace().map(|t| t.parse::<u64>().ok());
    match (it.next().flatten(), it.next().flatten()) {
        (Some(pid), Some(start)) => u32::try_from(pid)
            .ok()
            .and_then(start_time)
            .is_some_and(|s| s == start),
        _ => false,
    }
}

/// `name:start:count` lines of a subordinate ID file (missing file: none).
fn read_ids(path: &str) -> Vec<(String, u64, u64)> {
    parse_ids(&statefile::read_string(Path::new(path), 16 << 20).unwrap_or_default())
}

fn parse_ids(text: &str) -> Vec<(String, u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let (name, start, count) = (f.next()?, f.next()?, f.next()?);
            Some((name.to_string(), start.parse().ok()?, count.parse().ok()?))
        })
        .filter(|(_, _, count)| *count > 0)
        .collect()
}

/// The bases of the ranges bulkhead may hand out: inside `bulkhead`'s subordinate ranges
/// (both files) when it has some, else the default span less every listed range.
fn candidates(subuid: &[(String, u64, u64)], subgid: &[(String, u64, u64)]) -> Vec<u32> {
    let own = |l: &[(String, u64, u64)]| -> Vec<(u64, u64)> {
        l.iter()
            .filter(|(n, _, _)| n == OWNER)
            .map(|(_, s, c)| (*s, s + c))
            .collect()
    };
    let (own_u, own_g) = (own(subuid), own(subgid));
    let inside = |base: u64, spans: &[(u64, u64)]| {
        spans
            .iter()
            .any(|(s, e)| *s <= base && base + RANGE as u64 <= *e)
    };
    let overlaps = |base: u64| {
        subuid
            .iter()
            .chain(subgid)
            .any(|(_, s, c)| base < s + c && *s < base + RANGE as u64)
    };
    if !own_u.is_empty() && !own_g.is_empty() {
        let mut bases: Vec<u32> = own_u
            .iter()
            .flat_map(|(s, e)| (*s..*e).step_by(RANGE as usize))
            .filter(|b| inside(*b, &own_u) && inside(*b, &own_g))
            .filter_map(|b| u32::try_from(b).ok())
            .filter(|b| *b > 0 && b.checked_add(RANGE).is_some())
            .collect();
        bases.dedup();
        return bases;
    }
    (FIRST..END)
        .step_by(RANGE as usize)
        .filter(|b| !overlaps(*b as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_ranges_are_skipped_and_bulkheads_own_are_used() {
        let users = parse_ids("alice:524288:65536\nbob:589824:131072\n# junk\n");
        let c = candidates(&users, &users);
        assert_eq!(
            c[0],
            0x80000 + 3 * RANGE,
            "alice's and bob's ranges are skipped"
        );
        assert!(c.iter().all(|b| *b as u64 + RANGE as u64 <= END as u64));
        let own = parse_ids("bulkhead:1000000000:200000\n");
        let c = candidates(&own, &own);
        assert_eq!(c, vec![1_000_000_000, 1_000_065_536, 1_000_131_072]);
        // Listed for uids only: not usable (the gids would be anyone's).
        assert_eq!(candidates(&own, &[])[0], FIRST);
    }
}
