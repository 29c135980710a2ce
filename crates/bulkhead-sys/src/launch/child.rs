//! The child's side of a sandbox start: everything between clone and exec. System calls on
//! data the parent prepared; a message is formatted only on the way out after a failure.

use super::program::lossy;
use super::title::{hide_host_command_line, Areas};
use super::{listen_pid_var, signal_set, Create, Op, Program, Target};
use crate::exit::{NOT_EXECUTABLE, NOT_FOUND, RUN_FAILED};
use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::fd::RawFd;
use std::ptr::null;

/// Report a failure to the parent and exit with `code`.
fn die(err_w: RawFd, code: i32, msg: &str) -> ! {
    // SAFETY: in the forked child: FFI calls on descriptors it owns and on NUL-terminated
    // strings and buffers of the Program the parent built, which this copy of the address
    // space still holds; nothing here returns into the parent's frames.
    unsafe {
        let mut f = <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(err_w);
        let _ = f.write_all(msg.as_bytes());
        libc::_exit(code)
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn strerror(e: i32) -> String {
    crate::error::errno_text(&std::io::Error::from_raw_os_error(e))
}

fn opt_ptr(c: &Option<CString>) -> *const libc::c_char {
    c.as_ref().map(|c| c.as_ptr()).unwrap_or(null())
}

/// The detached trees the parent prepared, as raw descriptors aligned with `root_ops` and
/// `ops` (-1 where an operation has none).
pub(super) struct RawTrees<'a> {
    pub(super) root: &'a [RawFd],
    pub(super) ops: &'a [RawFd],
}

/// Report the failure of the system call just made (`WHAT: strerror`) and exit with
/// RUN_FAILED. errno is read before the message is formatted.
macro_rules! fail {
    ($err_w:expr, $($what:tt)*) => {{
        let e = errno();
        die(
            $err_w,
            RUN_FAILED,
            &format!("{}: {}", format_args!($($what)*), strerror(e)),
        )
    }};
}

pub(super) fn main(
    p: &Program,
    trees: RawTrees<'_>,
    areas: Option<Areas>,
    err_w: RawFd,
    life_r: RawFd,
    go_r: RawFd,
) -> ! {
    wait_for_go(p, err_w, life_r, go_r);
    join_cgroups(p, err_w);
    own_session(p, err_w);
    build_root(p, &trees, err_w);
    enter_root(p, err_w);
    let Some(areas) = areas.filter(|_| p.init) else {
        exec_command(p, err_w);
    };
    // Before the command exists: it never sees the host's command line in /proc/1.
    hide_host_command_line(areas, c"bulkhead-init");
    // SAFETY: in the forked child: fork has no pointer arguments; the new child only
    // execs (exec_command never returns).
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail!(err_w, "fork");
    }
    if child == 0 {
        exec_command(p, err_w);
    }
    init_loop(child, err_w)
}

/// Die with bulkhead, and wait for the parent's go (after it wrote the ID maps in a user
/// namespace); then become root of a new user namespace.
fn wait_for_go(p: &Program, err_w: RawFd, life_r: RawFd, go_r: RawFd) {
    // SAFETY: in the forked child: FFI calls on descriptors it owns and on buffers of its
    // own stack; nothing here returns into the parent's frames.
    unsafe {
        // Die with bulkhead: PID 1 of a namespace takes every process in it along.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        let mut pfd = libc::pollfd {
            fd: life_r,
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&raw mut pfd, 1, 0) > 0 && pfd.revents & libc::POLLHUP != 0 {
            libc::_exit(RUN_FAILED);
        }
        let mut b = [0u8; 1];
        if libc::read(go_r, b.as_mut_ptr().cast(), 1) != 1 {
            libc::_exit(RUN_FAILED);
        }
        libc::close(go_r);
        // Become root of the new user namespace (the creator's UID is unmapped in it).
        if p.userns.is_some()
            && (set_ids(libc::SYS_setresgid, 0) != 0 || set_ids(libc::SYS_setresuid, 0) != 0)
        {
            fail!(err_w, "setresuid(0) in the user namespace");
        }
    }
}

