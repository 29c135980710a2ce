//! The default seccomp filter: a deny list (EPERM) of system calls a database helper never
//! needs and that reach the whole host: kernel modules, kexec, reboot, swap, clocks, keyrings,
//! BPF, perf, userfaultfd, the file-handle calls of the "shocker" escape, new namespaces
//! (unshare/setns, clone with a CLONE_NEW* flag) and io_uring. clone3 answers ENOSYS, so libc
//! falls back to clone, whose flags the filter can see (Docker's default profile does the
//! same). Everything else is allowed; capabilities (see `setup::kept_caps`) do the rest.
//!
//! io_uring (`io_uring_setup`, `io_uring_enter`, `io_uring_register`): the operations a ring
//! carries out (open, read, write, connect, ...) never pass through this filter, and io_uring
//! has been the way in of many kernel privilege escalations (about 60% of the exploits sent
//! to Google's kCTF VRP by 2023). Docker's default profile (moby#46762) and containerd's
//! (containerd#9320) took it out of their allow lists in 2023, so there it falls to the
//! profile's default action: SCMP_ACT_ERRNO, with `defaultErrnoRet` 1 in Docker's, EPERM;
//! containerd's names no errno, and runc's default for SCMP_ACT_ERRNO is EPERM as well. We
//! answer EPERM as they do (not ENOSYS): programs that probe for io_uring (libuv, for one)
//! take the refusal as "not here" and use epoll.

use bulkhead_sys::error::Result;

/// The names of the denied calls, for the docs and `spawn --dry-run`.
pub const DENIED: &[&str] = &[
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "move_mount",
    "name_to_handle_at",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "quotactl",
    "reboot",
    "request_key",
    "settimeofday",
    "setns",
    "swapoff",
    "swapon",
    "syslog",
    "umount2",
    "unshare",
    "userfaultfd",
    "vhangup",
    "ioctl TIOCSTI and TIOCLINUX (typing into a terminal)",
    "clone with CLONE_NEW*",
    "clone3 (ENOSYS)",
];

pub use bulkhead_sys::launch::Filter;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

fn numbers() -> Vec<i64> {
    let mut v = vec![
        libc::SYS_acct,
        libc::SYS_add_key,
        libc::SYS_bpf,
        libc::SYS_clock_adjtime,
        libc::SYS_clock_settime,
        libc::SYS_delete_module,
        libc::SYS_finit_module,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fsopen,
        libc::SYS_fspick,
        libc::SYS_init_module,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_io_uring_setup,
        libc::SYS_kexec_file_load,
        libc::SYS_kexec_load,
        libc::SYS_keyctl,
        libc::SYS_lookup_dcookie,
        libc::SYS_move_mount,
        libc::SYS_name_to_handle_at,
        libc::SYS_open_by_handle_at,
        libc::SYS_open_tree,
        libc::SYS_perf_event_open,
        libc::SYS_quotactl,
        libc::SYS_reboot,
        libc::SYS_request_key,
        libc::SYS_settimeofday,
        libc::SYS_setns,
        libc::SYS_swapoff,
        libc::SYS_swapon,
        libc::SYS_syslog,
        libc::SYS_umount2,
        libc::SYS_unshare,
        libc::SYS_userfaultfd,
        libc::SYS_vhangup,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_ioperm, libc::SYS_iopl]);
    v
}

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;

/// Where a jump goes: the next instruction, or one of the three returns at the end.
#[derive(Clone, Copy)]
enum To {
    Next,
    Allow,
    Eperm,
    Enosys,
    Kill,
    /// This many instructions past the next one.
    Ahead(usize),
}

/// Build the filter: a few dozen instructions, built before the clone.
///
/// ```text
/// arch != native            -> kill (no 32-bit or foreign-ABI way around the list)
/// nr >= 0x40000000 (x32)    -> EPERM
/// nr in DENIED              -> EPERM
/// clone3                    -> ENOSYS (libc falls back to clone)
/// ioctl TIOCSTI, TIOCLINUX  -> EPERM (pushing keystrokes into a terminal)
/// clone with CLONE_NEW*     -> EPERM
/// everything else           -> allow
/// ```
pub fn default_filter() -> Result<Filter> {
    // seccomp_data: int nr (offset 0), u32 arch (4), u64 ip (8), u64 args[6] (16..).
    let mut code: Vec<(u16, To, To, u32)> = vec![
        (LD_W_ABS, To::Next, To::Next, 4),
        (JEQ, To::Next, To::Kill, AUDIT_ARCH),
        (LD_W_ABS, To::Next, To::Next, 0),
    ];
    #[cfg(target_arch = "x86_64")]
    code.push((JGE, To::Eperm, To::Next, 0x4000_0000));
    for n in numbers() {
        code.push((JEQ, To::Eperm, To::Next, n as u32));
    }
    code.push((JEQ, To::Enosys, To::Next, libc::SYS_clone3 as u32));
    // ioctl's request is its second argument; the kernel reads it as 32 bits.
    code.push((JEQ, To::Next, To::Ahead(3), libc::SYS_ioctl as u32));
    code.push((LD_W_ABS, To::Next, To::Next, 24));
    code.push((JEQ, To::Eperm, To::Next, libc::TIOCSTI as u32));
    code.push((JEQ, To::Eperm, To::Allow, libc::TIOCLINUX as u32));
    code.push((JEQ, To::Next, To::Allow, libc::SYS_clone as u32));
    // clone's flags are its first argument (low 32 bits on little-endian x86_64/aarch64).
    code.push((LD_W_ABS, To::Next, To::Next, 16));
    let ns = (libc::CLONE_NEWNS
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUSER
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWCGROUP) as u32;
    code.push((JSET, To::Eperm, To::Allow, ns));
    let end = code.len();
    let (allow, eperm, enosys, kill) = (end, end + 1, end + 2, end + 3);
    let mut program = Vec::with_capacity(end + 4);
    for (i, (op, jt, jf, k)) in code.into_iter().enumerate() {
        let off = |t: To| -> u8 {
            let target = match t {
                To::Next => i + 1,
                To::Allow => allow,
                To::Eperm => eperm,
                To::Enosys => enosys,
                To::Kill => kill,
                To::Ahead(n) => i + 1 + n,
            };
            (target - i - 1) as u8
        };
        program.push(libc::sock_filter {
            code: op,
            jt: off(jt),
            jf: off(jf),
            k,
        });
    }
    for k in [
        RET_ALLOW,
        RET_ERRNO | libc::EPERM as u32,
        RET_ERRNO | libc::ENOSYS as u32,
        RET_KILL_PROCESS,
    ] {
        program.push(libc::sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k,
        });
    }
    Ok(Filter {
        program,
        denied: DENIED,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_filter_compiles() {
        let f = super::default_filter().unwrap();
        // Every jump stays inside the program and the last instruction returns.
        let n = f.program.len();
        assert!(n < 80, "{n} instructions");
        for (i, ins) in f.program.iter().enumerate() {
            assert!(
                i + 1 + (ins.jt as usize) < n && i + 1 + (ins.jf as usize) < n
                    || ins.code == super::RET
            );
        }
        assert_eq!(f.program[n - 1].code, super::RET);
        assert_eq!(super::numbers().len() + 3, super::DENIED.len());
        // io_uring, whose operations the filter never sees (issue 40).
        for n in [
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ] {
            assert!(super::numbers().contains(&n), "{n}");
        }
    }
}
