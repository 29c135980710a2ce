//! Private anonymous memory mappings (mmap MAP_PRIVATE|MAP_ANONYMOUS), owned and read or
//! written as safe slices: on base pages, with huge-page advice (THP), or from a hugetlb pool.
//! Page-aligned and zeroed, so they also serve as buffers for O_DIRECT.

use std::io;
use std::ptr::NonNull;

/// The advice [`AnonMap::advise`] gives the kernel for a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// MADV_NOHUGEPAGE: base pages only.
    NoHugePage,
    /// MADV_HUGEPAGE: transparent huge pages where the kernel can.
    HugePage,
}

/// One mapping, unmapped on drop.
#[derive(Debug)]
pub struct AnonMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by the AnonMap alone; moving it to another thread moves that
// ownership.
unsafe impl Send for AnonMap {}
// SAFETY: a shared reference only reads the memory (writes need `&mut`).
unsafe impl Sync for AnonMap {}

/// The mmap flag that asks the hugetlb pool of `page` bytes (a power of two: 2M, 1G).
fn huge_flag(page: u64) -> io::Result<i32> {
    if !page.is_power_of_two() || page < 4096 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok((page.trailing_zeros() as i32) << libc::MAP_HUGE_SHIFT)
}

impl AnonMap {
    /// `len` bytes of zeroed memory, faulted in as it is touched.
    pub fn new(len: usize) -> io::Result<AnonMap> {
        Self::map(len, 0)
    }

    /// `len` bytes (a multiple of `page`) from the hugetlb pool of `page` bytes, populated
    /// at once: an error when the pool has too few free pages.
    pub fn hugetlb(len: usize, page: u64) -> io::Result<AnonMap> {
        Self::map(
            len,
            libc::MAP_HUGETLB | huge_flag(page)? | libc::MAP_POPULATE,
        )
    }

    /// `len` bytes from the pool of the default huge page size (MAP_HUGETLB, faulted in as
    /// touched): refused when the pool or the cgroup's hugetlb limit has no room.
    pub fn default_hugetlb(len: usize) -> io::Result<AnonMap> {
        Self::map(len, libc::MAP_HUGETLB)
    }

    /// Write one byte every `step` bytes (a page size), so that the kernel backs every page.
    pub fn touch(&mut self, step: usize) {
        let bytes = self.bytes_mut();
        for off in (0..bytes.len()).step_by(step.max(1)) {
            // Volatile, so the write is not dropped: only its page fault matters.
            // SAFETY: `off` is inside the slice, which is this mapping, read-write.
            unsafe { std::ptr::write_volatile(bytes.as_mut_ptr().add(off), 1) };
        }
    }

    fn map(len: usize, flags: i32) -> io::Result<AnonMap> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh private anonymous mapping at an address of the kernel's choosing:
        // no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave 0"))?;
        Ok(AnonMap { ptr, len })
    }

    /// madvise(2) on `len` bytes at `offset` (page-aligned, inside the mapping).
    pub fn advise(&self, offset: usize, len: usize, advice: Advice) -> io::Result<()> {
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.len);
        if !inside || !offset.is_multiple_of(4096) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let advice = match advice {
            Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
            Advice::HugePage => libc::MADV_HUGEPAGE,
        };
        // SAFETY: the range lies inside our own mapping (checked above); these advices change
        // how it is backed, never its contents.
        let r = unsafe { libc::madvise(self.ptr.as_ptr().add(offset).cast(), len, advice) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the mapping starts (to find it in /proc/self/smaps, or to align inside it).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The mapping as 64-bit words (its whole words; a mapping is page-aligned).
    pub fn words(&self) -> &[u64] {
        // SAFETY: page-aligned memory of at least `len / 8` words, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u64>().as_ptr(), self.len / 8) }
    }

    pub fn words_mut(&mut self) -> &mut [u64] {
        // SAFETY: as in `words`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u64>().as_ptr(), self.len / 8) }
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping, of this length; no slice of it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_flags_name_the_page_size() {
        assert_eq!(huge_flag(2 << 20).unwrap(), libc::MAP_HUGE_2MB);
        assert_eq!(huge_flag(1 << 30).unwrap(), libc::MAP_HUGE_1GB);
        assert!(huge_flag(3 << 20).is_err());
        assert!(huge_flag(0).is_err());
    }

    #[test]
    fn a_mapping_is_zeroed_aligned_and_writable() {
        let mut m = AnonMap::new(1 << 20).unwrap();
        assert_eq!(m.addr() % 4096, 0);
        assert_eq!(m.len(), 1 << 20);
        assert!(m.bytes().iter().all(|b| *b == 0));
        m.words_mut()[7] = 42;
        assert_eq!(m.words()[7], 42);
        assert_eq!(m.words().len(), (1 << 20) / 8);
        assert_eq!(m.bytes()[56], 42);
        m.advise(0, 1 << 20, Advice::NoHugePage).unwrap();
    }

    #[test]
    fn a_map_is_touched_page_by_page() {
        let mut m = AnonMap::new(1 << 20).unwrap();
        m.touch(4096);
        assert_eq!(m.bytes()[4096], 1);
        assert_eq!(m.bytes()[4097], 0);
    }

    #[test]
    fn bad_ranges_and_sizes_are_refused() {
        assert!(AnonMap::new(0).is_err());
        let m = AnonMap::new(8192).unwrap();
        assert!(m.advise(4096, 8192, Advice::HugePage).is_err());
        assert!(m.advise(100, 4096, Advice::HugePage).is_err());
        assert!(m.advise(usize::MAX, 2, Advice::HugePage).is_err());
    }
}
