//! The machine the table runs on: its THP mode, and the hugetlb pools grown for
//! the run (through [`Env`], which gives them back).

use crate::env::Env;
use bulkhead::actions::hugepages;

pub(super) fn thp_mode() -> String {
    hugepages::thp_mode().unwrap_or_else(|| "unavailable".into())
}

/// Grow a pool so `pages` are free for the bench; `Err` says why not.
pub(super) fn reserve(env: &mut Env, size: u64, pages: u64) -> Result<u64, String> {
    let pool = hugepages::pools()
        .into_iter()
        .find(|p| p.size == size)
        .ok_or_else(|| {
            format!(
                "this kernel has no {} pool",
                bulkhead::units::human_bytes(size)
            )
        })?;
    let avail = pool.available();
    if avail >= pages {
        return Ok(0);
    }
    let want = pool.total + (pages - avail);
    let r = env.set_pool(size, want)?;
    if r.got < want {
        let got = r.got.saturating_sub(pool.total);
        let _ = env.set_pool(size, pool.total);
        return Err(format!(
            "only {got} of {} {} pages could be had{} ({})",
            pages - avail,
            bulkhead::units::human_bytes(size),
            if r.compacted {
                " after compacting memory"
            } else {
                ""
            },
            hugepages::boot_hint(size, pool.total + pages - avail)
        ));
    }
    Ok(want - pool.total)
}
