//! A plain command's start (`bulkhead run`): the supplementary groups, GID and UID, the
//! working directory, the environment and the exec of an [`ExecSpec`], either in this very
//! process ([`exec_here`], after it joined the slice) or in a child that clone3 puts straight
//! into a cgroup2 directory ([`spawn_into_cgroup`], CLONE_INTO_CGROUP, Linux 5.7+): the
//! command is in the cgroup from its first instruction, and the caller stays outside it.
//!
//! Both ways run the same code between the decision and exec (`become_command`): raw system
//! calls on data built before the clone, no allocation and no locks, so it is safe in the
//! child of a process that has other threads (glibc's set*id wrappers would try to signal
//! threads the child does not have). The child reports a failure through a close-on-exec
//! pipe (which step, the errno); EOF without a report means exec worked.
//!
//! The parent of a cloned command blocks the forwarded signals before the clone and waits
//! with the sandbox's loop (`parent::wait_loop`): a signal sent to bulkhead (`kill`, a
//! supervisor's SIGTERM) is passed on; one the kernel sent (a terminal's Ctrl-C, Ctrl-\,
//! hangup, window size) is not, since the command, in bulkhead's process group, got it too;
//! nor is one the command sent itself. A signal sent to the whole process group reaches the
//! command directly and again through bulkhead (a standard signal pending twice is
//! delivered once), as with sudo and `timeout --foreground`. SIGKILL cannot be passed on:
//! the child has PR_SET_PDEATHSIG(SIGKILL), so it dies with bulkhead (unless it execs a
//! set-user-ID program, for which the kernel clears that).

use super::parent::{wait_loop, Restore};
use super::{clone3, listen_pid_var, signal_set};
use crate::exit::{NOT_EXECUTABLE, NOT_FOUND, RUN_FAILED};
use std::ffi::{CString, OsString};
use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::ptr::null;

/// A command to exec, as plain data.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    /// The file to execute (found in PATH already).
    pub program: PathBuf,
    /// The arguments, `argv[0]` included.
    pub argv: Vec<OsString>,
    /// The whole environment, in order (nothing is inherited beyond it).
    pub env: Vec<(OsString, OsString)>,
    /// Add `LISTEN_PID=` with the PID of the process that execs (systemd's socket passing).
    pub listen_pid: bool,
    /// setgroups(2) before the IDs change.
    pub groups: Option<Vec<u32>>,
    pub gid: Option<u32>,
    pub uid: Option<u32>,
    /// chdir(2) as the new user (like systemd's WorkingDirectory=).
    pub cwd: Option<PathBuf>,
}

/// The step that failed before the command ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Groups,
    Gid,
    Uid,
    Cwd,
    Exec,
}

impl Step {
    const ALL: [Step; 5] = [Step::Groups, Step::Gid, Step::Uid, Step::Cwd, Step::Exec];
}

/// Why the command did not start: the step and its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecFailure {
    pub step: Step,
    pub errno: i32,
}

impl ExecFailure {
    /// 127 when exec found no such file, 126 when the file cannot be executed, 125 else.
    pub fn exit_code(&self) -> i32 {
        match (self.step, self.errno) {
            (Step::Exec, libc::ENOENT) => NOT_FOUND,
            (Step::Exec, libc::EACCES | libc::ENOEXEC) => NOT_EXECUTABLE,
            _ => RUN_FAILED,
        }
    }

    /// The errno as an io::Error (for its text).
    pub fn error(&self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno)
    }

    fn encode(&self) -> [u8; 5] {
        let e = self.errno.to_le_bytes();
        [self.step as u8, e[0], e[1], e[2], e[3]]
    }

    fn decode(b: [u8; 5]) -> ExecFailure {
        ExecFailure {
            step: Step::ALL.get(b[0] as usize).copied().unwrap_or(Step::Exec),
            errno: i32::from_le_bytes([b[1], b[2], b[3], b[4]]),
        }
    }
}

/// Why [`spawn_into_cgroup`] did not start the command.
#[derive(Debug)]
pub enum SpawnError {
    /// clone3 (or the pipe before it) failed: nothing was started. ENOSYS (before Linux
    /// 5.3), E2BIG or EINVAL (no CLONE_INTO_CGROUP before 5.7), EBUSY or EOPNOTSUPP (a cgroup
    /// that cannot take processes) mean this way is not possible here.
    Clone(std::io::Error),
    /// The child failed before exec (it has been reaped).
    Start(ExecFailure),
}