/// `spawn --boot`: move into the container's own cgroups (through the descriptors the parent
/// opened), then make the cgroup namespace there, so the init sees its cgroup as the root.
fn join_cgroups(p: &Program, err_w: RawFd) {
    if p.join_cgroups.is_empty() {
        return;
    }
    for h in &p.join_cgroups {
        // SAFETY: in the forked child: write of a static buffer to a descriptor the parent
        // opened and holds for the sandbox's life.
        if unsafe { libc::write(h.fd, b"0".as_ptr().cast(), 1) } != 1 {
            fail!(err_w, "joining the container's cgroup {}", lossy(&h.shown));
        }
    }
    // SAFETY: unshare with an integer flag: a new cgroup namespace for this process.
    if unsafe { libc::unshare(libc::CLONE_NEWCGROUP) } != 0 {
        fail!(err_w, "unshare(CLONE_NEWCGROUP)");
    }
}

/// A session of its own, and the pseudo-terminal as its controlling terminal (--pty).
fn own_session(p: &Program, err_w: RawFd) {
    // SAFETY: in the forked child: FFI calls on descriptors it owns; nothing here returns
    // into the parent's frames.
    unsafe {
        // The caller's terminal is not the sandbox's controlling terminal, so TIOCSTI
        // cannot push keystrokes into the caller's shell.
        if libc::setsid() < 0 {
            fail!(err_w, "setsid");
        }
        if let Some(t) = p.pty {
            if libc::dup2(t, 0) < 0
                || libc::dup2(t, 1) < 0
                || libc::dup2(t, 2) < 0
                || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0
            {
                fail!(err_w, "taking the pseudo-terminal");
            }
        }
    }
}

