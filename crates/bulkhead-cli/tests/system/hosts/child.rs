//! The work the checks measure, done by this test binary run again with `BH_CHILD=OP` (so a
//! guest needs nothing else): `spin:CPU:SECS` (a busy loop pinned to one CPU, or `-` for
//! any), `alloc:MIB:SECS` (anonymous memory, every page touched, then held), `hugetlb:MIB`
//! (a MAP_HUGETLB map of 2 MiB pages, every page touched), `cpus` (print the CPUs this
//! process may run on), `spawn:N` (start N long `sleep`s at once, print how many started
//! and how many were refused, then end them), `read:DEV:OFFSET_MIB:LEN_MIB:SECS` (O_DIRECT
//! reads of 64 KiB over a region of a block device by four threads, round and round, for
//! SECS), `lat:DEV:OFFSET_MIB:LEN_MIB:SECS` (a latency-sensitive reader: one O_DIRECT 4 KiB
//! read at a random place of the region every millisecond, for SECS; prints `p50=US p99=US
//! n=N`). SECS `-` (spin, alloc, read): until the child's stdin is closed, so that the check,
//! not a lifetime fixed in advance, ends the work once its window has closed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an op works: SECS seconds, or (`-`) until stdin is closed.
#[derive(Clone)]
enum Until {
    Time(Instant),
    StdinClosed(Arc<AtomicBool>),
}

impl Until {
    fn parse(secs: &str) -> Until {
        if secs == "-" {
            let closed = Arc::new(AtomicBool::new(false));
            let c = closed.clone();
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
                c.store(true, Ordering::SeqCst);
            });
            Until::StdinClosed(closed)
        } else {
            let secs: f64 = secs.parse().unwrap();
            Until::Time(Instant::now() + Duration::from_secs_f64(secs))
        }
    }

    /// Whether to go on.
    fn going(&self) -> bool {
        match self {
            Until::Time(end) => Instant::now() < *end,
            Until::StdinClosed(closed) => !closed.load(Ordering::SeqCst),
        }
    }

    /// Block until the work should end.
    fn wait(&self) {
        while self.going() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Not a check: the entry point of the child. Does nothing without `BH_CHILD`.
#[test]
#[ignore = "run by the host suite as its child process"]
fn child() {
    let Ok(op) = std::env::var("BH_CHILD") else {
        return;
    };
    let parts: Vec<&str> = op.split(':').collect();
    let code = match parts.as_slice() {
        ["spin", cpu, secs] => spin(cpu, Until::parse(secs)),
        ["alloc", mib, secs] => alloc(mib.parse().unwrap(), secs),
        ["hugetlb", mib] => hugetlb(mib.parse().unwrap()),
        ["read", dev, off, len, secs] => read(
            dev,
            off.parse().unwrap(),
            len.parse().unwrap(),
            Until::parse(secs),
        ),
        ["lat", dev, off, len, secs] => lat(
            dev,
            off.parse().unwrap(),
            len.parse().unwrap(),
            secs.parse().unwrap(),
        ),
        ["spawn", n] => spawn(n.parse().unwrap()),
        ["cpus"] => {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let l = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .unwrap();
            eprintln!("{}", l.split_whitespace().nth(1).unwrap());
            0
        }
        _ => panic!("BH_CHILD={op}: unknown"),
    };
    std::process::exit(code);
}

fn spin(cpu: &str, until: Until) -> i32 {
    if let Ok(n) = cpu.parse::<usize>() {
        let mut set = nix::sched::CpuSet::new();
        set.set(n).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
    }
    let mut x: u64 = 1;
    while until.going() {
        for _ in 0..100_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    0
}

/// Four readers (threads), each round and round over its quarter of the region: the
/// device always has work queued, so the scheduler, not the reader, sets the pace.
fn read(dev: &str, off_mib: u64, len_mib: u64, until: Until) -> i32 {
    let quarter = len_mib / 4;
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (dev, until) = (dev.to_string(), until.clone());
            std::thread::spawn(move || read_region(&dev, off_mib + i * quarter, quarter, &until))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    0
}

fn read_region(dev: &str, off_mib: u64, len_mib: u64, until: &Until) {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_DIRECT.bits())
        .open(dev)
        .unwrap_or_else(|e| panic!("{dev}: {e}"));
    // O_DIRECT wants an aligned buffer: 64 KiB inside a larger vector, at a 4 KiB boundary.
    let mut v = vec![0u8; (64 << 10) + 4096];
    let skip = v.as_ptr().align_offset(4096);
    let buf = &mut v[skip..skip + (64 << 10)];
    let (start, stop) = (off_mib << 20, (off_mib + len_mib) << 20);
    let mut pos = start;
    while until.going() {
        f.read_exact_at(buf, pos)
            .unwrap_or_else(|e| panic!("read {dev} at {pos}: {e}"));
        pos += 64 << 10;
        if pos >= stop {
            pos = start;
        }
    }
}

/// One 4 KiB direct read at a time, a millisecond apart, at random places: the latency a
/// database's point reads see. Prints the median and 99th percentile in microseconds.
fn lat(dev: &str, off_mib: u64, len_mib: u64, secs: f64) -> i32 {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_DIRECT.bits())
        .open(dev)
        .unwrap_or_else(|e| panic!("{dev}: {e}"));
    let mut v = vec![0u8; 8192];
    let skip = v.as_ptr().align_offset(4096);
    let buf = &mut v[skip..skip + 4096];
    let pages = (len_mib << 20) / 4096;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut lats: Vec<u64> = Vec::new();
    while Instant::now() < end {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = (off_mib << 20) + (x % pages) * 4096;
        let t = Instant::now();
        f.read_exact_at(buf, at)
            .unwrap_or_else(|e| panic!("read {dev} at {at}: {e}"));
        lats.push(t.elapsed().as_micros() as u64);
        std::thread::sleep(Duration::from_millis(1));
    }
    lats.sort_unstable();
    let q = |p: f64| lats[((lats.len() - 1) as f64 * p) as usize];
    eprintln!("p50={} p99={} n={}", q(0.5), q(0.99), lats.len());
    0
}

/// The children live until all are counted (none may end and free its place before the
/// last is tried, however slowly they start), then are ended.
fn spawn(n: usize) -> i32 {
    let (mut kids, mut refused) = (Vec::new(), 0);
    for _ in 0..n {
        match std::process::Command::new("sleep").arg("600").spawn() {
            Ok(k) => kids.push(k),
            Err(_) => refused += 1,
        }
    }
    eprintln!("{} started, {refused} refused", kids.len());
    for mut k in kids {
        let _ = k.kill();
        let _ = k.wait();
    }
    0
}

fn alloc(mib: usize, hold: &str) -> i32 {
    let until = (hold == "-").then(|| Until::parse(hold));
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    for _ in 0..mib {
        let mut c = vec![0u8; 1 << 20];
        for i in (0..c.len()).step_by(4096) {
            c[i] = 1;
        }
        chunks.push(std::hint::black_box(c));
    }
    match until {
        Some(u) => u.wait(),
        None => std::thread::sleep(Duration::from_secs_f64(hold.parse().unwrap())),
    }
    drop(chunks);
    0
}

/// Exit 0 when the pages were mapped and touched, 3 when mmap refused (a reservation over
/// the limit); a fault over the limit is SIGBUS.
fn hugetlb(mib: usize) -> i32 {
    match bulkhead_sys::anonmap::AnonMap::default_hugetlb(mib << 20) {
        Ok(mut m) => {
            m.touch(2 << 20);
            0
        }
        Err(e) => {
            eprintln!("mmap: {e}");
            3
        }
    }
}
