//! Where the database's threads wait, by sampling: a thread looks at every thread of the
//! server slice a few dozen times a second, and for each one in uninterruptible sleep (state
//! D: waiting for the disk, a journal commit, a throttle, a lock) reads its kernel stack
//! (/proc/PID/task/TID/stack, root only) and files it under the system call it is in and the
//! wait point nearest the top of the stack (`fsync / journal commit (jbd2)`). An off-CPU
//! profile in miniature, with no tracing set up and nothing left behind.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Wait points, matched against the stack's frames from the top (innermost) down: the first
/// frame that matches any of them names the wait.
const POINTS: &[(&str, &[&str])] = &[
    (
        "journal commit (jbd2)",
        &["jbd2_log_wait_commit", "jbd2_complete_transaction"],
    ),
    (
        "journal: buffer held by the committing transaction",
        &["do_get_write_access"],
    ),
    (
        "journal: waiting to start a transaction",
        &[
            "wait_transaction_locked",
            "wait_transaction_switching",
            "add_transaction_credits",
            "start_this_handle",
        ],
    ),
    ("io.latency throttle", &["blkcg_iolatency_throttle"]),
    ("io.cost throttle", &["ioc_rqos_throttle"]),
    ("writeback throttling (wbt)", &["wbt_wait"]),
    ("dirty-page throttling", &["balance_dirty_pages"]),
    (
        "no free request on the device (queue full)",
        &["blk_mq_get_tag"],
    ),
    (
        "its data being written (writeback)",
        &[
            "folio_wait_writeback",
            "wait_on_page_writeback",
            "__filemap_fdatawait_range",
            "filemap_fdatawait_range",
            "filemap_fdatawait_keep_errors",
        ],
    ),
    (
        "a metadata block being written (inode table, bitmap)",
        &[
            "__wait_on_buffer",
            "sync_dirty_buffer",
            "__sync_dirty_buffer",
        ],
    ),
    (
        "device cache flush",
        &["blkdev_issue_flush", "submit_bio_wait"],
    ),
    (
        "direct I/O",
        &["iomap_dio_rw", "__iomap_dio_rw", "__blockdev_direct_IO"],
    ),
    (
        "reading a page (cache miss)",
        &[
            "filemap_get_pages",
            "filemap_read",
            "filemap_fault",
            "filemap_update_page",
            "__bread_gfp",
            "ext4_read_bh",
        ],
    ),
    (
        "memory reclaim",
        &[
            "try_to_free_mem_cgroup_pages",
            "mem_cgroup_handle_over_high",
            "shrink_node",
            "__alloc_pages_slowpath",
        ],
    ),
    (
        "frozen (cgroup freezer)",
        &["do_freezer_trap", "__refrigerator"],
    ),
    (
        "a lock (inode, journal, mm)",
        &[
            "rwsem_down_write_slowpath",
            "rwsem_down_read_slowpath",
            "__mutex_lock",
            "mutex_lock",
        ],
    ),
];

/// The function names of a /proc/PID/stack text, innermost first.
pub fn frames(stack: &str) -> Vec<&str> {
    stack
        .lines()
        .filter_map(|l| {
            let f = l.split_whitespace().nth(1)?;
            Some(f.split('+').next().unwrap_or(f))
        })
        .collect()
}

/// The system call (or page fault) a stack is in, from its outer frames.
fn context(frames: &[&str]) -> String {
    for f in frames.iter().rev() {
        for p in ["__x64_sys_", "__arm64_sys_", "__ia32_sys_", "__do_sys_"] {
            if let Some(s) = f.strip_prefix(p) {
                return match s {
                    "fdatasync" | "fsync" | "sync_file_range" => "fsync".into(),
                    "pwrite64" | "pwritev" | "pwritev2" | "writev" => "write".into(),
                    "pread64" | "preadv" | "preadv2" | "readv" => "read".into(),
                    other => other.into(),
                };
            }
        }
    }
    if frames.iter().any(|f| f.contains("page_fault")) {
        return "page fault".into();
    }
    "kernel".into()
}

