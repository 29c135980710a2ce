//! `bulkhead iocost calibrate PATH`: a short, bounded measurement of a disk's linear cost
//! model for io.cost (the six coefficients of io.cost.model), the way the kernel's
//! tools/cgroup/iocost_coef_gen.py and resctl-bench's iocost-tune measure them, without fio:
//!
//! - sequential reads and writes of large blocks (`rbps`, `wbps`, bytes per second),
//! - sequential and random 4 KiB reads and writes at a queue depth (`rseqiops`, `rrandiops`,
//!   `wseqiops`, `wrandiops`, I/Os per second),
//!
//! each for a few seconds, with O_DIRECT (the page cache is not measured), with the disk's
//! scheduler set to `none` and merges off for the measurement (as the script does; both are
//! put back afterwards, also on failure). The I/O goes to a scratch file in a directory on
//! the disk (an unnamed O_TMPFILE: nothing to remove, nothing another user can reach by
//! name); a block device itself is measured only with `destroy_data` (its writes overwrite
//! it), else its reads alone.
//!
//! PATH is a host path root receives: opened once by the host-path rule (no symlink another
//! user owns, `bulkhead_sys::hostpath`), decided on by `fstat`/`fstatfs` of that descriptor
//! and used only through it (issue 40 #6).

use crate::host::{resolve_device_fd, DevNum};
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::hostpath::HostPath;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to measure and for how long.
#[derive(Debug, Clone)]
pub struct Request {
    /// A directory on the disk (a scratch file is made there), or the disk's block device.
    pub path: PathBuf,
    /// Each of the six measurements runs this long.
    pub seconds: f64,
    /// The scratch file's size.
    pub size: u64,
    /// Concurrent I/Os of the 4 KiB measurements (one thread each).
    pub depth: usize,
    /// Write to a block device named as `path` (its data is overwritten).
    pub destroy_data: bool,
}

/// What was measured: the coefficients, and per measurement its figure.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Calibration {
    pub dev: DevNum,
    /// The disk's kernel name.
    pub disk: String,
    pub target: String,
    pub seconds: f64,
    pub depth: usize,
    pub coefs: bulkhead_plan::iocost::Coefs,
    /// (measurement, figure, unit) for people.
    pub runs: Vec<(String, f64, String)>,
    /// Which coefficients were not measured (reads only on a block device) and kept from the
    /// read side.
    pub notes: Vec<String>,
}

/// The scheduler and merge switches of a disk, put back when dropped.
struct Quiet {
    sched: PathBuf,
    nomerges: PathBuf,
    was: (String, String),
}

impl Quiet {
    fn set(disk: &str) -> Quiet {
        let q = Path::new("/sys/block").join(disk).join("queue");
        let sched = q.join("scheduler");
        let nomerges = q.join("nomerges");
        let was = (
            std::fs::read_to_string(&sched)
                .ok()
                .and_then(|s| bulkhead_sys::host::active_scheduler(&s))
                .unwrap_or_else(|| "none".into()),
            std::fs::read_to_string(&nomerges)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "0".into()),
        );
        let _ = std::fs::write(&sched, "none");
        let _ = std::fs::write(&nomerges, "1");
        Quiet {
            sched,
            nomerges,
            was,
        }
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.sched, &self.was.0);
        let _ = std::fs::write(&self.nomerges, &self.was.1);
    }
}

fn bad(msg: String, hint: &str) -> Error {
    Error::invalid(Diagnostic::error(msg).hint(hint))
}

/// Run the six measurements (reads only on a block device without `destroy_data`).
pub fn calibrate(req: &Request) -> Result<Calibration> {
    check(req)?;
    let path_text = req.path.to_string_lossy().into_owned();
    let host = HostPath::open(&req.path).map_err(|e| {
        bad(
            format!("cannot open {e}"),
            "name a directory on the disk to measure, or its block device, by a path no other user can redirect",
        )
    })?;
    let disk = resolve_device_fd(host.fd(), &path_text).map_err(|m| {
        bad(
            format!("{path_text}: {m}"),
            "name a directory on the disk to measure (a scratch file is made there), or the disk's block device",
        )
    })?;
    let name = disk
        .dev
        .kernel_name()
        .unwrap_or_else(|| disk.dev.to_string());
    let target = Target::open(req, &host, &path_text)?;
    let _quiet = Quiet::set(&name);
    let mut meter = Meter {
        file: Arc::new(target.file),
        size: target.size,
        secs: Duration::from_secs_f64(req.seconds),
        depth: req.depth,
        runs: Vec::new(),
    };
    if target.writes && !target.device {
        // The scratch file is filled (allocated) before anything is measured on it.
        fill(&meter.file, meter.size)?;
    }
    let coefs = meter.coefs(target.writes)?;
    Ok(Calibration {
        dev: disk.dev,
        disk: name,
        target: if target.device {
            path_text
        } else {
            format!(
                "a {} scratch file in {path_text}",
                bulkhead_sys::units::human_bytes(target.size)
            )
        },
        seconds: req.seconds,
        depth: req.depth,
        coefs,
        runs: meter.runs,
        notes: target.notes,
    })
}

