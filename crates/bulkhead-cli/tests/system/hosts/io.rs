//! Block I/O on a loop device made for the check (BFQ as its scheduler where the kernel has
//! it; where not, IOWeight's finding is checked instead): IOWeight shares it by weight, IOReadBandwidthMax caps reads, and on v2 writeback of a slice's dirty pages is
//! charged to the slice (cgroup writeback). Bytes come from the slice's io.stat (v2) or
//! blkio.bfq.io_service_bytes (v1; blkio.throttle.* where BFQ has no line).

use super::host::{ended, exec_done, Host};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loop device over a file, or a null_blk device with a bandwidth of its own (where the
/// kernel has null_blk), with BFQ; detached (scheduler put back) when dropped.
pub struct Loop {
    pub dev: String,
    /// `MAJ:MIN`.
    pub num: String,
    sched_before: Option<String>,
    mounted: Option<PathBuf>,
    /// The null_blk device's configfs directory.
    nullb: Option<PathBuf>,
}

fn sh(args: &[&str]) -> String {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        o.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

impl Loop {
    pub fn new(dir: &Path, mib: u64) -> Loop {
        let file = dir.join("disk.img");
        let f = file.to_str().unwrap();
        sh(&[
            "dd",
            "if=/dev/zero",
            &format!("of={f}"),
            "bs=1M",
            &format!("count={mib}"),
            "status=none",
        ]);
        // Without udev nothing loads the loop driver on first use.
        let _ = Command::new("modprobe").args(["-q", "loop"]).status();
        // Direct I/O to the backing file: reads reach the disk below, not the page cache.
        let dev = sh(&["losetup", "--find", "--show", "--direct-io=on", f]);
        let name = dev.trim_start_matches("/dev/").to_string();
        let l = Loop {
            num: std::fs::read_to_string(format!("/sys/block/{name}/dev"))
                .unwrap()
                .trim()
                .into(),
            dev,
            sched_before: None,
            mounted: None,
            nullb: None,
        };
        l
    }

    /// A null_blk disk of `mib` that moves at most `mbps` MB/s: the disk, not the CPU, sets
    /// the pace (on a 2-CPU host or an emulated guest the CPU is slower than any loop device).
    /// None where the kernel has no null_blk or configfs.
    pub fn throttled(tag: &str, mib: u64, mbps: u64) -> Option<Loop> {
        Loop::throttled_with(tag, mib, mbps, "none")
    }

    /// [`Loop::throttled`] with another scheduler (`none`: as NVMe and virtio disks have it).
    pub fn throttled_with(tag: &str, mib: u64, mbps: u64, sched: &str) -> Option<Loop> {
        let _ = Command::new("modprobe")
            .args(["-q", "null_blk", "nr_devices=0"])
            .status();
        let cfs = Path::new("/sys/kernel/config");
        if cfs.is_dir() && !cfs.join("nullb").exists() {
            let _ = Command::new("mount")
                .args(["-t", "configfs", "configfs", "/sys/kernel/config"])
                .status();
        }
        let dir = cfs.join("nullb").join(format!("bh{tag}"));
        std::fs::create_dir(&dir).ok()?;
        let set = |k: &str, v: &str| std::fs::write(dir.join(k), v);
        let ok = set("size", &mib.to_string())
            .and_then(|_| set("queue_mode", "2"))
            .and_then(|_| set("blocksize", "4096"))
            .and_then(|_| set("mbps", &mbps.to_string()))
            .and_then(|_| set("power", "1"));
        // The disk is named after the configfs directory (Linux 5.19+), else nullb<index>.
        let index = std::fs::read_to_string(dir.join("index")).unwrap_or_default();
        let name = [format!("bh{tag}"), format!("nullb{}", index.trim())]
            .into_iter()
            .find(|n| Path::new("/sys/block").join(n).join("dev").exists());
        let num = name
            .as_ref()
            .and_then(|n| std::fs::read_to_string(format!("/sys/block/{n}/dev")).ok());
        let (Ok(()), Some(name), Some(num)) = (ok, name, num) else {
            let _ = set("power", "0");
            let _ = std::fs::remove_dir(&dir);
            return None;
        };
        let l = Loop {
            dev: format!("/dev/{name}"),
            num: num.trim().into(),
            sched_before: None,
            mounted: None,
            nullb: Some(dir),
        };
        Some(l.with_scheduler(sched))
    }

    /// Whether this kernel offers BFQ for this disk, after trying to load its module: a
    /// kernel without it (most cloud images; CONFIG_IOSCHED_BFQ not set) is a finding, not a
    /// failure.
    pub fn bfq_offered(&self) -> bool {
        let _ = Command::new("modprobe").args(["-q", "bfq"]).status();
        let name = self.dev.trim_start_matches("/dev/");
        std::fs::read_to_string(format!("/sys/block/{name}/queue/scheduler")).is_ok_and(|s| {
            s.split_whitespace()
                .any(|w| w.trim_matches(['[', ']']) == "bfq")
        })
    }

    /// Set the disk's scheduler (put back when dropped).
    pub fn with_scheduler(mut self, sched: &str) -> Loop {
        let l = &mut self;
        let name = l.dev.trim_start_matches("/dev/").to_string();
        if sched == "bfq" {
            let _ = Command::new("modprobe").args(["-q", "bfq"]).status();
        }
        let q = format!("/sys/block/{name}/queue/scheduler");
        let cur = std::fs::read_to_string(&q).unwrap_or_default();
        if l.sched_before.is_none() {
            l.sched_before = cur
                .split_whitespace()
                .find(|s| s.starts_with('['))
                .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_string());
        }
        std::fs::write(&q, sched)
            .unwrap_or_else(|e| panic!("{sched} on {}: {e} (scheduler: {cur})", l.dev));
        // Weights only: no boost for queues BFQ takes for interactive ones (new readers are).
        let _ = std::fs::write(format!("/sys/block/{name}/queue/iosched/low_latency"), "0");
        self
    }

    /// mkfs.ext4 and mount it at `at`.
    pub fn mount(&mut self, at: &Path) {
        sh(&["mkfs.ext4", "-q", "-F", &self.dev]);
        std::fs::create_dir_all(at).unwrap();
        sh(&["mount", &self.dev, at.to_str().unwrap()]);
        self.mounted = Some(at.to_path_buf());
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if let Some(m) = &self.mounted {
            let _ = Command::new("umount").arg(m).status();
        }
        let name = self.dev.trim_start_matches("/dev/");
        if let Some(s) = &self.sched_before {
            let _ = std::fs::write(format!("/sys/block/{name}/queue/scheduler"), s);
        }
        match &self.nullb {
            Some(dir) => {
                let _ = std::fs::write(dir.join("power"), "0");
                let _ = std::fs::remove_dir(dir);
            }
            None => {
                let _ = Command::new("losetup").args(["-d", &self.dev]).status();
            }
        }
    }
}

/// Bytes the slice read and wrote on the device `num` (MAJ:MIN).
fn io_bytes(h: &Host, name: &str, num: &str) -> (u64, u64) {
    let d = h.dir("io", name).expect("the slice has an io directory");
    if h.v2("io") {
        let text = std::fs::read_to_string(d.join("io.stat")).unwrap_or_default();
        let line = text.lines().find(|l| l.starts_with(&format!("{num} ")));
        let field = |k: &str| {
            line.and_then(|l| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{k}="))?.parse().ok())
            })
            .unwrap_or(0)
        };
        (field("rbytes"), field("wbytes"))
    } else {
        // BFQ's own counters; blk-throttle counts a device only once it has a limit there.
        let has = |f: &str| {
            let t = std::fs::read_to_string(d.join(f)).unwrap_or_default();
            t.lines()
                .any(|l| l.starts_with(&format!("{num} ")))
                .then_some(t)
        };
        let text = has("blkio.bfq.io_service_bytes")
            .or_else(|| has("blkio.throttle.io_service_bytes"))
            .unwrap_or_default();
        let field = |k: &str| {
            text.lines()
                .find_map(|l| {
                    let mut it = l.split_whitespace();
                    (it.next()? == num && it.next()? == k).then(|| it.next()?.parse().ok())?
                })
                .unwrap_or(0)
        };
        (field("Read"), field("Write"))
    }
}

