//! Processes: signals to a PID, liveness, start times from /proc, pidfds, and the fork of a
//! detached worker.

use std::os::fd::{AsFd, OwnedFd};

/// kill(2).
pub fn kill(pid: i32, sig: i32) -> std::io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    let Some(named) = rustix::process::Signal::from_named_raw(sig) else {
        return kill_realtime(pid.as_raw_nonzero().get(), sig);
    };
    rustix::process::kill_process(pid, named).map_err(Into::into)
}

/// A real-time signal (SIGRTMIN+N, which rustix does not name: a booted systemd's stop
/// request is SIGRTMIN+3).
fn kill_realtime(pid: i32, sig: i32) -> std::io::Result<()> {
    if !(libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&sig) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill with integer arguments only.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this process runs with effective UID 0.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// This process's effective UID.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether this process holds CAP_SYS_ADMIN in its effective set: what the kernel asks of a
/// reader of `trusted.*` extended attributes (without it they are invisible, not refused).
/// Known up front, so that a missing attribute is never mistaken for "not set".
pub fn has_cap_sys_admin() -> bool {
    rustix::thread::capabilities(None).is_ok_and(|c| {
        c.effective
            .contains(rustix::thread::CapabilitySet::SYS_ADMIN)
    })
}

/// Whether a process with this PID exists (kill with signal 0).
pub fn alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    rustix::process::test_kill_process(pid).is_ok()
}

/// A pidfd for `pid` (Linux 5.3+).
pub fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).map_err(Into::into)
}

/// One process a caller decided on, held by a pidfd and known by its start time: the PID it
/// writes into a cgroup is checked, before and after, to still name that process (a PID
/// freed by an exit is soon another process's; issue 40 #7).
pub struct Held {
    pid: i32,
    start: u64,
    fd: OwnedFd,
}

