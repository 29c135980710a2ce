//! A private anonymous memory map (optionally of huge pages), unmapped on drop: the memory a
//! test's or a benchmark's child process allocates and touches page by page.

use std::num::NonZeroUsize;
use std::ptr::NonNull;

/// `len` bytes of private anonymous memory, read-write.
pub struct AnonMap {
    ptr: NonNull<std::ffi::c_void>,
    len: NonZeroUsize,
}

impl AnonMap {
    /// Map `len` bytes (at least one); with `hugetlb`, of the default huge page size
    /// (MAP_HUGETLB: refused when the pool or the cgroup's hugetlb limit has no room).
    pub fn new(len: usize, hugetlb: bool) -> std::io::Result<AnonMap> {
        use rustix::mm::{mmap_anonymous, MapFlags, ProtFlags};
        let len = NonZeroUsize::new(len)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty map"))?;
        let flags = if hugetlb {
            MapFlags::PRIVATE | MapFlags::HUGETLB
        } else {
            MapFlags::PRIVATE
        };
        // SAFETY: a fresh anonymous map at an address the kernel picks: no existing memory
        // is touched or aliased.
        let p = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len.get(),
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
            )
        }?;
        let ptr = NonNull::new(p).ok_or_else(|| std::io::Error::other("mmap gave NULL"))?;
        Ok(AnonMap { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len.get()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Write one byte every `step` bytes (a page size), so that the kernel backs every page.
    pub fn touch(&mut self, step: usize) {
        let p = self.ptr.as_ptr().cast::<u8>();
        for off in (0..self.len.get()).step_by(step.max(1)) {
            // SAFETY: off < len, inside the map this value owns, mapped read-write.
            unsafe { p.add(off).write_volatile(1) };
        }
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: the map this value made, of its length; no reference into it outlives
        // self (touch takes &mut self and keeps none).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr(), self.len.get()) };
    }
}

#[cfg(test)]
mod tests {
    use super::AnonMap;

    #[test]
    fn a_map_is_touched_page_by_page_and_an_empty_one_refused() {
        let mut m = AnonMap::new(1 << 20, false).unwrap();
        assert_eq!(m.len(), 1 << 20);
        m.touch(4096);
        let e = AnonMap::new(0, false)
            .err()
            .expect("an empty map is refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }
}
