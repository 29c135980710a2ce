//! Pressure stall information: reading a pressure file's totals, and PSI triggers (a stall
//! threshold in a time window, written to the pressure file; the kernel wakes poll() with
//! POLLPRI when it is crossed). See Documentation/accounting/psi.rst.

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// The shortest and longest trigger windows the kernel takes.
pub const WINDOW_MIN: Duration = Duration::from_millis(500);
pub const WINDOW_MAX: Duration = Duration::from_secs(10);

/// Stall totals of one pressure file, microseconds since boot (or since the cgroup exists).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub some_us: u64,
    /// `None` where the file has no `full` line (the system-wide cpu file before 5.13).
    pub full_us: Option<u64>,
}

/// Parse `some avg10=.. total=N` / `full ... total=N`.
pub fn parse_totals(text: &str) -> Option<Totals> {
    let total = |kind: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(kind))?;
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix("total="))?
            .parse()
            .ok()
    };
    Some(Totals {
        some_us: total("some ")?,
        full_us: total("full "),
    })
}

pub fn read_totals(path: &Path) -> Option<Totals> {
    parse_totals(&std::fs::read_to_string(path).ok()?)
}

/// A registered trigger: open as long as this lives.
pub struct Trigger {
    file: File,
}

impl Trigger {
    /// Ask for a wake-up when tasks of the cgroup (or the system, for /proc/pressure/*)
    /// stall for more than `stall` within any `window` (`full`: all of them at once).
    pub fn new(
        path: &Path,
        full: bool,
        stall: Duration,
        window: Duration,
    ) -> std::io::Result<Trigger> {
        let window = window.clamp(WINDOW_MIN, WINDOW_MAX);
        let stall = stall.clamp(Duration::from_micros(1), window);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let kind = if full { "full" } else { "some" };
        let line = format!("{kind} {} {}\0", stall.as_micros(), window.as_micros());
        file.write_all(line.as_bytes())?;
        Ok(Trigger { file })
    }
}

/// What woke [`wait`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Woke {
    /// Triggers that fired, by index.
    pub triggers: Vec<usize>,
    /// `also` fds that became readable (or hung up), by index.
    pub also: Vec<usize>,
}

/// Wait until a trigger fires, one of `also` is readable, or `timeout` passes. An error
/// means a trigger's cgroup went away (POLLERR) or poll failed.
pub fn wait(
    triggers: &[Trigger],
    also: &[std::os::fd::BorrowedFd<'_>],
    timeout: Duration,
) -> std::io::Result<Woke> {
    let mut fds: Vec<PollFd<'_>> = triggers
        .iter()
        .map(|t| PollFd::new(&t.file, PollFlags::PRI))
        .chain(also.iter().map(|fd| PollFd::new(fd, PollFlags::IN)))
        .collect();
    let ts = Timespec::try_from(timeout).unwrap_or(Timespec {
        tv_sec: 1,
        tv_nsec: 0,
    });
    match poll(&mut fds, Some(&ts)) {
        Ok(_) => {}
        Err(rustix::io::Errno::INTR) => return Ok(Woke::default()),
        Err(e) => return Err(e.into()),
    }
    let mut woke = Woke::default();
    for (i, fd) in fds.iter().enumerate() {
        let r = fd.revents();
        if i < triggers.len() {
            if r.contains(PollFlags::ERR) {
                return Err(std::io::Error::other(format!(
                    "PSI trigger {i} failed (its cgroup was removed?)"
                )));
            }
            if r.contains(PollFlags::PRI) {
                woke.triggers.push(i);
            }
        } else if r.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
            woke.also.push(i - triggers.len());
        }
    }
    Ok(woke)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn totals() {
        let t = parse_totals("some avg10=0.00 avg60=0.93 avg300=2.56 total=238940003\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n").unwrap();
        assert_eq!(t.some_us, 238940003);
        assert_eq!(t.full_us, Some(7));
        assert!(parse_totals("garbage").is_none());
    }

    #[test]
    fn wait_wakes_on_other_fds_and_times_out() {
        let (r, w) = crate::fd::pipe().unwrap();
        let woke = wait(&[], &[r.as_fd()], Duration::from_millis(5)).unwrap();
        assert_eq!(woke, Woke::default());
        rustix::io::write(&w, b"x").unwrap();
        let woke = wait(&[], &[r.as_fd()], Duration::from_secs(5)).unwrap();
        assert_eq!(woke.also, vec![0]);
    }

    #[test]
    fn a_trigger_registers_or_is_refused_by_the_kernel() {
        let p = Path::new("/proc/pressure/cpu");
        if !p.exists() {
            return;
        }
        // Some kernels (this project's test VM among them) refuse triggers with EINVAL or
        // EOPNOTSUPP; the guard then reads the files every period.
        match Trigger::new(p, false, WINDOW_MIN, WINDOW_MIN) {
            Ok(t) => {
                let woke = wait(&[t], &[], Duration::from_millis(10)).unwrap();
                assert!(woke.triggers.len() <= 1);
            }
            Err(e) => assert!(
                matches!(
                    e.raw_os_error(),
                    Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::EPERM)
                ),
                "{e}"
            ),
        }
    }
}
