//! The table the readers share: one mapping per backing (4K, THP, hugetlb 2M or 1G), every
//! page faulted in before anything is timed, and the random whole-row reads that are timed.

use super::{Backing, ONE_G, TWO_M};
use bulkhead_sys::anonmap::{Advice, AnonMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One mapped table: `len` bytes at word `start` of its mapping (THP aligns it inside a
/// larger one).
pub(super) struct Table {
    map: AnonMap,
    start: usize,
    len: usize,
}

impl Table {
    pub(super) fn new(backing: Backing, size: u64) -> Result<Table, String> {
        let len = match backing {
            Backing::Huge1G => size.div_ceil(ONE_G) * ONE_G,
            _ => size,
        } as usize;
        let (map, start) = match backing {
            Backing::Base => {
                let map = AnonMap::new(len).map_err(|e| format!("mmap {len} bytes: {e}"))?;
                let _ = map.advise(0, len, Advice::NoHugePage);
                (map, 0)
            }
            Backing::Thp => {
                let map_len = len + TWO_M as usize;
                let map =
                    AnonMap::new(map_len).map_err(|e| format!("mmap {map_len} bytes: {e}"))?;
                let start = map.addr().div_ceil(TWO_M as usize) * TWO_M as usize - map.addr();
                map.advise(start, len, Advice::HugePage)
                    .map_err(|e| format!("madvise(MADV_HUGEPAGE): {e}"))?;
                (map, start)
            }
            Backing::Huge2M | Backing::Huge1G => {
                let map = AnonMap::hugetlb(len, backing.page()).map_err(|e| {
                    format!(
                        "mmap(MAP_HUGETLB) of {}: {e} (the pool has too few free pages)",
                        bulkhead::units::human_bytes(len as u64)
                    )
                })?;
                (map, 0)
            }
        };
        let mut t = Table {
            map,
            start: start / 8,
            len,
        };
        // Touch every cache line so every page is faulted in before anything is timed.
        for (i, w) in t.words_mut().iter_mut().enumerate().step_by(8) {
            *w = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        Ok(t)
    }

    fn words(&self) -> &[u64] {
        &self.map.words()[self.start..self.start + self.len / 8]
    }

    fn words_mut(&mut self) -> &mut [u64] {
        let (start, end) = (self.start, self.start + self.len / 8);
        &mut self.map.words_mut()[start..end]
    }

    /// Share of the table on huge pages (THP or hugetlb), from /proc/self/smaps.
    pub(super) fn huge_coverage(&self) -> f64 {
        let vmas = bulkhead::actions::hugepages::own_vmas();
        let lo = self.words().as_ptr() as u64;
        let hi = lo + self.len as u64;
        let huge: u64 = vmas
            .iter()
            .filter(|v| v.start < hi && v.end > lo)
            .map(|v| v.anon_huge + v.hugetlb)
            .sum();
        huge as f64 / self.len as f64
    }
}

/// Read random whole rows until told to stop. Returns rows read and the time taken.
fn reader(t: &Table, row: usize, mut x: u64, stop: &AtomicBool) -> (u64, Duration) {
    let words = row / 8;
    let rows = (t.len / row) as u64;
    let batch = (256 * 1024 / row).max(1);
    let table = t.words();
    let start = Instant::now();
    let mut n = 0u64;
    let mut acc = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..batch {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = ((x as u128 * rows as u128) >> 64) as usize;
            // r < rows, so the row lies inside the table.
            for w in &table[r * words..(r + 1) * words] {
                acc = acc.wrapping_add(*w);
            }
        }
        n += batch as u64;
    }
    std::hint::black_box(acc);
    (n, start.elapsed())
}

/// Rows per second over all threads.
pub(super) fn measure(t: &Table, row: usize, threads: usize, d: Duration, seed: u64) -> f64 {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let stop = &stop;
                s.spawn(move || {
                    reader(
                        t,
                        row,
                        seed ^ ((i as u64 + 1) * 0x2545_F491_4F6C_DD1D),
                        stop,
                    )
                })
            })
            .collect();
        std::thread::sleep(d);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| h.join().unwrap_or((0, Duration::from_secs(1))))
            .map(|(n, el)| n as f64 / el.as_secs_f64())
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_4k_table_is_read_and_has_no_huge_pages() {
        let t = Table::new(Backing::Base, 8 << 20).unwrap();
        assert_eq!(t.huge_coverage(), 0.0);
        let rate = measure(&t, 128, 1, Duration::from_millis(20), 7);
        assert!(rate > 1000.0, "{rate} rows/s");
    }
}