/// `fsync / journal commit (jbd2)`: the call and the wait point of one stack.
pub fn classify(stack: &str) -> String {
    let fr = frames(stack);
    let point = fr
        .iter()
        .find_map(|f| {
            POINTS
                .iter()
                .find(|(_, names)| names.contains(f))
                .map(|(p, _)| *p)
        })
        .map(String::from)
        .unwrap_or_else(|| {
            // Unknown: name the first frame that is not the scheduler itself.
            fr.iter()
                .find(|f| {
                    !["schedule", "io_schedule", "__schedule", "schedule_timeout"]
                        .iter()
                        .any(|s| f.starts_with(s))
                        && !f.starts_with("__switch_to")
                })
                .map_or("unknown".into(), |f| format!("in {f}"))
        });
    format!("{} / {point}", context(&fr))
}

/// One class of waits over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitClass {
    /// `fsync / journal commit (jbd2)`
    pub what: String,
    /// Share of the database's blocked samples.
    pub share: f64,
}

/// What the sampling found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Waits {
    pub samples: u64,
    pub period_ms: f64,
    /// The database's threads, on average.
    pub threads: f64,
    /// Of them, in uninterruptible sleep (blocked on I/O, a journal, a throttle), on average.
    pub blocked: f64,
    /// Of them, running or runnable, on average.
    pub running: f64,
    /// Where the blocked samples were, largest first.
    pub classes: Vec<WaitClass>,
}