/// A command running as this process's child; [`Running::wait`] reaps it.
pub struct Running {
    pid: libc::pid_t,
    set: libc::sigset_t,
    /// The signal mask from before the start, put back once the child is reaped.
    _mask: Restore,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Wait for the command, forwarding signals (see the module's doc); its wait status.
    pub fn wait(self) -> i32 {
        wait_loop(self.pid, &self.set, None, None, false, None).0
    }
}

/// Everything `become_command` touches, built before the clone.
struct Built {
    program: CString,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// The index in `envp` that gets `LISTEN_PID=` once the PID is known.
    listen_pid_slot: Option<usize>,
    listen_pid: [u8; 24],
    groups: Option<Vec<libc::gid_t>>,
    gid: Option<u32>,
    uid: Option<u32>,
    cwd: Option<CString>,
    /// In a cloned child: the parent's PID, whose death kills the command (SIGKILL).
    parent: Option<libc::pid_t>,
}

fn cstring(b: &[u8]) -> Result<CString, ExecFailure> {
    CString::new(b).map_err(|_| ExecFailure {
        step: Step::Exec,
        errno: libc::EINVAL,
    })
}

fn build(spec: &ExecSpec) -> Result<Built, ExecFailure> {
    let mut strings = Vec::with_capacity(spec.argv.len() + spec.env.len());
    for a in &spec.argv {
        strings.push(cstring(a.as_bytes())?);
    }
    let argc = strings.len();
    for (k, v) in &spec.env {
        if spec.listen_pid && k.as_bytes() == b"LISTEN_PID" {
            continue;
        }
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        strings.push(cstring(&kv)?);
    }
    // The pointers stay valid when `strings` moves into `Built`: a CString's bytes are on the
    // heap.
    let argv = strings[..argc]
        .iter()
        .map(|c| c.as_ptr())
        .chain([null()])
        .collect();
    let mut envp: Vec<*const libc::c_char> = strings[argc..].iter().map(|c| c.as_ptr()).collect();
    let listen_pid_slot = spec.listen_pid.then(|| {
        envp.push(null());
        envp.len() - 1
    });
    envp.push(null());
    let cwd = match &spec.cwd {
        Some(c) => Some(cstring(c.as_os_str().as_bytes()).map_err(|f| ExecFailure {
            step: Step::Cwd,
            ..f
        })?),
        None => None,
    };
    Ok(Built {
        program: cstring(spec.program.as_os_str().as_bytes())?,
        _strings: strings,
        argv,
        envp,
        listen_pid_slot,
        listen_pid: [0; 24],
        groups: spec.groups.clone(),
        gid: spec.gid,
        uid: spec.uid,
        cwd,
        parent: None,
    })
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Groups, IDs, working directory, signals as exec should find them, exec. Returns only on
/// failure. Raw system calls only (see the module's doc).
fn become_command(b: &mut Built) -> ExecFailure {
    let fail = |step| ExecFailure {
        step,
        errno: errno(),
    };
    // SAFETY: system calls on buffers `b` owns (NUL-terminated strings, NULL-terminated
    // pointer arrays into them, a gid array with its length); the set*id calls change only
    // the calling thread, the one that execs.
    unsafe {
        if let Some(g) = &b.groups {
            if libc::syscall(libc::SYS_setgroups, g.len(), g.as_ptr()) != 0 {
                return fail(Step::Groups);
            }
        }
        if let Some(g) = b.gid {
            if libc::syscall(libc::SYS_setresgid, g, g, g) != 0 {
                return fail(Step::Gid);
            }
        }
        if let Some(u) = b.uid {
            if libc::syscall(libc::SYS_setresuid, u, u, u) != 0 {
                return fail(Step::Uid);
            }
        }
        if let Some(c) = &b.cwd {
            if libc::chdir(c.as_ptr()) != 0 {
                return fail(Step::Cwd);
            }
        }
        if let Some(parent) = b.parent {
            // A SIGKILL of bulkhead, which it cannot pass on, kills the command too, as it
            // would had bulkhead exec'd it. Set after the ID changes, which clear it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        if let Some(i) = b.listen_pid_slot {
            b.listen_pid = listen_pid_var(libc::getpid() as u32);
            b.envp[i] = b.listen_pid.as_ptr().cast();
        }
        // As std's Command: SIGPIPE back to its default (Rust ignores it), nothing blocked
        // (the parent of a clone blocks what it forwards). Ignored signals stay ignored, as
        // exec keeps them (nohup).
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &raw const empty, std::ptr::null_mut());
        libc::execve(b.program.as_ptr(), b.argv.as_ptr(), b.envp.as_ptr());
        fail(Step::Exec)
    }
}

/// Drop privileges, change directory and exec in this process. Returns only on failure.
pub fn exec_here(spec: &ExecSpec) -> ExecFailure {
    match build(spec) {
        Ok(mut b) => become_command(&mut b),
        Err(f) => f,
    }
}

/// Start the command as a child born in the cgroup2 directory `cgroup` (opened O_RDONLY |
/// O_DIRECTORY: an O_PATH descriptor is refused), with the forwarded signals blocked here
/// until [`Running::wait`] has reaped it. Returns once the command runs (exec worked) or
/// failed to start.
///
/// The caller must be single-threaded, as for a sandbox's start: the wait takes SIGCHLD and
/// the forwarded signals with sigwaitinfo on this thread, and another thread that does not
/// block them would take them instead.
pub fn spawn_into_cgroup(spec: &ExecSpec, cgroup: BorrowedFd<'_>) -> Result<Running, SpawnError> {
    let mut b = build(spec).map_err(SpawnError::Start)?;
    b.parent = Some(std::process::id() as libc::pid_t);
    let (report_r, report_w) = crate::fd::pipe().map_err(SpawnError::Clone)?;
    let w = report_w.as_raw_fd();
    let set = signal_set();
    let mask = Restore::block(&set);
    // SAFETY: a fork-like clone3; the child runs only `become_command` (raw system calls on
    // data built above), write and _exit, and never returns into the caller's frames.
    let pid = unsafe { clone3(0, Some(cgroup.as_raw_fd())) };
    if pid < 0 {
        return Err(SpawnError::Clone(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let f = become_command(&mut b);
        let msg = f.encode();
        // SAFETY: in the child: one write of a stack buffer to the report pipe, then _exit
        // without running the parent's destructors.
        unsafe {
            libc::write(w, msg.as_ptr().cast(), msg.len());
            libc::_exit(f.exit_code());
        }
    }
    let pid = pid as libc::pid_t;
    drop(report_w);
    let mut msg = Vec::new();
    let _ = std::fs::File::from(report_r).read_to_end(&mut msg);
    if let Ok(m) = <[u8; 5]>::try_from(msg.as_slice()) {
        crate::process::wait(pid, true);
        return Err(SpawnError::Start(ExecFailure::decode(m)));
    }
    Ok(Running {
        pid,
        set,
        _mask: mask,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_cross_the_pipe() {
        for step in Step::ALL {
            let f = ExecFailure {
                step,
                errno: libc::EACCES,
            };
            assert_eq!(ExecFailure::decode(f.encode()), f);
        }
        let f = |step, errno| ExecFailure { step, errno }.exit_code();
        assert_eq!(f(Step::Exec, libc::ENOENT), NOT_FOUND);
        assert_eq!(f(Step::Exec, libc::ENOEXEC), NOT_EXECUTABLE);
        assert_eq!(f(Step::Exec, libc::E2BIG), RUN_FAILED);
        assert_eq!(f(Step::Cwd, libc::ENOENT), RUN_FAILED);
    }

    #[test]
    fn the_environment_is_built_whole() {
        let spec = ExecSpec {
            program: "/bin/true".into(),
            argv: vec!["true".into(), "x".into()],
            env: vec![("A".into(), "1".into()), ("LISTEN_PID".into(), "99".into())],
            listen_pid: true,
            ..Default::default()
        };
        let b = build(&spec).unwrap();
        assert_eq!(b.argv.len(), 3);
        assert!(b.argv[2].is_null());
        // A=1, the slot, NULL: an inherited LISTEN_PID is replaced by the child's own.
        assert_eq!(b.envp.len(), 3);
        assert_eq!(b.listen_pid_slot, Some(1));
        let bad = ExecSpec {
            argv: vec!["a\0b".into()],
            ..spec
        };
        assert_eq!(build(&bad).err().map(|f| f.errno), Some(libc::EINVAL));
    }
}