impl Held {
    /// Hold `pid` if it is still the process started at `start` (the pidfd is opened first,
    /// then the start time read: a match means the pidfd is that process). None: it exited,
    /// or its PID names another process now.
    pub fn hold(pid: i32, start: u64) -> Option<Held> {
        let fd = pidfd_open(pid).ok()?;
        let held = Held { pid, start, fd };
        held.still_same().then_some(held)
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its PID names another process now (one with another start time): it exited and the
    /// number was given again. An exited process whose PID names nothing, or still names it
    /// (a zombie not yet reaped), was not reused.
    pub fn pid_reused(&self) -> bool {
        u32::try_from(self.pid)
            .ok()
            .and_then(start_time)
            .is_some_and(|s| s != self.start)
    }

    /// It has not exited (its pidfd is not readable) and its PID still has its start time.
    pub fn still_same(&self) -> bool {
        !crate::fd::any_readable(&[self.fd.as_fd()])
            && u32::try_from(self.pid)
                .ok()
                .and_then(start_time)
                .is_some_and(|s| s == self.start)
    }
}

/// Field 22 (starttime, clock ticks after boot) of a /proc/PID/stat text.
pub fn parse_stat_start(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Field 4 (the parent's PID) of a /proc/PID/stat text.
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The parent of a process, as this process's PID namespace numbers it.
pub fn parent(pid: u32) -> Option<u32> {
    parse_stat_ppid(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether `pid` is `root` or one of its descendants (the readiness sockets count a
/// datagram only from the process they started or its children).
pub fn descends_from(pid: u32, root: u32) -> bool {
    let mut p = pid;
    // A chain longer than this is not a process tree bulkhead started.
    for _ in 0..1024 {
        if p == root {
            return true;
        }
        if p <= 1 {
            return false;
        }
        match parent(p) {
            Some(parent) => p = parent,
            None => return false,
        }
    }
    false
}

/// The first child of a process's main thread (/proc/PID/task/PID/children).
pub fn first_child(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The network namespace of a process, opened to enter it (/proc/PID/ns/net, a link the
/// kernel resolves to the namespace itself).
pub fn open_netns(pid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    Ok(std::fs::File::open(format!("/proc/{pid}/ns/net"))?.into())
}

#[cfg(test)]
mod stat_tests {
    #[test]
    fn cpu_fields() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 999 0 0";
        assert_eq!(super::parse_stat_cpu(stat), Some(12));
        assert_eq!(super::parse_stat_start(stat), Some(999));
        assert_eq!(super::parse_stat_ppid(stat), Some(1));
        assert_eq!(
            super::parent(std::process::id()),
            Some(std::os::unix::process::parent_id())
        );
    }

    #[test]
    fn a_child_and_the_network_namespace() {
        // A shell whose one thread starts a child: it is the shell's first child.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut first = None;
        while first.is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            first = super::first_child(sh.id());
        }
        let ns = super::open_netns(sh.id());
        let grandchild = first.map(super::parent);
        let _ = sh.kill();
        let _ = sh.wait();
        if let Some(p) = first {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(p as i32).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
        assert_eq!(
            grandchild,
            Some(Some(sh.id())),
            "the sleep is the shell's child"
        );
        let ns = ns.unwrap();
        let mine = std::fs::metadata("/proc/self/ns/net").unwrap();
        let st = rustix::fs::fstat(&ns).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((st.st_dev, st.st_ino), (mine.dev(), mine.ino()));
        assert!(super::first_child(u32::MAX).is_none());
    }
}

/// Field 9 (flags) of a /proc/PID/stat text.
pub fn parse_stat_flags(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(6)?.parse().ok()
}

/// Fields 14 and 15 (utime + stime, clock ticks, all threads) of a /proc/PID/stat text.
pub fn parse_stat_cpu(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut it = rest.split_whitespace().skip(11);
    let u: u64 = it.next()?.parse().ok()?;
    let s: u64 = it.next()?.parse().ok()?;
    Some(u + s)
}

/// CPU time a process used (user and system, all its threads).
pub fn cpu_time(pid: u32) -> Option<std::time::Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_stat_cpu(&text)?;
    Some(std::time::Duration::from_secs_f64(
        ticks as f64 / clock_ticks() as f64,
    ))
}

/// Seconds since the epoch, now.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The start time of a process (clock ticks after boot), None when it is gone.
pub fn start_time(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_start(&text)
}

/// PF_KTHREAD in /proc/PID/stat's flags.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Whether `pid` is a kernel thread (None: no such process).
pub fn is_kernel_thread(pid: i32) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_stat_flags(&stat).unwrap_or(0) & PF_KTHREAD != 0)
}

/// Boot time, seconds since the epoch (`btime` of /proc/stat).
pub fn boot_time() -> Option<f64> {
    let t = std::fs::read_to_string("/proc/stat").ok()?;
    t.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Clock ticks per second, the unit of /proc start times.
pub fn clock_ticks() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

/// glibc's version, `(2, 36)`.
pub fn glibc_version() -> Option<(u32, u32)> {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let s = v.to_str().ok()?;
    let mut it = s.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??))
}

/// Run `work` in a process of its own session with stdio on /dev/null, and return at once
/// (false when it could not be forked). With `reap`, it runs as a grandchild (the
/// intermediate child is waited for), so a long-lived caller keeps no zombie; without,
/// it is a child that the caller's exit hands to init.
///
/// The caller must be single-threaded, or `work` must only call async-signal-safe code: it
/// runs in a forked copy of the process.
pub fn detach(reap: bool, work: impl FnOnce() -> bool) -> bool {
    // SAFETY: fork in a process whose other threads (if any) the caller vouches for; the
    // child only sets up its session and stdio, runs `work` and _exits, never returning into
    // the caller's frames.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid > 0 {
            if reap {
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            return true;
        }
        libc::setsid();
        if reap && libc::fork() != 0 {
            libc::_exit(0);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        libc::_exit(if work() { 0 } else { 1 })
    }
}

/// Fork; the child runs `child` and exits with the code it returns, without running the
/// parent's destructors or atexit handlers. Returns the child's PID in the parent.
///
/// The caller must be single-threaded (what `child` may do after a fork of a multi-threaded
/// process is very little).
pub fn fork_child(child: impl FnOnce() -> i32) -> std::io::Result<i32> {
    // SAFETY: fork in a single-threaded caller (documented above); the child never returns
    // into the caller's frames: it runs `child` and _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        let code = child();
        // SAFETY: leaving the forked child without unwinding into the parent's state.
        unsafe { libc::_exit(code) };
    }
    Ok(pid)
}

/// waitpid(2) for one child: its raw wait status once it has exited, None while it runs
/// (`block` false) or when it is not our child. EINTR is retried.
pub fn wait(pid: i32, block: bool) -> Option<i32> {
    let flags = if block { 0 } else { libc::WNOHANG };
    loop {
        let mut st = 0;
        // SAFETY: waitpid writes the status into a local integer.
        let r = unsafe { libc::waitpid(pid, &raw mut st, flags) };
        if r == pid {
            return Some(st);
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

/// Whether `fd` becomes readable within `timeout_ms` milliseconds.
pub fn poll_readable(fd: std::os::fd::BorrowedFd<'_>, timeout_ms: i32) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let t = Timespec {
        tv_sec: (timeout_ms.max(0) / 1000) as i64,
        tv_nsec: ((timeout_ms.max(0) % 1000) as i64) * 1_000_000,
    };
    poll(&mut fds, Some(&t)).is_ok_and(|n| n > 0)
}

/// Before `cmd` execs, write "0" to each of these `cgroup.procs` files: the child joins
/// the cgroups and runs no instruction of the command outside them.
pub fn join_cgroups_before_exec(
    cmd: &mut std::process::Command,
    procs_files: &[std::path::PathBuf],
) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    // Everything the child needs is allocated before fork: between fork and exec only
    // async-signal-safe calls (open, write, close) are made.
    let paths: Vec<std::ffi::CString> = procs_files
        .iter()
        .map(|p| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other))
        .collect::<std::io::Result<_>>()?;
    // SAFETY: the closure only calls async-signal-safe functions (open, write, close) on
    // buffers built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for p in &paths {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
            }
            Ok(())
        });
    }
    Ok(())
}

