//! clone3 into the new namespaces, execute the [`Program`], wait.
//!
//! The parent blocks the signals it forwards and SIGCHLD before the clone and waits with
//! sigtimedwait, so a timeout, a forwarded signal and the child's exit are one loop without
//! handlers. The child reports a failure before exec through a close-on-exec pipe: EOF
//! without a message means the command is running.

use super::setup::{Create, Op, Program, Target};
use crate::run::{RunError, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_RUN_FAILED};
use bulkhead_sys::error::{Diagnostic, Error};
use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::fd::RawFd;
use std::ptr::null;
use std::time::{Duration, Instant};

/// struct clone_args from linux/sched.h (the fields up to `cgroup`, size 88).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// A fork-like clone3 (no CLONE_VM, SIGCHLD on exit) with namespace `flags`: 0 in the child,
/// the child's PID in the parent, -1 on error.
///
/// # Safety
/// As fork: the child must only exec or exit, on data prepared before the call.
unsafe fn clone3(flags: u64) -> libc::c_long {
    let mut args = CloneArgs {
        flags,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    libc::syscall(
        libc::SYS_clone3,
        &mut args as *mut CloneArgs,
        std::mem::size_of::<CloneArgs>(),
    )
}

/// The signals bulkhead forwards to the sandbox, plus SIGCHLD.
fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise the set they are given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED.iter().chain(&[libc::SIGCHLD]) {
            libc::sigaddset(&mut set, *s);
        }
        set
    }
}

const FORWARDED: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

fn os_err(what: &str) -> RunError {
    let e = std::io::Error::last_os_error();
    RunError::with_code(
        EXIT_RUN_FAILED,
        Error::failed(format!("{what}: {}", bulkhead_sys::error::errno_text(&e))),
    )
}

fn pipe() -> Result<(RawFd, RawFd), RunError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(os_err("pipe2"));
    }
    Ok((fds[0], fds[1]))
}

/// A user namespace with `range` mapped, as an fd (for MOUNT_ATTR_IDMAP): a child makes it
/// and waits while its maps are written and the namespace is opened.
pub(crate) fn userns_fd(range: super::UserRange) -> Result<std::os::fd::OwnedFd, RunError> {
    use std::os::fd::FromRawFd;
    let (r, w) = pipe()?;
    // SAFETY: a fork-like clone; the child only blocks on read and exits.
    let pid = unsafe { clone3(libc::CLONE_NEWUSER as u64) };
    if pid == 0 {
        unsafe {
            libc::close(w);
            let mut b = [0u8; 1];
            libc::read(r, b.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    unsafe { libc::close(r) };
    if pid < 0 {
        unsafe { libc::close(w) };
        return Err(os_err("cannot create a user namespace"));
    }
    let pid = pid as libc::pid_t;
    let res = write_id_maps(pid, range).and_then(|_| {
        let path = CString::new(format!("/proc/{pid}/ns/user")).unwrap_or_default();
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            Err(os_err("cannot open the user namespace"))
        } else {
            Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
        }
    });
    unsafe {
        libc::close(w);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    res
}

/// A detached copy of the tree at `src` whose IDs 0..size show as base..base+size.
pub(crate) fn idmapped_tree(
    src: &std::path::Path,
    range: super::UserRange,
) -> Result<std::os::fd::OwnedFd, RunError> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    let ns = userns_fd(range)?;
    let c = CString::new(src.as_os_str().as_bytes()).unwrap_or_default();
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC) as libc::c_uint,
        )
    } as RawFd;
    if tree < 0 {
        return Err(os_err(&format!("open_tree {}", src.display())));
    }
    let tree = unsafe { std::os::fd::OwnedFd::from_raw_fd(tree) };
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: ns.as_raw_fd() as u64,
    };
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(RunError::with_code(
            EXIT_RUN_FAILED,
            Error::failed_with(
                Diagnostic::error(format!(
                    "cannot ID-map {} for --private-users: {}",
                    src.display(),
                    bulkhead_sys::error::errno_text(&e)
                ))
                .hint("ID-mapped mounts need Linux 5.12+ and a file system that supports them (ext4, xfs, btrfs, tmpfs 6.3+)"),
            ),
        ));
    }
    Ok(tree)
}

