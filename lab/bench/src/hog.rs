//! The noisy neighbours: CPU, I/O and memory hogs. Each is bounded in time (and size), stops
//! on SIGTERM/SIGINT, and reports how much work it got done, because a helper starved to zero
//! is a bug too.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// What a hog did.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HogReport {
    pub kind: String,
    /// Units of work done (CPU: million loop iterations; I/O: MiB moved; memory: MiB held).
    pub work: f64,
    pub unit: String,
    pub seconds: f64,
    /// work / seconds
    pub rate: f64,
}

/// Stop gracefully on SIGTERM/SIGINT, so the report is still printed.
pub fn install_stop_handler() {
    crate::stop::install_handler();
}

fn should_stop(start: Instant, duration: Duration) -> bool {
    crate::stop::requested() || start.elapsed() >= duration
}

/// Pin the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    bulkhead_sys::sched::pin_to_cpu(cpu)
}

/// A busy loop, like `taskset -c N sh -c 'while true; do true; done'`, counting iterations.
/// With `bursts` (busy, pause) it alternates: busy for the first, asleep for the second.
pub fn cpu(
    pin: Option<usize>,
    duration: Duration,
    bursts: Option<(Duration, Duration)>,
) -> std::io::Result<HogReport> {
    if let Some(c) = pin {
        pin_to_cpu(c)?;
    }
    let start = Instant::now();
    let mut iterations: u64 = 0;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while !should_stop(start, duration) {
        if let Some((busy, pause)) = bursts {
            let cycle = (busy + pause).as_secs_f64();
            let at = start.elapsed().as_secs_f64() % cycle;
            if at >= busy.as_secs_f64() {
                std::thread::sleep(
                    Duration::from_secs_f64(cycle - at).min(Duration::from_millis(50)),
                );
                continue;
            }
        }
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        iterations += 100_000;
        std::hint::black_box(x);
    }
    let secs = start.elapsed().as_secs_f64();
    let work = iterations as f64 / 1e6;
    Ok(HogReport {
        kind: "cpu".into(),
        work,
        unit: "M iterations".into(),
        seconds: secs,
        rate: work / secs,
    })
}

/// Direct (uncached) writes and reads on a file in `dir`, so the I/O is issued by this
/// process and counted against its cgroup on v1 as on v2. The file is at most `size` bytes
/// and is removed at the end.
pub fn io(dir: &Path, size: u64, duration: Duration) -> std::io::Result<HogReport> {
    const CHUNK: usize = 1 << 20;
    let path = dir.join(format!("io-hog-{}", std::process::id()));
    let f: File = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)?;
    let chunks = (size / CHUNK as u64).max(1);
    // Page-aligned, as O_DIRECT needs.
    let mut buf = bulkhead_sys::anonmap::AnonMap::new(CHUNK)?;
    buf.bytes_mut()
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = i as u8);
    let start = Instant::now();
    let mut moved: u64 = 0;
    let mut written_chunks = 0u64;
    let mut i = 0u64;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let result = (|| -> std::io::Result<()> {
        while !should_stop(start, duration) {
            // Two writes, then two random reads of what exists.
            for _ in 0..2 {
                f.write_all_at(buf.bytes(), (i % chunks) * CHUNK as u64)?;
                i += 1;
                written_chunks = written_chunks.max(i.min(chunks));
                moved += CHUNK as u64;
            }
            for _ in 0..2 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let off = (rng % written_chunks.max(1)) * CHUNK as u64;
                f.read_exact_at(buf.bytes_mut(), off)?;
                moved += CHUNK as u64;
            }
        }
        Ok(())
    })();
    drop(f);
    let _ = std::fs::remove_file(&path);
    result?;
    let secs = start.elapsed().as_secs_f64();
    let work = moved as f64 / (1 << 20) as f64;
    Ok(HogReport {
        kind: "io".into(),
        work,
        unit: "MiB".into(),
        seconds: secs,
        rate: work / secs,
    })
}

/// Every regular file under `dir`, depth first, in a stable order (at most 100,000).
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() && out.len() < 100_000 {
                out.push(e.path());
            }
        }
    }
    out
}

/// Read a file through the page cache in 128 KiB reads, counting the lines that hold
/// `needle` as grep does; (bytes read, matches). With `drop_after`, its pages are dropped
/// from the cache afterwards, so the next pass reads it from the disk again.
fn grep_file(path: &Path, needle: u8, drop_after: bool) -> std::io::Result<(u64, u64)> {
    use std::io::Read;
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 128 << 10];
    let (mut bytes, mut hits) = (0u64, 0u64);
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        bytes += n as u64;
        hits += buf[..n].iter().filter(|&&b| b == needle).count() as u64;
        if crate::stop::requested() {
            break;
        }
    }
    if drop_after {
        let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
    }
    Ok((bytes, hits))
}