/// The slice's BFQ weight: io.bfq.weight (`default N`, v2) or blkio.bfq.weight (v1).
fn bfq_weight(h: &Host, name: &str) -> u64 {
    let d = h.dir("io", name).expect("the slice has an io directory");
    let f = if h.v2("io") {
        "io.bfq.weight"
    } else {
        "blkio.bfq.weight"
    };
    let text = std::fs::read_to_string(d.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .next()
        .unwrap_or_else(|| panic!("{f}: {text}"))
}

/// Direct reads of `len_mib` of the device from `skip_mib` on, for `secs`, in the slice.
fn reader(h: &Host, name: &str, l: &Loop, skip_mib: u64, len_mib: u64, secs: f64) -> Child {
    h.child_in(name, &format!("read:{}:{skip_mib}:{len_mib}:{secs}", l.dev))
        .spawn()
        .unwrap()
}

/// [`reader`] that reads until its stdin is closed ([`stop`]): the check, not a lifetime
/// fixed in advance, ends it once its window has closed.
fn reader_until_stopped(h: &Host, name: &str, l: &Loop, skip_mib: u64, len_mib: u64) -> Child {
    h.child_in(name, &format!("read:{}:{skip_mib}:{len_mib}:-", l.dev))
        .stdin(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait until every reader runs in its slice (exec'd there, its bytes counted): where a
/// window opens, however slowly they start (an emulated guest, a busy host).
fn wait_reading(h: &Host, l: &Loop, readers: &[(&str, &Child)]) {
    let before: Vec<u64> = readers
        .iter()
        .map(|(n, _)| io_bytes(h, n, &l.num).0)
        .collect();
    crate::common::wait_for("every reader reading in its slice", || {
        readers
            .iter()
            .zip(&before)
            .all(|((n, k), b)| exec_done(k.id()) && io_bytes(h, n, &l.num).0 > *b)
    });
}

/// End the readers (close their stdin); each must have ended well.
fn stop(readers: &mut [&mut Child]) {
    for k in readers.iter_mut() {
        drop(k.stdin.take());
    }
    for k in readers {
        let st = k.wait().unwrap();
        assert!(st.success(), "reader: {}", ended(&st));
    }
}

#[test]
fn io_weight_shares_a_bfq_disk_by_weight() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    // A disk slower than the CPU where the kernel has null_blk (the guests); else a loop
    // device, where the CPU is the bottleneck and weights can only tilt the share.
    let (l, what) = match Loop::throttled(&h.parent, 512, 40) {
        Some(l) => (l, "null_blk at 40 MB/s"),
        None => (Loop::new(h.tmp(), 512), "loop device, CPU-bound"),
    };
    if !l.bfq_offered() {
        // No BFQ in this kernel (and on v1 no io.cost): the weight is a finding that apply
        // names with its reason, and nothing fails.
        let said = h.apply(&[("low", "IOWeight = 25"), ("high", "IOWeight = 100")]);
        h.report(
            "IOWeight",
            "not applied: this kernel offers no BFQ (the finding apply printed)",
        );
        assert!(
            said.contains("IOWeight is not applied") || said.contains("IOWeight has no effect"),
            "apply must say why IOWeight has no effect here: {said}"
        );
        return;
    }
    let l = l.with_scheduler("bfq");
    // systemd's conversion to BFQ's range (1..1000) keeps weights up to 100 as they are and
    // compresses those above (800 becomes 163): 25:100 is 25:100 for BFQ too.
    h.apply(&[("low", "IOWeight = 25"), ("high", "IOWeight = 100")]);
    let bfq = |n: &str| bfq_weight(&h, n);
    let (wl, wh) = (bfq("low"), bfq("high"));
    assert_eq!(
        (wl, wh),
        (25, 100),
        "IOWeight 25:100 should reach BFQ as 25:100"
    );
    // Both readers running before the window opens (an emulated guest starts slowly).
    let mut a = reader_until_stopped(&h, "low", &l, 0, 256);
    let mut b = reader_until_stopped(&h, "high", &l, 256, 256);
    wait_reading(&h, &l, &[("low", &a), ("high", &b)]);
    let before = (
        io_bytes(&h, "low", &l.num).0,
        io_bytes(&h, "high", &l.num).0,
    );
    std::thread::sleep(Duration::from_secs(4));
    let after = (
        io_bytes(&h, "low", &l.num).0,
        io_bytes(&h, "high", &l.num).0,
    );
    stop(&mut [&mut a, &mut b]);
    let (lo, hi) = (after.0 - before.0, after.1 - before.1);
    let ratio = hi as f64 / lo.max(1) as f64;
    let want = wh as f64 / wl as f64;
    let tolerance = if l.nullb.is_some() {
        "-25%..+100%"
    } else {
        "or less: CPU-bound"
    };
    h.report(
        "IOWeight",
        &format!(
            "25:100 (BFQ weights {wl}:{wh}) on {what}, direct reads -> {:.1}:{:.1} MiB, ratio {ratio:.2} (want {want:.2} {tolerance})",
            lo as f64 / 1048576.0,
            hi as f64 / 1048576.0,
        ),
    );
    assert!(hi > 0, "the high-weight reader read nothing in the window");
    if l.nullb.is_some() {
        // BFQ gives the heavier group at least its share and often more (it charges a queue
        // that is slow to use its budget for the time it held the disk): measured 4.2-6.3 for
        // 4 in the v2 guest. Below 3 the weights do not hold; above 8 the light group gets
        // under half of its 20%.
        assert!(
            (want * 0.75..=want * 2.0).contains(&ratio),
            "BFQ weights {wl}:{wh} gave a ratio of {ratio:.2}"
        );
    } else {
        assert!(
            ratio >= 1.5,
            "BFQ weights {wl}:{wh} gave a ratio of {ratio:.2} on a {what}"
        );
    }
}

#[test]
fn io_read_bandwidth_max_caps_reads() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let l = Loop::new(h.tmp(), 64);
    h.apply(&[("capped", &format!("IOReadBandwidthMax = \"{} 2M\"", l.dev))]);
    let before = io_bytes(&h, "capped", &l.num).0;
    let t = Instant::now();
    let st = reader(&h, "capped", &l, 0, 64, 4.0).wait().unwrap();
    let secs = t.elapsed().as_secs_f64();
    let rate = (io_bytes(&h, "capped", &l.num).0 - before) as f64 / 1048576.0 / secs;
    h.report(
        "IOReadBandwidthMax",
        &format!("2M, direct reads for 4 s -> {rate:.2} MiB/s over {secs:.1} s (want 1.0-2.2)"),
    );
    assert!(st.success(), "dd: {}", ended(&st));
    assert!(
        (1.0..=2.2).contains(&rate),
        "IOReadBandwidthMax=2M read at {rate:.2} MiB/s"
    );
}

#[test]
fn writeback_is_charged_to_the_slice_on_v2() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let mut l = Loop::new(h.tmp(), 256);
    let mnt = h.tmp().join("mnt");
    l.mount(&mnt);
    h.apply(&[("writer", "IOWeight = 100")]);
    let file = mnt.join("dirty");
    // Buffered writes, no fsync by the writer: the kernel's flusher (or this test's sync,
    // outside the slice) writes them back.
    let st = h
        .run_in(
            "writer",
            &[
                "dd",
                "if=/dev/zero",
                &format!("of={}", file.display()),
                "bs=1M",
                "count=64",
                "status=none",
            ],
        )
        .status()
        .unwrap();
    assert!(st.success(), "dd: {}", ended(&st));
    sh(&["sync", "-f", file.to_str().unwrap()]);
    let written = io_bytes(&h, "writer", &l.num).1;
    let charged = written >= 48 << 20;
    h.report(
        "IOWeight (writeback)",
        &format!(
            "64 MiB buffered, synced from outside -> {:.1} MiB charged to the slice ({})",
            written as f64 / 1048576.0,
            if charged {
                "cgroup writeback"
            } else {
                "not charged: no cgroup writeback"
            }
        ),
    );
    if h.v2("io") && h.v2("memory") {
        assert!(
            charged,
            "v2: writeback of the slice's pages was not charged to it"
        );
    }
}

/// A disk with the `none` scheduler (as NVMe and virtio disks have it): null_blk at `mbps`
/// where the kernel has it, else a loop device; and what it is, for the report.
fn none_disk(h: &Host, mib: u64, mbps: u64) -> (Loop, String) {
    match Loop::throttled_with(&h.parent, mib, mbps, "none") {
        Some(l) => (l, format!("null_blk at {mbps} MB/s, scheduler none")),
        None => (
            Loop::new(h.tmp(), mib).with_scheduler("none"),
            "loop device, scheduler none (CPU-bound)".into(),
        ),
    }
}

/// `lat` child's `p50=US p99=US n=N`.
fn latencies(out: &std::process::Output) -> (u64, u64, u64) {
    let text = String::from_utf8_lossy(&out.stderr);
    let field = |k: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}="))?.parse().ok())
            .unwrap_or_else(|| panic!("no {k}= in the reader's output: {text}"))
    };
    (field("p50"), field("p99"), field("n"))
}