/// Start the sandbox and wait for it. Returns (exit code, timed out).
pub(crate) fn run(
    p: &Program,
    timeout: Option<Duration>,
    stop_timeout: Option<Duration>,
) -> Result<(i32, bool), RunError> {
    let set = signal_set();
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain sigprocmask on valid sets.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old) };
    let restore = Restore(old);
    let (err_r, err_w) = pipe()?;
    let (life_r, life_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    // SAFETY: clone3 without CLONE_VM is a fork: the child gets a copy of this (single
    // threaded) process and runs `child_main`, which never returns.
    let pid = unsafe { clone3(p.clone_flags) };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        for fd in [err_r, err_w, life_r, life_w, go_r, go_w] {
            unsafe { libc::close(fd) };
        }
        let hint = match e.raw_os_error() {
            Some(libc::EPERM) => "creating namespaces needs root (CAP_SYS_ADMIN)",
            Some(libc::ENOSPC) => {
                "a namespace limit is reached: see /proc/sys/user/max_*_namespaces"
            }
            Some(libc::ENOSYS) => "clone3 needs Linux 5.3 or newer",
            _ => "check the kernel's namespace support",
        };
        return Err(RunError::with_code(
            EXIT_RUN_FAILED,
            Error::failed_with(
                Diagnostic::error(format!(
                    "cannot create the sandbox's namespaces: {}",
                    bulkhead_sys::error::errno_text(&e)
                ))
                .hint(hint),
            ),
        ));
    }
    if pid == 0 {
        // SAFETY: in the child; never returns.
        unsafe {
            libc::close(err_r);
            libc::close(life_w);
            libc::close(go_w);
            child_main(p, err_w, life_r, go_r)
        }
    }
    let pid = pid as libc::pid_t;
    unsafe {
        libc::close(err_w);
        libc::close(life_r);
        libc::close(go_r);
    }
    if let Some(range) = p.userns {
        if let Err(e) = write_id_maps(pid, range) {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, null::<i32>() as *mut i32, 0);
                libc::close(go_w);
                libc::close(err_r);
                libc::close(life_w);
            }
            return Err(e);
        }
    }
    // Let the child go on (it waits for the ID maps in a user namespace).
    unsafe {
        libc::write(go_w, b"g".as_ptr().cast(), 1);
        libc::close(go_w);
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    // Set when bulkhead is asked to stop: the sandbox gets stop_timeout to exit by itself.
    let mut stop_deadline: Option<Instant> = None;
    let mut timed_out = false;
    let status = loop {
        let deadline = match (deadline, stop_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let sig = match deadline {
            None => unsafe { libc::sigwaitinfo(&set, &mut info) },
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                let ts = libc::timespec {
                    tv_sec: left.as_secs() as libc::time_t,
                    tv_nsec: left.subsec_nanos() as libc::c_long,
                };
                unsafe { libc::sigtimedwait(&set, &mut info, &ts) }
            }
        };
        if sig == libc::SIGCHLD || sig < 0 {
            if sig < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
                // The timeout: PID 1 dies, and with it the whole PID namespace.
                timed_out = stop_deadline.is_none_or(|s| Instant::now() < s);
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let mut st = 0;
            let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
            if r == pid {
                break st;
            }
            continue;
        }
        // Forward what was sent to bulkhead; a terminal's ^C already reached the sandbox's
        // processes in the same process group.
        if info.si_code != libc::SI_KERNEL {
            unsafe { libc::kill(pid, sig) };
        }
        if let (Some(t), None, libc::SIGTERM | libc::SIGINT) = (stop_timeout, stop_deadline, sig) {
            stop_deadline = Some(Instant::now() + t);
        }
    };
    unsafe { libc::close(life_w) };
    let mut msg = Vec::new();
    {
        use std::io::Read;
        let mut f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(err_r) };
        let _ = f.read_to_end(&mut msg);
    }
    drop(restore);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        EXIT_RUN_FAILED
    };
    if timed_out {
        return Ok((super::EXIT_TIMEOUT, true));
    }
    if !msg.is_empty() {
        let text = String::from_utf8_lossy(&msg).trim().to_string();
        let (text, hint) = match text.split_once("\nhint: ") {
            Some((t, h)) => (t.to_string(), Some(h.to_string())),
            None => (text, None),
        };
        let mut d = Diagnostic::error(text);
        if let Some(h) = hint {
            d = d.hint(h);
        }
        return Err(RunError::with_code(code, Error::failed_with(d)));
    }
    Ok((code, false))
}

