//! Which allocator a program uses (from its ELF file) and how its huge page switch is spelled:
//! what `run --hugepages` sets, and what `hugepages usage` explains a miss with.

use std::path::Path;

/// The allocator a program uses, as far as its binary tells.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Allocator {
    Glibc,
    /// jemalloc, configured through this environment variable.
    Jemalloc(String),
    Tcmalloc,
    /// Not a dynamically linked glibc program (a script, a static or Go binary).
    Other(String),
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The DT_NEEDED libraries of a 64-bit little-endian ELF file (`None`: not one, or no
/// dynamic section, i.e. statically linked).
pub fn elf_needed(b: &[u8]) -> Option<Vec<String>> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    if !b.starts_with(b"\x7fELF") || b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return None;
    }
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let h = phoff + i * phentsize;
        let (kind, offset, vaddr, filesz) =
            (u32_at(h)?, u64_at(h + 8)?, u64_at(h + 16)?, u64_at(h + 32)?);
        match kind {
            1 => loads.push((vaddr, offset, filesz)),
            2 => dynamic = Some((offset as usize, filesz as usize)),
            _ => {}
        }
    }
    let (doff, dsize) = dynamic?;
    let mut needed = Vec::new();
    let mut strtab = None;
    for e in (doff..doff + dsize).step_by(16) {
        let (tag, val) = (u64_at(e)?, u64_at(e + 8)?);
        match tag {
            0 => break,
            1 => needed.push(val),
            5 => strtab = Some(val),
            _ => {}
        }
    }
    // DT_STRTAB is an address: find the file offset through the loadable segments.
    let addr = strtab?;
    let (va, off, _) = loads
        .iter()
        .find(|(va, _, sz)| addr >= *va && addr < va + sz)?;
    let base = (addr - va + off) as usize;
    Some(
        needed
            .iter()
            .filter_map(|n| {
                let s = b.get(base + *n as usize..)?;
                let end = s.iter().position(|c| *c == 0)?;
                Some(String::from_utf8_lossy(&s[..end]).into_owned())
            })
            .collect(),
    )
}

/// Look at the program file: which allocator does it link or carry?
pub fn detect_allocator(program: &Path) -> Allocator {
    let Ok(bytes) = std::fs::read(program) else {
        return Allocator::Other("unreadable".into());
    };
    if bytes.starts_with(b"#!") {
        let line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
        return Allocator::Other(format!(
            "a script ({}); its interpreter's allocator decides",
            String::from_utf8_lossy(line).trim()
        ));
    }
    if !bytes.starts_with(b"\x7fELF") {
        return Allocator::Other("not an ELF binary".into());
    }
    let needed = elf_needed(&bytes).unwrap_or_default();
    let links = |lib: &str| needed.iter().any(|n| n.starts_with(lib));
    // jemalloc built into the program: its messages start with "<jemalloc>"; built with the
    // je_ prefix (Redis from source) it reads JE_MALLOC_CONF. The marker is put together at
    // run time (black_box keeps the compiler from folding it) so that bulkhead's own binary
    // does not contain it.
    let marker = [
        std::hint::black_box(b"<jem".as_slice()),
        std::hint::black_box(b"alloc>".as_slice()),
    ]
    .concat();
    if links("libjemalloc.so") {
        Allocator::Jemalloc("MALLOC_CONF".into())
    } else if contains(&bytes, &marker) {
        if contains(&bytes, b"JE_MALLOC_CONF") {
            Allocator::Jemalloc("JE_MALLOC_CONF".into())
        } else {
            Allocator::Jemalloc("MALLOC_CONF".into())
        }
    } else if links("libtcmalloc") {
        Allocator::Tcmalloc
    } else if links("libc.so.6") {
        Allocator::Glibc
    } else {
        Allocator::Other("statically linked, or not against glibc".into())
    }
}

/// glibc's version, `(2, 36)`.
pub use bulkhead_sys::process::glibc_version;

/// glibc 2.35 and 2.36 read /sys/kernel/mm/transparent_hugepage/enabled into a buffer they
/// do not NUL-terminate before strcmp (`__malloc_thp_mode`), so `glibc.malloc.hugetlb=1`
/// takes effect or not depending on a stale stack byte. Later glibc terminates the buffer.
pub fn glibc_thp_check_flaky(version: (u32, u32)) -> bool {
    ((2, 35)..=(2, 36)).contains(&version)
}

/// Set `key` in a `k=v:k=v` (GLIBC_TUNABLES) or `k:v,k:v` (MALLOC_CONF) list, keeping the rest.
pub fn merge_setting(
    existing: Option<&str>,
    sep: char,
    key_sep: char,
    key: &str,
    value: &str,
) -> String {
    let mut parts: Vec<String> = existing
        .unwrap_or("")
        .split(sep)
        .filter(|p| !p.is_empty())
        .filter(|p| p.split(key_sep).next() != Some(key))
        .map(String::from)
        .collect();
    parts.push(format!("{key}{key_sep}{value}"));
    parts.join(&sep.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_keep_other_settings() {
        assert_eq!(
            merge_setting(None, ':', '=', "glibc.malloc.hugetlb", "1"),
            "glibc.malloc.hugetlb=1"
        );
        assert_eq!(
            merge_setting(
                Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0"),
                ':',
                '=',
                "glibc.malloc.hugetlb",
                "2"
            ),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"
        );
        assert_eq!(
            merge_setting(Some("narenas:4,thp:never"), ',', ':', "thp", "always"),
            "narenas:4,thp:always"
        );
    }
}