/// Before `cmd` execs: set `pdeathsig` (the child gets it when its parent dies), and put
/// `fds` at 3, 4, ... (the systemd socket passing protocol), blocking, as systemd passes
/// them. The caller keeps `fds` open until the spawn returned.
pub fn pass_fds_before_exec(cmd: &mut std::process::Command, fds: &[OwnedFd], pdeathsig: i32) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the closure only calls async-signal-safe functions (prctl, dup2, fcntl) on a
    // vector built before the fork; the descriptors stay open until the spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, pdeathsig as libc::c_ulong);
            for (i, &fd) in raw.iter().enumerate() {
                let to = 3 + i as i32;
                if libc::dup2(fd, to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let fl = libc::fcntl(to, libc::F_GETFL);
                libc::fcntl(to, libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
            Ok(())
        });
    }
}

/// Before `cmd` execs: the child gets `sig` when its parent dies (PR_SET_PDEATHSIG).
pub fn pdeathsig_before_exec(cmd: &mut std::process::Command, sig: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure makes one async-signal-safe call (prctl) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong);
            Ok(())
        });
    }
}

/// Before `cmd` execs: the child ignores `sig`, and an ignored signal stays ignored across
/// exec (as systemd's `IgnoreSIGPIPE=yes` starts a service).
pub fn ignore_before_exec(cmd: &mut std::process::Command, sig: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure makes one async-signal-safe call (signal) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(sig, libc::SIG_IGN);
            Ok(())
        });
    }
}

#[cfg(test)]
mod exec_tests {
    #[test]
    fn the_child_ignores_the_signal() {
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "grep SigIgn /proc/self/status"]);
        super::ignore_before_exec(&mut cmd, libc::SIGPIPE);
        super::pdeathsig_before_exec(&mut cmd, libc::SIGTERM);
        let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
        let mask = u64::from_str_radix(out.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_ne!(mask & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
    }
}

/// RLIMIT_NOFILE: (soft, hard); u64::MAX for unlimited.
pub fn nofile_limit() -> (u64, u64) {
    let l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    (l.current.unwrap_or(u64::MAX), l.maximum.unwrap_or(u64::MAX))
}

/// Set RLIMIT_NOFILE (raising the hard limit needs CAP_SYS_RESOURCE, and the kernel caps it
/// at /proc/sys/fs/nr_open).
pub fn set_nofile_limit(soft: u64, hard: u64) -> std::io::Result<()> {
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(soft),
            maximum: Some(hard),
        },
    )
    .map_err(Into::into)
}

/// Before `cmd` execs: the soft RLIMIT_NOFILE back to `soft` (a process that raised its own
/// limit gives its children the usual one; select(2) cannot handle descriptors above 1023).
pub fn nofile_soft_before_exec(cmd: &mut std::process::Command, soft: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure makes two system calls (getrlimit, setrlimit), which are
    // async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let mut l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            l.current = Some(soft.min(l.maximum.unwrap_or(u64::MAX)));
            rustix::process::setrlimit(rustix::process::Resource::Nofile, l)?;
            Ok(())
        });
    }
}