struct Restore(libc::sigset_t);
impl Drop for Restore {
    fn drop(&mut self) {
        // Drain what is pending (a SIGCHLD of the reaped child) and restore the mask.
        unsafe {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            if libc::sigismember(&pending, libc::SIGCHLD) == 1 {
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let mut chld: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut chld);
                libc::sigaddset(&mut chld, libc::SIGCHLD);
                libc::sigtimedwait(&chld, null::<libc::siginfo_t>() as *mut _, &ts);
            }
            libc::sigprocmask(
                libc::SIG_SETMASK,
                &self.0,
                null::<libc::sigset_t>() as *mut _,
            );
        }
    }
}

fn write_id_maps(pid: libc::pid_t, r: super::UserRange) -> Result<(), RunError> {
    let w = |file: &str, text: &str| -> Result<(), RunError> {
        std::fs::write(format!("/proc/{pid}/{file}"), text).map_err(|e| {
            RunError::with_code(
                EXIT_RUN_FAILED,
                Error::failed(format!(
                    "cannot write /proc/{pid}/{file}: {}",
                    bulkhead_sys::error::errno_text(&e)
                )),
            )
        })
    };
    let map = format!("0 {} {}\n", r.base, r.size);
    w("uid_map", &map)?;
    w("setgroups", "allow")?;
    w("gid_map", &map)
}

// ---------------------------------------------------------------------------------------
// The child. Everything below runs between clone and exec: system calls on data prepared by
// the parent; a message is formatted only on the way out after a failure.