/// The mounts: the host's stay slaves, then the operations before and inside the root.
fn build_root(p: &Program, trees: &RawTrees<'_>, err_w: RawFd) {
    // SAFETY: in the forked child: FFI calls on descriptors it owns and on NUL-terminated
    // strings of the Program the parent built, which this copy of the address space still
    // holds; nothing here returns into the parent's frames.
    unsafe {
        if libc::mount(
            null(),
            c"/".as_ptr(),
            null(),
            libc::MS_REC | libc::MS_SLAVE,
            null(),
        ) != 0
        {
            fail!(err_w, "cannot make / a slave mount");
        }
        for (op, tree) in p.root_ops.iter().zip(trees.root) {
            do_op(op, *tree, -1, p, err_w);
        }
        let root_fd = libc::open(
            p.root.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if root_fd < 0 {
            fail!(err_w, "cannot open the root {}", lossy(&p.root));
        }
        for (op, tree) in p.ops.iter().zip(trees.ops) {
            do_op(op, *tree, root_fd, p, err_w);
        }
        libc::close(root_fd);
    }
}

/// The host name, lo, and pivot_root into the root.
fn enter_root(p: &Program, err_w: RawFd) {
    // SAFETY: in the forked child: FFI calls on NUL-terminated strings of the Program the
    // parent built; nothing here returns into the parent's frames.
    unsafe {
        if libc::sethostname(p.hostname.as_ptr(), p.hostname.as_bytes().len()) != 0 {
            fail!(err_w, "sethostname");
        }
        if p.lo_up {
            lo_up(err_w);
        }
        if libc::chdir(p.root.as_ptr()) != 0
            || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
            || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0
            || libc::chdir(c"/".as_ptr()) != 0
        {
            fail!(err_w, "pivot_root into {}", lossy(&p.root));
        }
    }
}

/// PID 1: reap every zombie, forward signals to the command, exit with its status.
fn init_loop(child: libc::pid_t, err_w: RawFd) -> ! {
    // SAFETY: in the forked child: FFI calls on descriptors it owns and on NUL-terminated
    // strings and buffers of the Program the parent built, which this copy of the address
    // space still holds; nothing here returns into the parent's frames.
    unsafe {
        libc::close(err_w);
        // Not dumpable: /proc/1/exe (the host's bulkhead binary) cannot be opened from inside.
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
        libc::close_range(3, u32::MAX, 0);
        let set = signal_set();
        loop {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigwaitinfo(&raw const set, &raw mut info);
            if sig == libc::SIGCHLD {
                loop {
                    let mut st = 0;
                    let r = libc::waitpid(-1, &raw mut st, libc::WNOHANG);
                    if r <= 0 {
                        break;
                    }
                    if r == child {
                        let code = if libc::WIFEXITED(st) {
                            libc::WEXITSTATUS(st)
                        } else if libc::WIFSIGNALED(st) {
                            128 + libc::WTERMSIG(st)
                        } else {
                            RUN_FAILED
                        };
                        libc::_exit(code);
                    }
                }
            } else if sig > 0 && info.si_code != libc::SI_KERNEL {
                libc::kill(child, sig);
            }
        }
    }
}

/// capget/capset's header and per-32-bit-word sets (linux/capability.h, version 3).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// Empty the ambient and inheritable capability sets of the calling thread.
fn clear_inherited_caps() -> Result<(), i32> {
    // SAFETY: prctl with integer arguments only; EINVAL means a kernel without ambient
    // capabilities (before 4.3), where there is nothing to clear.
    let r = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if r != 0 && errno() != libc::EINVAL {
        return Err(errno());
    }
    let mut h = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: capget writes one header and two CapData (version 3) into our own buffers.
    if unsafe { libc::syscall(libc::SYS_capget, &raw mut h, d.as_mut_ptr()) } != 0 {
        return Err(errno());
    }
    if d.iter().all(|w| w.inheritable == 0) {
        return Ok(());
    }
    for w in &mut d {
        w.inheritable = 0;
    }
    // SAFETY: capset reads the header and the two CapData we own; it only lowers a set.
    if unsafe { libc::syscall(libc::SYS_capset, &raw mut h, d.as_ptr()) } != 0 {
        return Err(errno());
    }
    Ok(())
}

fn exec_command(p: &Program, err_w: RawFd) -> ! {
    drop_privileges(p, err_w);
    enter_cwd(p, err_w);
    confine(p, err_w);
    reset_signals();
    exec_candidates(p, err_w)
}

/// setresuid or setresgid (`nr`) to `id` for all three, as the raw system call: glibc's
/// wrappers apply the change to every thread it knows of, and this copy of a process whose
/// other threads (a `--pty` or console relay) did not come along would wait for them forever
/// (for one still starting at the clone, on its `setxid_futex`).
fn set_ids(nr: libc::c_long, id: u32) -> libc::c_long {
    // SAFETY: a credentials system call with integer arguments; it changes only the calling
    // thread, the only one of this process.
    unsafe { libc::syscall(nr, id, id, id) }
}

/// Close what the command must not inherit; drop capabilities; become the user.
fn drop_privileges(p: &Program, err_w: RawFd) {
    // SAFETY: in the forked child: FFI calls on descriptors it owns and on buffers of the
    // Program the parent built; nothing here returns into the parent's frames.
    unsafe {
        // Every fd above 2 (above the passed sockets) is closed at exec (err_w too: EOF tells
        // the parent exec worked).
        libc::syscall(
            libc::SYS_close_range,
            3u32 + p.listen_fds,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        for c in &p.drop_caps {
            if libc::prctl(libc::PR_CAPBSET_DROP, *c as libc::c_ulong) != 0
                && errno() != libc::EINVAL
            {
                fail!(err_w, "dropping capability {c}");
            }
        }
        // Nothing the caller holds in its inheritable or ambient set reaches the command
        // (runc's CVE-2022-29162): the sandbox gets exactly the bounding set above.
        if let Err(e) = clear_inherited_caps() {
            die(
                err_w,
                RUN_FAILED,
                &format!("clearing inheritable capabilities: {}", strerror(e)),
            );
        }
        if libc::syscall(libc::SYS_setgroups, p.groups.len(), p.groups.as_ptr()) != 0
            || set_ids(libc::SYS_setresgid, p.gid) != 0
            || set_ids(libc::SYS_setresuid, p.uid) != 0
        {
            fail!(err_w, "switching to uid {} gid {}", p.uid, p.gid);
        }
    }
}

/// The working directory, which must be inside the root.
fn enter_cwd(p: &Program, err_w: RawFd) {
    // SAFETY: in the forked child: chdir on a NUL-terminated string of the Program, getcwd
    // into a buffer of its own stack.
    unsafe {
        if libc::chdir(p.cwd.as_ptr()) != 0 {
            let e = errno();
            die(
                err_w,
                RUN_FAILED,
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
                RUN_FAILED,
                "the working directory is outside the sandbox's root",
            );
        }
    }
}

/// no_new_privs and the seccomp filter.
fn confine(p: &Program, err_w: RawFd) {
    // SAFETY: in the forked child: prctl with integer arguments; seccomp reads the filter
    // program of the Program the parent built, which outlives the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            fail!(err_w, "PR_SET_NO_NEW_PRIVS");
        }
        let Some(f) = &p.filter else {
            return;
        };
        // SPEC_ALLOW: without it the kernel turns on the speculative store bypass
        // mitigation for every seccomp'd process (MSR writes, which trap to the hypervisor on a
        // VM). That mitigation guards a process against code it runs itself (a JavaScript
        // engine), not one process from another.
        let fprog = libc::sock_fprog {
            len: f.program.len() as libc::c_ushort,
            filter: f.program.as_ptr().cast_mut(),
        };
        if libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW,
            &raw const fprog,
        ) != 0
        {
            fail!(err_w, "installing the seccomp filter");
        }
    }
}

