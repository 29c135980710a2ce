//! The scheduler as seen per task: custom EEVDF slices (Linux 6.12+: `sched_setattr` with
//! SCHED_OTHER and `sched_runtime`), the threads of a process, and their run-queue waits
//! (/proc/PID/task/TID/schedstat).

use std::io;

/// struct sched_attr from linux/sched/types.h (the fields up to `sched_util_max`, 56 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

const SCHED_OTHER: u32 = 0;
const SCHED_BATCH: u32 = 3;
/// The bounds the kernel clamps a custom slice to.
pub const SLICE_MIN_NS: u64 = 100_000;
pub const SLICE_MAX_NS: u64 = 100_000_000;

fn getattr(tid: i32) -> io::Result<SchedAttr> {
    let mut a = SchedAttr::default();
    // SAFETY: sched_getattr writes at most `size` bytes into the local struct.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &raw mut a,
            std::mem::size_of::<SchedAttr>() as u32,
            0u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(a)
}

fn setattr(tid: i32, a: &SchedAttr) -> io::Result<()> {
    // SAFETY: sched_setattr reads the local struct, whose `size` field says how much.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, a as *const SchedAttr, 0u32) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A task's custom slice in nanoseconds (None: the default, or a policy without slices).
pub fn slice_of(tid: i32) -> io::Result<Option<u64>> {
    let a = getattr(tid)?;
    let fair = matches!(a.sched_policy, SCHED_OTHER | SCHED_BATCH);
    Ok((fair && a.sched_runtime > 0).then_some(a.sched_runtime))
}

/// Give a task (a thread ID; 0 is the caller) a custom slice, keeping its policy and nice
/// value. Tasks under another policy than SCHED_OTHER/SCHED_BATCH (real-time, idle) are left
/// alone (Ok(false)). EINVAL from a kernel without custom slices is returned as such.
pub fn set_slice(tid: i32, ns: u64) -> io::Result<bool> {
    let cur = getattr(tid)?;
    if !matches!(cur.sched_policy, SCHED_OTHER | SCHED_BATCH) {
        return Ok(false);
    }
    if cur.sched_runtime == ns {
        return Ok(true);
    }
    let a = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: cur.sched_policy,
        sched_nice: cur.sched_nice,
        sched_runtime: ns.clamp(SLICE_MIN_NS, SLICE_MAX_NS),
        ..Default::default()
    };
    setattr(tid, &a)?;
    Ok(true)
}

/// Whether this kernel takes custom slices (Linux 6.12+): the caller's slice is set to 3ms,
/// read back, and put back as it was.
pub fn custom_slices_supported() -> bool {
    let Ok(cur) = getattr(0) else {
        return false;
    };
    if !matches!(cur.sched_policy, SCHED_OTHER | SCHED_BATCH) {
        return crate::host::kernel_at_least(6, 12);
    }
    const PROBE: u64 = 3_000_000;
    let ok = set_slice(0, PROBE).is_ok() && slice_of(0).ok().flatten() == Some(PROBE);
    let back = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_runtime: cur.sched_runtime,
        ..cur
    };
    let _ = setattr(0, &back);
    ok
}

/// Make the calling thread SCHED_FIFO at `priority` (1 is the lowest real-time priority);
/// threads and processes it starts afterwards inherit it.
pub fn set_fifo(priority: i32) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler reads the local sched_param; 0 is the calling thread.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const p) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pin the calling thread to one CPU (sched_setaffinity).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    use rustix::thread::{sched_setaffinity, CpuSet};
    if cpu >= CpuSet::MAX_CPU {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).map_err(Into::into)
}

/// The thread IDs of a process (/proc/PID/task).
pub fn threads(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// /proc/PID/task/TID/schedstat: time on CPU (ns), time waiting on a run queue (ns), and
/// the number of times it was scheduled in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedStat {
    pub run_ns: u64,
    pub wait_ns: u64,
    pub slices: u64,
}

pub fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some(SchedStat {
        run_ns: it.next()??,
        wait_ns: it.next()??,
        slices: it.next()??,
    })
}

pub fn schedstat(pid: i32, tid: i32) -> Option<SchedStat> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    parse_schedstat(&t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_size_and_schedstat() {
        assert_eq!(std::mem::size_of::<SchedAttr>(), 56);
        assert_eq!(
            parse_schedstat("123 456 7\n"),
            Some(SchedStat {
                run_ns: 123,
                wait_ns: 456,
                slices: 7
            })
        );
        assert_eq!(parse_schedstat("1 2"), None);
        assert!(threads(std::process::id() as i32).contains(&(std::process::id() as i32)));
    }

    #[test]
    fn a_thread_is_pinned_and_a_cpu_out_of_range_refused() {
        assert!(pin_to_cpu(usize::MAX).is_err());
        let now = rustix::thread::sched_getaffinity(None).unwrap();
        let first = (0..rustix::thread::CpuSet::MAX_CPU).find(|c| now.is_set(*c));
        let cpu = std::thread::spawn(move || {
            pin_to_cpu(first.unwrap()).unwrap();
            rustix::thread::sched_getaffinity(None).unwrap().count()
        });
        assert_eq!(cpu.join().unwrap(), 1);
    }

    /// Custom slices on this kernel: set, read back, and inherited by threads and children.
    #[test]
    fn slices_are_set_and_inherited() {
        if !custom_slices_supported() {
            eprintln!("SKIPPED: no custom slices on this kernel");
            return;
        }
        let t = std::thread::spawn(|| {
            let me = rustix::thread::gettid().as_raw_nonzero().get();
            assert!(set_slice(0, 500_000).unwrap());
            assert_eq!(slice_of(me).unwrap(), Some(500_000));
            let child = std::thread::spawn(|| slice_of(0).unwrap()).join().unwrap();
            let forked = std::process::Command::new("true").status().is_ok();
            (child, forked)
        });
        let (child, _) = t.join().unwrap();
        assert_eq!(child, Some(500_000), "a new thread inherits the slice");
    }
}