/// Report a failure to the parent and exit with `code`.
unsafe fn die(err_w: RawFd, code: i32, msg: &str) -> ! {
    let mut f = <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(err_w);
    let _ = f.write_all(msg.as_bytes());
    libc::_exit(code)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn strerror(e: i32) -> String {
    bulkhead_sys::error::errno_text(&std::io::Error::from_raw_os_error(e))
}

fn lossy(c: &CStr) -> String {
    c.to_string_lossy().to_string()
}

fn opt_ptr(c: &Option<CString>) -> *const libc::c_char {
    c.as_ref().map(|c| c.as_ptr()).unwrap_or(null())
}

unsafe fn child_main(p: &Program, err_w: RawFd, life_r: RawFd, go_r: RawFd) -> ! {
    // Die with bulkhead: PID 1 of a namespace takes every process in it along.
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    let mut pfd = libc::pollfd {
        fd: life_r,
        events: libc::POLLIN,
        revents: 0,
    };
    if libc::poll(&mut pfd, 1, 0) > 0 && pfd.revents & libc::POLLHUP != 0 {
        libc::_exit(EXIT_RUN_FAILED);
    }
    // Wait for the parent's go (after it wrote the ID maps in a user namespace).
    let mut b = [0u8; 1];
    if libc::read(go_r, b.as_mut_ptr().cast(), 1) != 1 {
        libc::_exit(EXIT_RUN_FAILED);
    }
    libc::close(go_r);
    if p.userns.is_some() {
        // Become root of the new user namespace (the creator's UID is unmapped in it).
        if libc::setresgid(0, 0, 0) != 0 || libc::setresuid(0, 0, 0) != 0 {
            let e = errno();
            die(
                err_w,
                EXIT_RUN_FAILED,
                &format!("setresuid(0) in the user namespace: {}", strerror(e)),
            );
        }
    }
    if libc::mount(
        null(),
        c"/".as_ptr(),
        null(),
        libc::MS_REC | libc::MS_SLAVE,
        null(),
    ) != 0
    {
        let e = errno();
        die(
            err_w,
            EXIT_RUN_FAILED,
            &format!("cannot make / a slave mount: {}", strerror(e)),
        );
    }
    for op in &p.root_ops {
        do_op(op, -1, p, err_w);
    }
    let root_fd = libc::open(
        p.root.as_ptr(),
        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
    );
    if root_fd < 0 {
        let e = errno();
        die(
            err_w,
            EXIT_RUN_FAILED,
            &format!("cannot open the root {}: {}", lossy(&p.root), strerror(e)),
        );
    }
    for op in &p.ops {
        do_op(op, root_fd, p, err_w);
    }
    libc::close(root_fd);
    if libc::sethostname(p.hostname.as_ptr(), p.hostname.as_bytes().len()) != 0 {
        let e = errno();
        die(
            err_w,
            EXIT_RUN_FAILED,
            &format!("sethostname: {}", strerror(e)),
        );
    }
    if p.lo_up {
        lo_up(err_w);
    }
    if libc::chdir(p.root.as_ptr()) != 0
        || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
        || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0
        || libc::chdir(c"/".as_ptr()) != 0
    {
        let e = errno();
        die(
            err_w,
            EXIT_RUN_FAILED,
            &format!("pivot_root into {}: {}", lossy(&p.root), strerror(e)),
        );
    }
    if !p.init {
        exec_command(p, err_w);
    }
    let child = libc::fork();
    if child < 0 {
        let e = errno();
        die(err_w, EXIT_RUN_FAILED, &format!("fork: {}", strerror(e)));
    }
    if child == 0 {
        exec_command(p, err_w);
    }
    init_loop(child, err_w)
}

/// PID 1: reap every zombie, forward signals to the command, exit with its status.
unsafe fn init_loop(child: libc::pid_t, err_w: RawFd) -> ! {
    libc::close(err_w);
    // Not dumpable: /proc/1/exe (the host's bulkhead binary) cannot be opened from inside.
    libc::prctl(libc::PR_SET_DUMPABLE, 0);
    libc::prctl(libc::PR_SET_NAME, c"bulkhead-init".as_ptr());
    libc::close_range(3, u32::MAX, 0);
    let set = signal_set();
    loop {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let sig = libc::sigwaitinfo(&set, &mut info);
        if sig == libc::SIGCHLD {
            loop {
                let mut st = 0;
                let r = libc::waitpid(-1, &mut st, libc::WNOHANG);
                if r <= 0 {
                    break;
                }
                if r == child {
                    let code = if libc::WIFEXITED(st) {
                        libc::WEXITSTATUS(st)
                    } else if libc::WIFSIGNALED(st) {
                        128 + libc::WTERMSIG(st)
                    } else {
                        EXIT_RUN_FAILED
                    };
                    libc::_exit(code);
                }
            }
        } else if sig > 0 && info.si_code != libc::SI_KERNEL {
            libc::kill(child, sig);
        }
    }
}

unsafe fn exec_command(p: &Program, err_w: RawFd) -> ! {
    // Every fd above 2 (above the passed sockets) is closed at exec (err_w too: EOF tells
    // the parent exec worked).
    libc::syscall(
        libc::SYS_close_range,
        3u32 + p.listen_fds,
        u32::MAX,
        libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
    );
    for c in &p.drop_caps {
        if libc::prctl(libc::PR_CAPBSET_DROP, *c as libc::c_ulong) != 0 && errno() != libc::EINVAL {
            let e = errno();
            die(
                err_w,
                EXIT_RUN_FAILED,
                &format!("dropping capability {c}: {}", strerror(e)),
            );
        }
    }
    if libc::setgroups(p.groups.len(), p.groups.as_ptr()) != 0
        || libc::setresgid(p.gid, p.gid, p.gid) != 0
        || libc::setresuid(p.uid, p.uid, p.uid) != 0
    {
        let e = errno();
        die(
            err_w,
            EXIT_RUN_FAILED,
            &format!("switching to uid {} gid {}: {}", p.uid, p.gid, strerror(e)),
        );
    }
    if libc::chdir(p.cwd.as_ptr()) != 0 {
        let e = errno();
        die(
            err_w,
            EXIT_RUN_FAILED,
            &format!(
                "--cwd {}: {} inside the sandbox\nhint: give a directory that exists in the root",
                lossy(&p.cwd),
                strerror(e)
            ),
        );
    }
    // The working directory must be inside the root (the leaked-fd escape of runc's
    // CVE-2024-21626 shows as "(unreachable)" here).
    let mut buf = [0u8; 4096];
    if libc::getcwd(buf.as_mut_ptr().cast(), buf.len()).is_null() || buf[0] != b'/' {
        die(
            err_w,
            EXIT_RUN_FAILED,
            "the working directory is outside the sandbox's root",
        );
    }
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        let e = errno();
        die(
            err_w,
            EXIT_RUN_FAILED,
            &format!("PR_SET_NO_NEW_PRIVS: {}", strerror(e)),
        );
    }
    if let Some(f) = &p.filter {
        // SPEC_ALLOW: without it the kernel turns on the speculative store bypass
        // mitigation for every seccomp'd process (MSR writes, which trap to the hypervisor on a
        // VM). That mitigation guards a process against code it runs itself (a JavaScript
        // engine), not one process from another.
        let fprog = libc::sock_fprog {
            len: f.program.len() as libc::c_ushort,
            filter: f.program.as_ptr() as *mut libc::sock_filter,
        };
        if libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW,
            &fprog as *const libc::sock_fprog,
        ) != 0
        {
            let e = errno();
            die(
                err_w,
                EXIT_RUN_FAILED,
                &format!("installing the seccomp filter: {}", strerror(e)),
            );
        }
    }
    // Unblock and reset the signals bulkhead blocked or ignored.
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    for s in 1..32 {
        if s != libc::SIGKILL && s != libc::SIGSTOP {
            libc::signal(s, libc::SIG_DFL);
        }
    }
    // LISTEN_PID=<this process's PID in the sandbox>, formatted without allocating.
    let mut listen_pid = *b"LISTEN_PID=\0\0\0\0\0\0\0\0\0\0\0\0";
    if p.listen_fds > 0 {
        let mut n = libc::getpid() as u32;
        let mut digits = [0u8; 10];
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for i in 0..len {
            listen_pid[11 + i] = digits[len - 1 - i];
        }
    }
    let mut argv: [*const libc::c_char; 256] = [null(); 256];
    let mut envp: [*const libc::c_char; 256] = [null(); 256];
    let av: Vec<*const libc::c_char>;
    let mut ev: Vec<*const libc::c_char>;
    let (argv_p, envp_p) = if p.argv.len() < 255 && p.envp.len() < 255 {
        for (i, a) in p.argv.iter().enumerate() {
            argv[i] = a.as_ptr();
        }
        for (i, e) in p.envp.iter().enumerate() {
            envp[i] = e.as_ptr();
        }
        if let Some(i) = p.listen_pid_slot {
            envp[i] = listen_pid.as_ptr().cast();
        }
        (argv.as_ptr(), envp.as_ptr())
    } else {
        av = p.argv.iter().map(|a| a.as_ptr()).chain([null()]).collect();
        ev = p.envp.iter().map(|a| a.as_ptr()).chain([null()]).collect();
        if let Some(i) = p.listen_pid_slot {
            ev[i] = listen_pid.as_ptr().cast();
        }
        (av.as_ptr(), ev.as_ptr())
    };
    let mut best = libc::ENOENT;
    for c in &p.candidates {
        libc::execve(c.as_ptr(), argv_p, envp_p);
        let e = errno();
        if e != libc::ENOENT && e != libc::ENOTDIR {
            best = e;
            if e != libc::EACCES {
                break;
            }
        }
    }
    let (code, msg) = match best {
        libc::ENOENT => (
            EXIT_NOT_FOUND,
            format!(
                "{}: command not found in the sandbox's root\nhint: the command runs inside the root, so it must exist there (looked in {})",
                p.program_name,
                p.candidates.iter().map(|c| lossy(c)).collect::<Vec<_>>().join(", ")
            ),
        ),
        libc::EACCES | libc::ENOEXEC => (
            EXIT_NOT_EXECUTABLE,
            format!("{}: not executable in the sandbox: {}", p.program_name, strerror(best)),
        ),
        e => (
            EXIT_RUN_FAILED,
            format!("cannot execute {} in the sandbox: {}", p.program_name, strerror(e)),
        ),
    };
    die(err_w, code, &msg)
}