/// Unblock and reset the signals bulkhead blocked or ignored.
fn reset_signals() {
    // SAFETY: sigemptyset fills a sigset_t of our own stack; sigprocmask and signal take
    // integers and that set.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &raw const empty, std::ptr::null_mut());
        for s in 1..32 {
            if s != libc::SIGKILL && s != libc::SIGSTOP {
                libc::signal(s, libc::SIG_DFL);
            }
        }
    }
}

/// execve each candidate path; on failure, say why the best one failed.
fn exec_candidates(p: &Program, err_w: RawFd) -> ! {
    // SAFETY: in the forked child: argv and envp are arrays of pointers to NUL-terminated
    // strings of the Program (and to listen_pid on this stack), null-terminated, alive
    // across every execve.
    unsafe {
        // LISTEN_PID=<this process's PID in the sandbox>, formatted without allocating.
        let listen_pid = listen_pid_var(libc::getpid() as u32);
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
        let (code, msg) = exec_failure(p, best);
        die(err_w, code, &msg)
    }
}

/// The exit code and message for the errno of the best execve.
fn exec_failure(p: &Program, best: i32) -> (i32, String) {
    match best {
        libc::ENOENT => (
            NOT_FOUND,
            format!(
                "{}: command not found in the sandbox's root\nhint: the command runs inside the root, so it must exist there (looked in {})",
                p.program_name,
                p.candidates.iter().map(|c| lossy(c)).collect::<Vec<_>>().join(", ")
            ),
        ),
        libc::EACCES | libc::ENOEXEC => (
            NOT_EXECUTABLE,
            format!("{}: not executable in the sandbox: {}", p.program_name, strerror(best)),
        ),
        e => (
            RUN_FAILED,
            format!("cannot execute {} in the sandbox: {}", p.program_name, strerror(e)),
        ),
    }
}

fn lo_up(err_w: RawFd) {
    // SAFETY: in the forked child: FFI calls on descriptors it owns and on NUL-terminated
    // strings and buffers of the Program the parent built, which this copy of the address
    // space still holds; nothing here returns into the parent's frames.
    unsafe {
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
        if fd < 0 || libc::ioctl(fd, libc::SIOCGIFFLAGS, &raw mut ifr) != 0 || {
            ifr.flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr) != 0
        } {
            let e = errno();
            die(
                err_w,
                RUN_FAILED,
                &format!("cannot bring lo up: {}", strerror(e)),
            );
        }
        libc::close(fd);
    }
}

/// Resolve a path inside the root one component at a time, never following a symlink, and
/// create what is missing. Returns an O_PATH fd (its /proc/self/fd path is the mount target).
fn resolve_in_root(
    root_fd: RawFd,
    comps: &[CString],
    display: &str,
    create: Create,
    err_w: RawFd,
) -> RawFd {
    // SAFETY: in the forked child: FFI calls on descriptors it owns and on NUL-terminated
    // strings of the Program the parent built; nothing here returns into the parent's frames.
    unsafe {
        let mut cur = libc::fcntl(root_fd, libc::F_DUPFD_CLOEXEC, 3);
        for (i, c) in comps.iter().enumerate() {
            let last = i + 1 == comps.len();
            let mut fd = open_path(cur, c);
            if fd < 0 && errno() == libc::ENOENT && create != Create::No {
                create_missing(cur, c, last && create == Create::File, display, err_w);
                fd = open_path(cur, c);
            }
            if fd < 0 {
                let e = errno();
                if e == libc::ENOENT && create == Create::No {
                    die(
                        err_w,
                        RUN_FAILED,
                        &format!("{display} does not exist in the read-only root\nhint: create it in ROOTFS, or use --ephemeral (a throw-away copy) or --writable"),
                    );
                }
                die(
                    err_w,
                    RUN_FAILED,
                    &format!("{display} inside the sandbox's root: {}", strerror(e)),
                );
            }
            check_component(fd, &comps[..=i], last, display, err_w);
            libc::close(cur);
            cur = fd;
        }
        cur
    }
}