/// The seeds' reader, `while true; do find DIR -type f -exec grep glauber {} +; done`:
/// buffered reads of every file under `dir`, pass after pass. Files under `cold` (the bench's
/// stand-in for data larger than memory) are dropped from the page cache after each read, so
/// every pass reads them from the disk; the database's own files are read as grep reads them.
/// Files that vanish or cannot be read are skipped, as grep does.
pub fn reader(dir: &Path, cold: Option<&Path>, duration: Duration) -> std::io::Result<HogReport> {
    let start = Instant::now();
    let mut moved: u64 = 0;
    let mut hits: u64 = 0;
    'passes: while !should_stop(start, duration) {
        let files = files_under(dir);
        if files.is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
        for f in files {
            if should_stop(start, duration) {
                break 'passes;
            }
            let drop_after = cold.is_some_and(|c| f.starts_with(c));
            if let Ok((b, h)) = grep_file(&f, b'\n', drop_after) {
                moved += b;
                hits += h;
            }
        }
    }
    std::hint::black_box(hits);
    let secs = start.elapsed().as_secs_f64();
    let work = moved as f64 / (1 << 20) as f64;
    Ok(HogReport {
        kind: "reader".into(),
        work,
        unit: "MiB".into(),
        seconds: secs,
        rate: work / secs,
    })
}

/// A backup: an archive of every file under `from`, written with buffered writes into
/// `to` (a `tar c` stand-in), read again pass after pass until the archive holds `size`
/// bytes, then synced (fdatasync, as backup tools end), and started over. The archive is
/// removed at the end. `from` may be empty: then the archive is made of generated blocks.
pub fn backup(from: &Path, to: &Path, size: u64, duration: Duration) -> std::io::Result<HogReport> {
    use std::io::Read;
    std::fs::create_dir_all(to)?;
    let path = to.join(format!("backup-{}.tar", std::process::id()));
    let start = Instant::now();
    let mut moved: u64 = 0;
    let mut buf = vec![0u8; 1 << 20];
    let filler: Vec<u8> = (0..1usize << 20).map(|i| (i * 31 % 251) as u8).collect();
    let result = (|| -> std::io::Result<()> {
        while !should_stop(start, duration) {
            let mut out = File::create(&path)?;
            let mut written = 0u64;
            'archive: while written < size {
                let files: Vec<_> = files_under(from)
                    .into_iter()
                    .filter(|f| !f.starts_with(to))
                    .collect();
                let mut from_files = 0u64;
                for f in files {
                    let Ok(mut src) = File::open(&f) else {
                        continue;
                    };
                    loop {
                        if should_stop(start, duration) {
                            break 'archive;
                        }
                        let n = match src.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        out.write_all(&buf[..n])?;
                        written += n as u64;
                        moved += n as u64;
                        from_files += n as u64;
                        if written >= size {
                            break 'archive;
                        }
                    }
                }
                if from_files == 0 {
                    // Nothing to read (yet): generated blocks keep the archive growing.
                    out.write_all(&filler)?;
                    written += filler.len() as u64;
                    moved += filler.len() as u64;
                }
                if should_stop(start, duration) {
                    break;
                }
            }
            if !should_stop(start, duration) {
                out.sync_data()?;
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    result?;
    let secs = start.elapsed().as_secs_f64();
    let work = moved as f64 / (1 << 20) as f64;
    Ok(HogReport {
        kind: "backup".into(),
        work,
        unit: "MiB".into(),
        seconds: secs,
        rate: work / secs,
    })
}

/// Fill `dir` with `size` bytes of files of 64 MiB (the reader's cold data), written once
/// and synced; the pages are dropped from the cache so the first pass reads the disk too.
pub fn make_cold(dir: &Path, size: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let chunk: Vec<u8> = (0..1usize << 20)
        .map(|i| {
            if i % 97 == 0 {
                b'\n'
            } else {
                b'a' + (i % 26) as u8
            }
        })
        .collect();
    let per_file: u64 = 64 << 20;
    let mut left = size;
    let mut i = 0;
    while left > 0 {
        let n = left.min(per_file);
        let mut f = File::create(dir.join(format!("cold-{i:03}.dat")))?;
        let mut w = 0;
        while w < n {
            let k = (n - w).min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..k])?;
            w += k as u64;
        }
        f.sync_all()?;
        let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
        left -= n;
        i += 1;
    }
    Ok(())
}

/// Grows anonymous memory (touched, so it is really used) and page cache (a file written in
/// `dir`) by `step` every 100 ms up to `max` bytes, then holds it. The file is removed at
/// the end.
pub fn memory(dir: &Path, max: u64, step: u64, duration: Duration) -> std::io::Result<HogReport> {
    let path = dir.join(format!("memory-hog-{}", std::process::id()));
    let mut cache = File::create(&path)?;
    let mut anon: Vec<Vec<u8>> = Vec::new();
    let mut held: u64 = 0;
    let start = Instant::now();
    let chunk = vec![0x5Au8; 1 << 20];
    let result = (|| -> std::io::Result<()> {
        while !should_stop(start, duration) {
            if held < max {
                // Half anonymous, half page cache.
                let half = step / 2;
                let mut v = vec![0u8; half as usize];
                for p in v.chunks_mut(4096) {
                    p[0] = 1;
                }
                anon.push(v);
                let mut left = half;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    cache.write_all(&chunk[..n])?;
                    left -= n as u64;
                }
                held += step;
                // Progress, so a hog the kernel kills still tells how far it got.
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "progress {}", held >> 20);
                let _ = out.flush();
            } else {
                // Keep the anonymous memory hot.
                for v in &mut anon {
                    for p in v.chunks_mut(4096) {
                        p[0] = p[0].wrapping_add(1);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    })();
    drop(cache);
    let _ = std::fs::remove_file(&path);
    result?;
    let secs = start.elapsed().as_secs_f64();
    let work = held as f64 / (1 << 20) as f64;
    Ok(HogReport {
        kind: "memory".into(),
        work,
        unit: "MiB".into(),
        seconds: secs,
        rate: work / secs,
    })
}