/// The latency reader's p50/p99 in slice `lat` while `hog` reads with four threads.
fn p99_under_hog(h: &Host, l: &Loop, secs: f64) -> (u64, u64, u64) {
    // The hog reads from before the latency reader starts until after it has ended.
    let mut hog = reader_until_stopped(h, "hog", l, 0, 256);
    wait_reading(h, l, &[("hog", &hog)]);
    let out = h
        .child_in("lat", &format!("lat:{}:256:256:{secs}", l.dev))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "latency reader: {}",
        ended(&out.status)
    );
    stop(&mut [&mut hog]);
    latencies(&out)
}

/// IODeviceLatencyTargetSec: on v2, io.latency holds the target for the disk (read back
/// from the slice's own file, whoever wrote it: bulkhead or systemd), and a latency-sensitive
/// reader's p99 beside a four-thread hog is measured without and with it (reported; it must
/// not be worse with the target). With the I/O controller on v1, apply says it has no effect.
#[test]
fn io_latency_target_is_set_and_protects_a_reader() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    if !h.v2("io") {
        let warned = h.apply(&[("lat", "IODeviceLatencyTargetSec = \"/var/tmp 10ms\"")]);
        h.report(
            "IODeviceLatencyTargetSec",
            "I/O controller on v1: apply warns that it has no effect",
        );
        assert!(
            warned.contains("IODeviceLatencyTargetSec") && warned.contains("no effect"),
            "{warned}"
        );
        return;
    }
    let (l, what) = none_disk(&h, 512, 40);
    if !h.layout.caps().io_latency {
        // Debian 12's kernel is built without io.latency: apply must say so.
        let warned = h.apply(&[(
            "lat",
            &format!("IODeviceLatencyTargetSec = \"{} 2ms\"", l.dev),
        )]);
        h.report(
            "IODeviceLatencyTargetSec",
            "this kernel has no io.latency (CONFIG_BLK_CGROUP_IOLATENCY off): apply warns that it has no effect",
        );
        assert!(
            warned.contains("IODeviceLatencyTargetSec") && warned.contains("no effect"),
            "{warned}"
        );
        return;
    }
    let secs = if super::memory::in_guest() { 8.0 } else { 4.0 };
    h.apply(&[("lat", "IOWeight = 100"), ("hog", "IOWeight = 100")]);
    let (b50, b99, bn) = p99_under_hog(&h, &l, secs);
    let target = "2ms";
    h.apply(&[
        (
            "lat",
            &format!(
                "IOWeight = 100\nIODeviceLatencyTargetSec = \"{} {target}\"",
                l.dev
            ),
        ),
        ("hog", "IOWeight = 100"),
    ]);
    let d = h.dir("io", "lat").expect("the slice has an io directory");
    let file = std::fs::read_to_string(d.join("io.latency")).unwrap_or_default();
    let (p50, p99, n) = p99_under_hog(&h, &l, secs);
    h.report(
        "IODeviceLatencyTargetSec",
        &format!(
            "{target} on {what}: io.latency reads \"{}\"; a 4K reader beside a 4-thread hog: p50/p99 {b50}/{b99} us without ({bn} reads), {p50}/{p99} us with the target ({n} reads), p99 ratio {:.2}",
            file.trim(),
            p99 as f64 / b99.max(1) as f64
        ),
    );
    assert_eq!(file.trim(), format!("{} target=2000", l.num), "io.latency");
    assert!(
        p99 as f64 <= b99 as f64 * 1.5,
        "with the target the reader's p99 is {p99} us, without {b99} us"
    );
}