/// `name` below `dir` as an O_PATH fd, not following a symlink (-1 and errno on failure).
fn open_path(dir: RawFd, name: &CStr) -> RawFd {
    // SAFETY: openat on a descriptor the child owns and a NUL-terminated name.
    unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    }
}

/// Create the missing `name` below `dir`: an empty file (`file`), else a directory.
fn create_missing(dir: RawFd, name: &CStr, file: bool, display: &str, err_w: RawFd) {
    // SAFETY: openat, close and mkdirat on a descriptor the child owns and a NUL-terminated
    // name.
    let made = unsafe {
        if file {
            let f = libc::openat(
                dir,
                name.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644,
            );
            if f >= 0 {
                libc::close(f);
            }
            f >= 0
        } else {
            libc::mkdirat(dir, name.as_ptr(), 0o755) == 0
        }
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
            RUN_FAILED,
            &format!(
                "cannot create {display} in the sandbox's root: {}{hint}",
                strerror(e)
            ),
        );
    }
}

/// A component a mount target passes through (`walked`: the path up to it) is never a
/// symbolic link, and is a directory unless it is the last.
fn check_component(fd: RawFd, walked: &[CString], last: bool, display: &str, err_w: RawFd) {
    // SAFETY: fstatat on a descriptor the child owns into a stat of its own stack.
    let mode = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstatat(fd, c"".as_ptr(), &raw mut st, libc::AT_EMPTY_PATH);
        st.st_mode & libc::S_IFMT
    };
    let shown = || {
        walked
            .iter()
            .map(|c| lossy(c))
            .collect::<Vec<_>>()
            .join("/")
    };
    if mode == libc::S_IFLNK {
        die(
            err_w,
            RUN_FAILED,
            &format!(
                "{display}: /{} is a symbolic link inside the root, and a mount target may not pass through one (it could point outside the root)\nhint: give the path with the link resolved",
                shown()
            ),
        );
    }
    if !last && mode != libc::S_IFDIR {
        die(
            err_w,
            RUN_FAILED,
            &format!("{display}: /{} is not a directory inside the root", shown()),
        );
    }
}

fn fd_path(fd: RawFd) -> [u8; 32] {
    let mut b = [0u8; 32];
    let mut w = &mut b[..];
    let _ = write!(w, "/proc/self/fd/{fd}\0");
    b
}

/// A mount target as the child reaches it: an absolute path of the Program, or an O_PATH
/// fd inside the root (`fd`, with its /proc/self/fd path in `proc`).
struct Place {
    proc: Option<[u8; 32]>,
    abs: *const libc::c_char,
    fd: RawFd,
}

impl Place {
    fn resolve(t: &Target, root_fd: RawFd, err_w: RawFd) -> Place {
        match t {
            Target::Abs(c) => Place {
                proc: None,
                abs: c.as_ptr(),
                fd: -1,
            },
            Target::InRoot {
                comps,
                display,
                create,
            } => {
                let fd = resolve_in_root(root_fd, comps, display, *create, err_w);
                Place {
                    proc: Some(fd_path(fd)),
                    abs: null(),
                    fd,
                }
            }
        }
    }

    /// The path to mount on: the absolute one, or the fd's /proc/self/fd path.
    fn path(&self) -> *const libc::c_char {
        self.proc
            .as_ref()
            .map(|b| b.as_ptr().cast())
            .unwrap_or(self.abs)
    }

    fn close(&self) {
        if self.fd >= 0 {
            // SAFETY: the fd resolve_in_root opened for this place, closed once.
            unsafe { libc::close(self.fd) };
        }
    }
}

/// How a target is named in messages.
fn show(t: &Target) -> String {
    match t {
        Target::Abs(c) => lossy(c),
        Target::InRoot { display, .. } => display.clone(),
    }
}