impl Waits {
    /// The top classes in a few words: `fsync / journal commit (jbd2) 71%, ...`.
    pub fn summary(&self, n: usize) -> String {
        if self.samples == 0 {
            return "no samples".into();
        }
        if self.classes.is_empty() {
            return format!("never blocked ({} samples)", self.samples);
        }
        self.classes
            .iter()
            .take(n)
            .map(|c| format!("{} {:.0}%", c.what, c.share * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[derive(Default)]
struct Tally {
    ticks: u64,
    threads: u64,
    blocked: u64,
    running: u64,
    classes: BTreeMap<String, u64>,
}

impl Tally {
    fn into_waits(self, period: Duration) -> Waits {
        let n = self.ticks.max(1) as f64;
        let blocked: u64 = self.classes.values().sum();
        let mut classes: Vec<WaitClass> = self
            .classes
            .into_iter()
            .map(|(what, c)| WaitClass {
                what,
                share: c as f64 / blocked.max(1) as f64,
            })
            .collect();
        classes.sort_by(|a, b| b.share.total_cmp(&a.share));
        Waits {
            samples: self.ticks,
            period_ms: period.as_secs_f64() * 1e3,
            threads: self.threads as f64 / n,
            blocked: self.blocked as f64 / n,
            running: self.running as f64 / n,
            classes,
        }
    }
}

/// The state letter of /proc/PID/task/TID/stat (after the command in parentheses).
fn state_of(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Samples the threads of the processes `pids` returns (read again every second) every
/// `period`, after `delay`, until finished.
pub struct WaitSampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Tally>>,
    period: Duration,
}

impl WaitSampler {
    pub fn start(
        pids: Box<dyn Fn() -> Vec<i32> + Send>,
        delay: Duration,
        period: Duration,
    ) -> WaitSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("wait-sampler".into())
            .spawn(move || sample_loop(&*pids, delay, period, &flag))
            .ok();
        WaitSampler {
            stop,
            handle,
            period,
        }
    }

    pub fn finish(mut self) -> Waits {
        self.stop.store(true, Ordering::SeqCst);
        let t = self
            .handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        t.into_waits(self.period)
    }
}

impl Drop for WaitSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn sample_loop(
    pids: &dyn Fn() -> Vec<i32>,
    delay: Duration,
    period: Duration,
    stop: &AtomicBool,
) -> Tally {
    let mut t = Tally::default();
    let start = Instant::now() + delay;
    while Instant::now() < start {
        if stop.load(Ordering::SeqCst) {
            return t;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut tasks: Vec<PathBuf> = Vec::new();
    let mut listed: Option<Instant> = None;
    let mut next = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        if listed.is_none_or(|l| l.elapsed() >= Duration::from_secs(1)) {
            tasks = pids()
                .into_iter()
                .flat_map(|p| {
                    bulkhead_sys::sched::threads(p)
                        .into_iter()
                        .map(move |tid| PathBuf::from(format!("/proc/{p}/task/{tid}")))
                })
                .take(1024)
                .collect();
            listed = Some(Instant::now());
        }
        t.ticks += 1;
        for task in &tasks {
            let Ok(stat) = std::fs::read_to_string(task.join("stat")) else {
                continue;
            };
            t.threads += 1;
            match state_of(&stat) {
                Some('R') => t.running += 1,
                Some('D') => {
                    t.blocked += 1;
                    let stack = std::fs::read_to_string(task.join("stack")).unwrap_or_default();
                    if !stack.trim().is_empty() {
                        *t.classes.entry(classify(&stack)).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    const FSYNC_JBD2: &str = "[<0>] jbd2_log_wait_commit+0xb0/0x120 [jbd2]\n[<0>] ext4_sync_file+0x1b4/0x3a0 [ext4]\n[<0>] __x64_sys_fdatasync+0x4b/0x90\n[<0>] do_syscall_64+0x55/0xb0\n[<0>] entry_SYSCALL_64_after_hwframe+0x6e/0xd8\n";
    const WBT: &str = "[<0>] rq_qos_wait+0xbf/0x130\n[<0>] wbt_wait+0x9f/0x100\n[<0>] __rq_qos_throttle+0x24/0x40\n[<0>] blk_mq_submit_bio+0x1c8/0x5e0\n[<0>] submit_bio_noacct_nocheck+0x2a8/0x330\n[<0>] ext4_io_submit+0x24/0x40 [ext4]\n[<0>] ext4_do_writepages+0x3f0/0xcb0 [ext4]\n[<0>] do_writepages+0xcf/0x1e0\n[<0>] filemap_fdatawrite_wbc+0x63/0x90\n[<0>] file_write_and_wait_range+0x5b/0xd0\n[<0>] ext4_sync_file+0x6c/0x3a0 [ext4]\n[<0>] __x64_sys_fsync+0x3b/0x70\n[<0>] do_syscall_64+0x55/0xb0\n";
    const WRITEBACK: &str = "[<0>] folio_wait_bit_common+0x13d/0x350\n[<0>] folio_wait_writeback+0x28/0x80\n[<0>] __filemap_fdatawait_range+0x90/0x100\n[<0>] file_write_and_wait_range+0x8b/0xd0\n[<0>] ext4_sync_file+0x6c/0x3a0 [ext4]\n[<0>] __x64_sys_fdatasync+0x4b/0x90\n";

    #[test]
    fn stacks_are_filed_under_call_and_wait_point() {
        assert_eq!(classify(FSYNC_JBD2), "fsync / journal commit (jbd2)");
        assert_eq!(classify(WBT), "fsync / writeback throttling (wbt)");
        assert_eq!(
            classify(WRITEBACK),
            "fsync / its data being written (writeback)"
        );
        assert_eq!(
            classify("[<0>] io_schedule+0x1/0x2\n[<0>] something_new+0x1/0x2\n[<0>] __x64_sys_write+0x1/0x2\n"),
            "write / in something_new"
        );
    }

    #[test]
    fn task_state_and_tally() {
        assert_eq!(state_of("12 (redis-server) D 1 2 3"), Some('D'));
        assert_eq!(state_of("12 (a) b) R 1"), Some('R'));
        let mut t = Tally {
            ticks: 4,
            threads: 8,
            blocked: 4,
            running: 2,
            ..Default::default()
        };
        t.classes.insert("fsync / journal commit (jbd2)".into(), 3);
        t.classes.insert("fsync / device cache flush".into(), 1);
        let w = t.into_waits(Duration::from_millis(50));
        assert_eq!((w.threads, w.blocked, w.running), (2.0, 1.0, 0.5));
        assert_eq!(w.classes[0].share, 0.75);
        assert!(w
            .summary(1)
            .starts_with("fsync / journal commit (jbd2) 75%"));
    }
}