unsafe fn lo_up(err_w: RawFd) {
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: libc::c_short,
        pad: [u8; 22],
    }
    let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    let mut ifr = IfReq {
        name: [0; 16],
        flags: 0,
        pad: [0; 22],
    };
    ifr.name[..2].copy_from_slice(b"lo");
    if fd < 0 || libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) != 0 || {
        ifr.flags |= libc::IFF_UP as libc::c_short;
        libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr) != 0
    } {
        let e = errno();
        die(
            err_w,
            EXIT_RUN_FAILED,
            &format!("cannot bring lo up: {}", strerror(e)),
        );
    }
    libc::close(fd);
}

/// Resolve a path inside the root one component at a time, never following a symlink, and
/// create what is missing. Returns an O_PATH fd (its /proc/self/fd path is the mount target).
unsafe fn resolve_in_root(
    root_fd: RawFd,
    comps: &[CString],
    display: &str,
    create: Create,
    err_w: RawFd,
) -> RawFd {
    let mut cur = libc::fcntl(root_fd, libc::F_DUPFD_CLOEXEC, 3);
    for (i, c) in comps.iter().enumerate() {
        let last = i + 1 == comps.len();
        let mut fd = libc::openat(
            cur,
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        );
        if fd < 0 && errno() == libc::ENOENT && create != Create::No {
            let made = if last && create == Create::File {
                let f = libc::openat(
                    cur,
                    c.as_ptr(),
                    libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_WRONLY
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o644,
                );
                if f >= 0 {
                    libc::close(f);
                }
                f >= 0
            } else {
                libc::mkdirat(cur, c.as_ptr(), 0o755) == 0
            };
            if !made {
                let e = errno();
                let hint = if e == libc::EROFS {
                    "\nhint: the root is read-only: create it in ROOTFS, or use --ephemeral or --writable"
                } else {
                    ""
                };
                die(
                    err_w,
                    EXIT_RUN_FAILED,
                    &format!(
                        "cannot create {display} in the sandbox's root: {}{hint}",
                        strerror(e)
                    ),
                );
            }
            fd = libc::openat(
                cur,
                c.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            );
        }
        if fd < 0 {
            let e = errno();
            if e == libc::ENOENT && create == Create::No {
                die(
                    err_w,
                    EXIT_RUN_FAILED,
                    &format!("{display} does not exist in the read-only root\nhint: create it in ROOTFS, or use --ephemeral (a throw-away copy) or --writable"),
                );
            }
            die(
                err_w,
                EXIT_RUN_FAILED,
                &format!("{display} inside the sandbox's root: {}", strerror(e)),
            );
        }
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstatat(fd, c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH);
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            die(
                err_w,
                EXIT_RUN_FAILED,
                &format!(
                    "{display}: /{} is a symbolic link inside the root, and a mount target may not pass through one (it could point outside the root)\nhint: give the path with the link resolved",
                    comps[..=i].iter().map(|c| lossy(c)).collect::<Vec<_>>().join("/")
                ),
            );
        }
        if !last && st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            die(
                err_w,
                EXIT_RUN_FAILED,
                &format!(
                    "{display}: /{} is not a directory inside the root",
                    comps[..=i]
                        .iter()
                        .map(|c| lossy(c))
                        .collect::<Vec<_>>()
                        .join("/")
                ),
            );
        }
        libc::close(cur);
        cur = fd;
    }
    cur
}