/// process_madvise(MADV_COLLAPSE) of `len` bytes at `start` in the process of `pidfd`
/// (Linux 6.1+): how many bytes were advised.
pub fn madvise_collapse(
    pidfd: std::os::fd::BorrowedFd<'_>,
    start: u64,
    len: u64,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let iov = libc::iovec {
        iov_base: start as *mut libc::c_void,
        iov_len: len as usize,
    };
    // SAFETY: the iovec describes memory of the other process; the kernel only reads the
    // iovec itself, which lives on this stack for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            pidfd.as_raw_fd(),
            &raw const iov,
            1usize,
            libc::MADV_COLLAPSE,
            0u32,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// The exit code a shell would show for a wait status: the code, or 128 + the signal.
pub fn exit_code(status: i32, otherwise: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        otherwise
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 40 #7: a decision is about a process, not a number: once it exits (and its PID
    /// is free for another), the hold says so; a start time that is not its own is refused.
    #[test]
    fn a_held_process_is_that_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let start = start_time(child.id()).unwrap();
        assert!(Held::hold(pid, start + 1).is_none(), "another start time");
        let held = Held::hold(pid, start).expect("held");
        assert!(held.still_same() && !held.pid_reused());
        child.kill().unwrap();
        // Exited, not yet reaped (a zombie: WNOWAIT leaves it): not the same process any more,
        // and its PID not given again (it still names the zombie, with its start time).
        // SAFETY: waitid writes only into `info`, a zeroed siginfo_t owned by this frame.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &raw mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(
            start_time(pid as u32),
            Some(start),
            "a zombie keeps its stat"
        );
        assert!(!held.still_same() && !held.pid_reused());
        child.wait().unwrap();
        assert!(
            !held.still_same(),
            "exited: its PID is free for another process"
        );
        assert!(Held::hold(pid, start).is_none());
        // Reaped: its PID names no process (or, on a busy host, another one).
        assert_eq!(held.pid_reused(), start_time(pid as u32).is_some());
    }

    #[test]
    fn stat_fields() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 10";
        assert_eq!(parse_stat_start(stat), Some(12345));
        assert_eq!(parse_stat_flags(stat), Some(4194560));
        assert!(alive(std::process::id()));
        assert!(start_time(std::process::id()).is_some());
        assert_eq!(is_kernel_thread(std::process::id() as i32), Some(false));
    }
}

/// Give this process a nice value (negative: more CPU weight than its neighbours).
pub fn set_nice(nice: i32) -> std::io::Result<()> {
    rustix::process::setpriority_process(None, nice).map_err(Into::into)
}

/// Keep this process's memory resident (current and future pages), so memory pressure
/// elsewhere cannot stall it on page faults.
pub fn lock_memory() -> std::io::Result<()> {
    // SAFETY: mlockall takes flags only and changes no memory contents.
    let r = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Run `f` with the process's umask set to `mask`, then put the old one back. The umask is
/// process-wide: call it before threads that make files start.
pub fn with_umask<R>(mask: u32, f: impl FnOnce() -> R) -> R {
    use rustix::fs::Mode;
    let old = rustix::process::umask(Mode::from_raw_mode(mask & 0o777));
    let r = f();
    rustix::process::umask(old);
    r
}

/// Take an exclusive flock(2) on a file: without `wait`, `Ok(false)` when another process
/// holds it. The lock lasts as long as the file stays open.
pub fn lock_file(f: impl std::os::fd::AsFd, wait: bool) -> std::io::Result<bool> {
    use rustix::fs::{flock, FlockOperation};
    let op = if wait {
        FlockOperation::LockExclusive
    } else {
        FlockOperation::NonBlockingLockExclusive
    };
    match flock(f, op) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) if !wait => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Before `cmd` execs: `sig` back to its default disposition (a process started in the
/// background without job control inherits SIGINT ignored, and exec keeps that).
pub fn default_signal_before_exec(cmd: &mut std::process::Command, sig: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure only calls signal(2), which is async-signal-safe, and allocates
    // nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(sig, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// Before `cmd` execs: `fd` duplicated to descriptor `to` (dup2; without CLOEXEC, so the
/// command gets it). The caller keeps `fd` open until the spawn returned.
pub fn dup_to_before_exec(cmd: &mut std::process::Command, fd: std::os::fd::RawFd, to: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure only calls dup2, which is async-signal-safe, and allocates
    // nothing; `fd` stays open in the parent until the spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, to) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Run `f` when this process exits normally (atexit(3)): after every test of a test binary.
pub fn at_exit(f: extern "C" fn()) -> std::io::Result<()> {
    // SAFETY: registers a plain function pointer that lives for the whole program.
    if unsafe { libc::atexit(f) } != 0 {
        return Err(std::io::Error::other("atexit refused the handler"));
    }
    Ok(())
}

/// A daemon's log: this process's stdout and stderr appended to `path` from now on (opened as
/// [`crate::statefile::open_append_log`] opens a log: not through a link, not another user's
/// file).
pub fn log_output_to(path: &std::path::Path) -> std::io::Result<()> {
    let f = crate::statefile::open_append_log(path)?;
    rustix::stdio::dup2_stdout(&f)?;
    rustix::stdio::dup2_stderr(&f)?;
    Ok(())
}