fn do_op(op: &Op, tree: RawFd, root_fd: RawFd, p: &Program, err_w: RawFd) {
    match op {
        Op::Mount {
            src,
            target,
            fstype,
            flags,
            data,
        } => {
            let place = Place::resolve(target, root_fd, err_w);
            // SAFETY: mount with NUL-terminated strings of the Program (or null) and the
            // place's path, which lives until the call returns.
            let r = unsafe {
                libc::mount(
                    opt_ptr(src),
                    place.path(),
                    opt_ptr(fstype),
                    *flags,
                    opt_ptr(data).cast(),
                )
            };
            let e = errno();
            place.close();
            if r != 0 {
                let what = fstype.as_ref().or(src.as_ref()).map(|c| lossy(c));
                die(
                    err_w,
                    RUN_FAILED,
                    &format!(
                        "cannot mount {} on {}: {}",
                        what.unwrap_or_default(),
                        show(target),
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
            // SAFETY: mount with NUL-terminated strings of the Program (or null).
            let r = unsafe {
                libc::mount(
                    opt_ptr(src),
                    target.as_ptr(),
                    opt_ptr(fstype),
                    *flags,
                    opt_ptr(data).cast(),
                )
            };
            if r != 0 && errno() != libc::ENOENT {
                fail!(err_w, "cannot mask {}", lossy(target));
            }
        }
        Op::BindTree { src, target, .. } => bind_tree(tree, src, target, root_fd, err_w),
        Op::AttachIdmapped { target } => attach_idmapped(p, target, root_fd, err_w),
        Op::Mkdir { .. } | Op::Mknod { .. } | Op::Symlink { .. } => make_node(op, err_w),
    }
}

/// Move the tree the parent cloned from the descriptor it decided on onto its target.
fn bind_tree(tree: RawFd, src: &super::HostRef, t: &Target, root_fd: RawFd, err_w: RawFd) {
    let place = Place::resolve(t, root_fd, err_w);
    // An in-root target is given as its O_PATH fd itself (a /proc/self/fd path would be a
    // symlink that move_mount does not follow).
    let (to_dir, to_path, extra) = if place.fd >= 0 {
        (place.fd, c"".as_ptr(), libc::MOVE_MOUNT_T_EMPTY_PATH)
    } else {
        (libc::AT_FDCWD, place.abs, 0)
    };
    let r = move_tree(tree, to_dir, to_path, extra);
    place.close();
    if let Err(e) = r {
        die(
            err_w,
            RUN_FAILED,
            &format!(
                "cannot bind {} on {}: {}",
                lossy(&src.shown),
                show(t),
                strerror(e)
            ),
        );
    }
}

/// move_mount the detached `tree` onto `to_path` at `to_dir` (`extra`: MOVE_MOUNT_T_*
/// flags); the errno on failure.
fn move_tree(
    tree: RawFd,
    to_dir: RawFd,
    to_path: *const libc::c_char,
    extra: u32,
) -> Result<(), i32> {
    // SAFETY: move_mount of a detached tree the child holds onto a descriptor it owns or
    // an absolute NUL-terminated path of the Program.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            to_dir,
            to_path,
            libc::MOVE_MOUNT_F_EMPTY_PATH | extra,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(errno()),
    }
}

/// Attach the ID-mapped tree the parent made for --private-users.
fn attach_idmapped(p: &Program, t: &Target, root_fd: RawFd, err_w: RawFd) {
    let Some(tree) = p.idmapped else {
        die(err_w, RUN_FAILED, "no ID-mapped tree was prepared");
    };
    let place = Place::resolve(t, root_fd, err_w);
    let r = move_tree(tree, libc::AT_FDCWD, place.abs, 0);
    place.close();
    if let Err(e) = r {
        die(
            err_w,
            RUN_FAILED,
            &format!(
                "cannot attach the ID-mapped root on {}: {}",
                show(t),
                strerror(e)
            ),
        );
    }
}

/// A directory, device node or symlink of the sandbox's /dev and friends.
fn make_node(op: &Op, err_w: RawFd) {
    // SAFETY: mkdir, mknod, chmod and symlink on NUL-terminated strings of the Program.
    unsafe {
        match op {
            Op::Mkdir { path, mode } => {
                if libc::mkdir(path.as_ptr(), *mode) != 0 && errno() != libc::EEXIST {
                    fail!(err_w, "mkdir {}", lossy(path));
                }
                libc::chmod(path.as_ptr(), *mode);
            }
            Op::Mknod { path, mode, dev } => {
                if libc::mknod(path.as_ptr(), *mode, *dev) != 0 {
                    fail!(err_w, "mknod {}", lossy(path));
                }
                // The umask must not narrow 0666.
                libc::chmod(path.as_ptr(), *mode & 0o7777);
            }
            Op::Symlink { target, path } => {
                let r = libc::symlink(target.as_ptr(), path.as_ptr());
                if r != 0 && errno() != libc::EEXIST {
                    fail!(err_w, "symlink {}", lossy(path));
                }
            }
            _ => {}
        }
    }
}