/// The [iocost] section on a `none`-scheduler disk: IOWeight 25:100 shares it close to the
/// weights with io.cost on (the plan's, with a model measured by `iocost calibrate`), about
/// evenly without; io.weight is written in the slices; destroy puts io.cost back as it was.
#[test]
fn io_cost_makes_io_weight_share_a_none_disk() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let Some(root) = h
        .layout
        .hierarchy("io")
        .filter(|x| x.version == bulkhead::cgroup::Version::V2)
        .map(|x| x.mount.clone())
        .filter(|m| m.join("io.cost.qos").exists())
    else {
        h.write_plan_with(
            &[("w", "IOWeight = 25")],
            "\n[iocost]\ndevices = [\"/var/tmp\"]\n",
        );
        let o = h.bulkhead(&["apply"]);
        let err = crate::common::stderr(&o);
        h.report(
            "[iocost]",
            "no io.cost on this host's cgroup2 root: apply refuses the plan, nothing changed",
        );
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("[iocost] cannot be applied on this host"),
            "{err}"
        );
        return;
    };
    let (l, what) = none_disk(&h, 512, 40);
    let qos_line = || {
        let t = std::fs::read_to_string(root.join("io.cost.qos")).unwrap_or_default();
        t.lines()
            .find(|x| x.starts_with(&format!("{} ", l.num)))
            .map(|x| x.to_string())
    };
    let before = qos_line();
    let window = 5.0;
    let measure = || {
        let mut a = reader_until_stopped(&h, "low", &l, 0, 256);
        let mut b = reader_until_stopped(&h, "high", &l, 256, 256);
        wait_reading(&h, &l, &[("low", &a), ("high", &b)]);
        let s0 = (
            io_bytes(&h, "low", &l.num).0,
            io_bytes(&h, "high", &l.num).0,
        );
        std::thread::sleep(Duration::from_secs_f64(window));
        let s1 = (
            io_bytes(&h, "low", &l.num).0,
            io_bytes(&h, "high", &l.num).0,
        );
        stop(&mut [&mut a, &mut b]);
        let (lo, hi) = (s1.0 - s0.0, s1.1 - s0.1);
        (lo, hi, hi as f64 / lo.max(1) as f64)
    };
    let slices = [("low", "IOWeight = 25"), ("high", "IOWeight = 100")];
    h.apply(&slices);
    let (off_lo, off_hi, off) = measure();

    // The model, measured on the disk itself (a null_blk holds no data).
    let o = h.bulkhead(&[
        "iocost",
        "calibrate",
        &l.dev,
        "--destroy-data",
        "--seconds",
        "1",
        "--json",
    ]);
    assert!(
        o.status.success(),
        "calibrate: {}",
        crate::common::stderr(&o)
    );
    let cal: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &cal["coefs"];
    let model = format!(
        "{{ rbps = {}, rseqiops = {}, rrandiops = {}, wbps = {}, wseqiops = {}, wrandiops = {} }}",
        c["rbps"], c["rseqiops"], c["rrandiops"], c["wbps"], c["wseqiops"], c["wrandiops"]
    );
    let section = format!(
        "\n[iocost]\ndevices = [\"{}\"]\nrlat = \"50ms\"\nmin = \"25%\"\nmax = \"100%\"\nmodel = {model}\n",
        l.dev
    );
    h.write_plan_with(&slices, &section);
    let o = h.bulkhead(&["apply", "--dry-run"]);
    let planned = crate::common::stdout(&o);
    assert!(
        planned.contains(&format!("io.cost.qos = \"{} enable=1 ctrl=user", l.num)),
        "{planned}"
    );
    let o = h.bulkhead(&["apply"]);
    assert!(o.status.success(), "apply: {}", crate::common::stderr(&o));
    let on_line = qos_line().unwrap_or_default();
    assert!(on_line.contains("enable=1"), "io.cost.qos: {on_line}");
    let w = |n: &str| {
        std::fs::read_to_string(h.dir("io", n).unwrap().join("io.weight")).unwrap_or_default()
    };
    assert!(w("low").contains("default 25"), "io.weight: {}", w("low"));
    assert!(
        w("high").contains("default 100"),
        "io.weight: {}",
        w("high")
    );
    let (on_lo, on_hi, on) = measure();

    let o = h.bulkhead(&["destroy", "--kill"]);
    assert!(o.status.success(), "destroy: {}", crate::common::stderr(&o));
    let after = qos_line();
    let mib = |b: u64| b as f64 / 1048576.0;
    h.report(
        "[iocost] + IOWeight",
        &format!(
            "25:100 on {what}, direct reads over {window} s: without io.cost {:.1}:{:.1} MiB (ratio {off:.2}), with io.cost (model {model}) {:.1}:{:.1} MiB (ratio {on:.2}, want 4 -40%..+50%); io.cost.qos after destroy: {:?}",
            mib(off_lo), mib(off_hi), mib(on_lo), mib(on_hi), after
        ),
    );
    match &before {
        None => assert!(
            after.as_deref().is_none_or(|a| a.contains("enable=0")),
            "destroy left io.cost on: {after:?}"
        ),
        Some(b) => assert!(
            after.as_deref().is_some_and(|a| a.contains(
                b.split_whitespace()
                    .find(|t| t.starts_with("enable="))
                    .unwrap()
            )),
            "before {b}, after {after:?}"
        ),
    }
    assert!(
        (2.4..=6.0).contains(&on),
        "io.cost: IOWeight 25:100 gave {on:.2}"
    );
}