/// The request's bounds.
fn check(req: &Request) -> Result<()> {
    if !(0.5..=120.0).contains(&req.seconds) {
        return Err(bad(
            format!("--seconds {}: give 0.5 to 120", req.seconds),
            "a few seconds per measurement is enough for a model",
        ));
    }
    if !(1..=256).contains(&req.depth) {
        return Err(bad(format!("--depth {}: give 1 to 256", req.depth), ""));
    }
    Ok(())
}

/// What the I/O goes to: the block device, or a scratch file in a directory on the disk.
struct Target {
    file: File,
    /// The bytes measured over, in whole 4 MiB blocks.
    size: u64,
    writes: bool,
    device: bool,
    notes: Vec<String>,
}

impl Target {
    /// Decided on by the descriptor's `fstat`, opened through it.
    fn open(req: &Request, host: &HostPath, path_text: &str) -> Result<Target> {
        let mut target = if host.is_block_device() {
            Target::device(req, host, path_text)?
        } else if host.is_dir() {
            Target::scratch(req, host, path_text)?
        } else {
            return Err(bad(
                format!("{path_text} is neither a directory nor a block device"),
                "name a directory on the disk to measure, or the disk's block device",
            ));
        };
        target.size = target.size / (4 << 20) * (4 << 20);
        if target.size < 16 << 20 {
            return Err(bad(
                format!("{path_text}: {} is too small to measure", target.size),
                "give --size of 64M or more",
            ));
        }
        Ok(target)
    }

    fn device(req: &Request, host: &HostPath, path_text: &str) -> Result<Target> {
        use std::io::{Seek, SeekFrom};
        // The device node the descriptor holds, opened again through /proc/self/fd: the same
        // inode, never the name.
        let mut file = open_direct(&bulkhead_sys::inroot::fd_path(host.fd()), req.destroy_data)
            .map_err(|e| {
                bulkhead_sys::error::io_failed("cannot open for direct I/O", &req.path, e)
            })?;
        let size = file.seek(SeekFrom::End(0)).unwrap_or(0);
        let mut notes = Vec::new();
        if !req.destroy_data {
            notes.push(format!(
                "{path_text} is a block device: only reads were measured (writes would overwrite it; --destroy-data allows them); the write coefficients are the read ones"
            ));
        }
        Ok(Target {
            file,
            size,
            writes: req.destroy_data,
            device: true,
            notes,
        })
    }

    fn scratch(req: &Request, host: &HostPath, path_text: &str) -> Result<Target> {
        use rustix::fs::{openat, Mode, OFlags};
        let fd = openat(
            host.fd(),
            ".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::DIRECT | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| {
            let hint = match e {
                rustix::io::Errno::INVAL => " (this file system takes no direct I/O: tmpfs, say)",
                rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR => {
                    " (this file system makes no unnamed temporary files)"
                }
                _ => "",
            };
            bad(
                format!(
                    "cannot make a scratch file in {path_text}: {}{hint}",
                    std::io::Error::from(e)
                ),
                "name a directory on the disk to measure (ext4, xfs, btrfs), with room for --size",
            )
        })?;
        let avail = rustix::fs::fstatvfs(host.fd())
            .map(|v| v.f_bavail.saturating_mul(v.f_frsize))
            .unwrap_or(u64::MAX);
        if req.size > avail / 2 {
            return Err(bad(
                format!(
                    "{path_text} has {} free; the scratch file would take {}",
                    bulkhead_sys::units::human_bytes(avail),
                    bulkhead_sys::units::human_bytes(req.size)
                ),
                "give a smaller --size (the measurement needs at most half the free space)",
            ));
        }
        Ok(Target {
            file: File::from(fd),
            size: req.size,
            writes: true,
            device: false,
            notes: Vec::new(),
        })
    }
}

/// The large block of the bandwidth measurements.
const BIG: u64 = 4 << 20;