fn fd_path(fd: RawFd) -> [u8; 32] {
    let mut b = [0u8; 32];
    let mut w = &mut b[..];
    let _ = write!(w, "/proc/self/fd/{fd}\0");
    b
}

unsafe fn do_op(op: &Op, root_fd: RawFd, p: &Program, err_w: RawFd) {
    // Returns (target pointer, fd to close, display).
    let target = |t: &Target| -> (Option<[u8; 32]>, *const libc::c_char, RawFd) {
        match t {
            Target::Abs(c) => (None, c.as_ptr(), -1),
            Target::InRoot {
                comps,
                display,
                create,
            } => {
                let fd = resolve_in_root(root_fd, comps, display, *create, err_w);
                (Some(fd_path(fd)), null(), fd)
            }
        }
    };
    let show = |t: &Target| match t {
        Target::Abs(c) => lossy(c),
        Target::InRoot { display, .. } => display.clone(),
    };
    match op {
        Op::Mount {
            src,
            target: t,
            fstype,
            flags,
            data,
        } => {
            let (buf, ptr, fd) = target(t);
            let ptr = buf.as_ref().map(|b| b.as_ptr().cast()).unwrap_or(ptr);
            let r = libc::mount(
                opt_ptr(src),
                ptr,
                opt_ptr(fstype),
                *flags,
                opt_ptr(data).cast(),
            );
            let e = errno();
            if fd >= 0 {
                libc::close(fd);
            }
            if r != 0 {
                die(
                    err_w,
                    EXIT_RUN_FAILED,
                    &format!(
                        "cannot mount {} on {}: {}",
                        fstype
                            .as_ref()
                            .or(src.as_ref())
                            .map(|c| lossy(c))
                            .unwrap_or_default(),
                        show(t),
                        strerror(e)
                    ),
                );
            }
        }
        Op::MountIfExists {
            src,
            target,
            fstype,
            flags,
            data,
        } => {
            if libc::mount(
                opt_ptr(src),
                target.as_ptr(),
                opt_ptr(fstype),
                *flags,
                opt_ptr(data).cast(),
            ) != 0
            {
                let e = errno();
                if e != libc::ENOENT {
                    die(
                        err_w,
                        EXIT_RUN_FAILED,
                        &format!("cannot mask {}: {}", lossy(target), strerror(e)),
                    );
                }
            }
        }
        Op::BindTree {
            src,
            target: t,
            read_only,
            noatime,
        } => {
            let tree = libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                src.as_ptr(),
                (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC) as libc::c_uint
                    | libc::AT_RECURSIVE as libc::c_uint,
            ) as RawFd;
            if tree < 0 {
                let e = errno();
                die(
                    err_w,
                    EXIT_RUN_FAILED,
                    &format!("cannot bind {}: {}", lossy(src), strerror(e)),
                );
            }
            if *read_only || *noatime {
                let mut attr = libc::mount_attr {
                    attr_set: 0,
                    attr_clr: 0,
                    propagation: 0,
                    userns_fd: 0,
                };
                if *read_only {
                    attr.attr_set |= libc::MOUNT_ATTR_RDONLY;
                }
                if *noatime {
                    attr.attr_clr |= libc::MOUNT_ATTR__ATIME;
                    attr.attr_set |= libc::MOUNT_ATTR_NOATIME;
                }
                if libc::syscall(
                    libc::SYS_mount_setattr,
                    tree,
                    c"".as_ptr(),
                    (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
                    &attr as *const libc::mount_attr,
                    std::mem::size_of::<libc::mount_attr>(),
                ) != 0
                {
                    let e = errno();
                    die(
                        err_w,
                        EXIT_RUN_FAILED,
                        &format!(
                            "cannot set the mount flags of {}: {}",
                            lossy(src),
                            strerror(e)
                        ),
                    );
                }
            }
            let (_, ptr, fd) = target(t);
            // An in-root target is given as its O_PATH fd itself (a /proc/self/fd path would
            // be a symlink that move_mount does not follow).
            let (to_dir, to_path, extra) = if fd >= 0 {
                (fd, c"".as_ptr(), libc::MOVE_MOUNT_T_EMPTY_PATH)
            } else {
                (libc::AT_FDCWD, ptr, 0)
            };
            let r = libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                to_dir,
                to_path,
                (libc::MOVE_MOUNT_F_EMPTY_PATH | extra) as libc::c_uint,
            );
            let e = errno();
            libc::close(tree);
            if fd >= 0 {
                libc::close(fd);
            }
            if r != 0 {
                die(
                    err_w,
                    EXIT_RUN_FAILED,
                    &format!("cannot bind {} on {}: {}", lossy(src), show(t), strerror(e)),
                );
            }
        }
        Op::AttachIdmapped { target: t } => {
            let Some(tree) = p.idmapped else {
                die(err_w, EXIT_RUN_FAILED, "no ID-mapped tree was prepared");
            };
            let (_, ptr, fd) = target(t);
            let r = libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                libc::AT_FDCWD,
                ptr,
                libc::MOVE_MOUNT_F_EMPTY_PATH as libc::c_uint,
            );
            let e = errno();
            if fd >= 0 {
                libc::close(fd);
            }
            if r != 0 {
                die(
                    err_w,
                    EXIT_RUN_FAILED,
                    &format!(
                        "cannot attach the ID-mapped root on {}: {}",
                        show(t),
                        strerror(e)
                    ),
                );
            }
        }
        Op::Mkdir { path, mode } => {
            if libc::mkdir(path.as_ptr(), *mode) != 0 && errno() != libc::EEXIST {
                let e = errno();
                die(
                    err_w,
                    EXIT_RUN_FAILED,
                    &format!("mkdir {}: {}", lossy(path), strerror(e)),
                );
            }
            libc::chmod(path.as_ptr(), *mode);
        }
        Op::Mknod { path, mode, dev } => {
            if libc::mknod(path.as_ptr(), *mode, *dev) != 0 {
                let e = errno();
                die(
                    err_w,
                    EXIT_RUN_FAILED,
                    &format!("mknod {}: {}", lossy(path), strerror(e)),
                );
            }
            // The umask must not narrow 0666.
            libc::chmod(path.as_ptr(), *mode & 0o7777);
        }
        Op::Symlink { target, path } => {
            if libc::symlink(target.as_ptr(), path.as_ptr()) != 0 && errno() != libc::EEXIST {
                let e = errno();
                die(
                    err_w,
                    EXIT_RUN_FAILED,
                    &format!("symlink {}: {}", lossy(path), strerror(e)),
                );
            }
        }
    }
}