/// Runs the measurements on one target and keeps each figure for people.
struct Meter {
    file: Arc<File>,
    size: u64,
    secs: Duration,
    depth: usize,
    runs: Vec<(String, f64, String)>,
}

impl Meter {
    /// The six coefficients; the write ones are the read ones when writes are not allowed.
    fn coefs(&mut self, writes: bool) -> Result<bulkhead_plan::iocost::Coefs> {
        let depth = self.depth;
        let rbps = self.measure("rbps: sequential reads, 4 MiB blocks", false, BIG, 2, false)?;
        let rseq = self.measure(
            "rseqiops: sequential 4 KiB reads",
            false,
            4096,
            depth,
            false,
        )?;
        let rrand = self.measure("rrandiops: random 4 KiB reads", false, 4096, depth, true)?;
        let (wbps, wseq, wrand) = if writes {
            (
                self.measure("wbps: sequential writes, 4 MiB blocks", true, BIG, 2, false)?,
                self.measure(
                    "wseqiops: sequential 4 KiB writes",
                    true,
                    4096,
                    depth,
                    false,
                )?,
                self.measure("wrandiops: random 4 KiB writes", true, 4096, depth, true)?,
            )
        } else {
            (rbps, rseq, rrand)
        };
        Ok(bulkhead_plan::iocost::Coefs {
            rbps,
            rseqiops: rseq,
            rrandiops: rrand,
            wbps,
            wseqiops: wseq,
            wrandiops: wrand,
        })
    }

    /// One measurement: bytes per second for the big blocks, else I/Os per second.
    fn measure(
        &mut self,
        what: &str,
        write: bool,
        block: u64,
        depth: usize,
        random: bool,
    ) -> Result<u64> {
        let (bytes, ios, t) = run(
            &self.file, self.size, write, block, depth, random, self.secs,
        )?;
        let (fig, unit) = if block == BIG {
            (bytes as f64 / t, "bytes/s")
        } else {
            (ios as f64 / t, "IO/s")
        };
        self.runs.push((what.to_string(), fig, unit.to_string()));
        Ok(fig.round().max(1.0) as u64)
    }
}

fn open_direct(p: &Path, write: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(p)
}

/// A buffer for direct I/O: `len` bytes at a 4 KiB boundary inside a larger vector.
fn aligned(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0x5au8; len + 4096];
    let off = v.as_ptr().align_offset(4096);
    (v, off)
}

/// Write the whole scratch file once (its blocks allocated before anything is measured).
fn fill(file: &File, size: u64) -> Result<()> {
    let block = 4usize << 20;
    let (buf, off) = aligned(block);
    let mut at = 0;
    while at < size {
        file.write_all_at(&buf[off..off + block], at)
            .map_err(|e| Error::failed(format!("filling the scratch file: {e}")))?;
        at += block as u64;
    }
    Ok(())
}

/// `depth` threads doing `block`-sized direct I/O for `secs`: (bytes, I/Os, seconds).
fn run(
    file: &Arc<File>,
    size: u64,
    write: bool,
    block: u64,
    depth: usize,
    random: bool,
    secs: Duration,
) -> Result<(u64, u64, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let ios = Arc::new(AtomicU64::new(0));
    let blocks = size / block;
    let start = Instant::now();
    let handles: Vec<_> = (0..depth as u64)
        .map(|i| {
            let (file, stop, bytes, ios) = (file.clone(), stop.clone(), bytes.clone(), ios.clone());
            std::thread::spawn(move || -> std::io::Result<()> {
                let (mut buf, off) = aligned(block as usize);
                let b = &mut buf[off..off + block as usize];
                // Each thread its own stretch (sequential) or its own random stream.
                let mut n = i * blocks / depth as u64;
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (i + 1);
                while !stop.load(Ordering::Relaxed) {
                    let at = if random {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x % blocks
                    } else {
                        n = (n + 1) % blocks;
                        n
                    } * block;
                    if write {
                        file.write_all_at(b, at)?;
                    } else {
                        file.read_exact_at(b, at)?;
                    }
                    bytes.fetch_add(block, Ordering::Relaxed);
                    ios.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(secs);
    stop.store(true, Ordering::Relaxed);
    let mut err = None;
    for h in handles {
        if let Ok(Err(e)) = h.join() {
            err.get_or_insert(e);
        }
    }
    let t = start.elapsed().as_secs_f64();
    if let Some(e) = err {
        return Err(Error::failed(format!(
            "direct I/O failed while measuring: {e}"
        )));
    }
    Ok((
        bytes.load(Ordering::Relaxed),
        ios.load(Ordering::Relaxed),
        t,
    ))
}
