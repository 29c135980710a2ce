//! The default seccomp filter: a deny list (EPERM) of system calls a database helper never
//! needs and that reach the whole host: kernel modules, kexec, reboot, swap, clocks, keyrings,
//! BPF, perf, userfaultfd, the file-handle calls of the "shocker" escape, and new namespaces
//! (unshare/setns, clone with a CLONE_NEW* flag). clone3 answers ENOSYS, so libc falls back
//! to clone, whose flags the filter can see (Docker's default profile does the same).
//! Everything else is allowed; capabilities (see `setup::kept_caps`) do the rest.

use crate::error::{Error, Result};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

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
    "clone with CLONE_NEW*",
    "clone3 (ENOSYS)",
];

/// Two compiled programs: the deny list, and clone3 → ENOSYS.
pub struct Filter {
    pub(crate) programs: Vec<BpfProgram>,
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

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

fn err(e: impl std::fmt::Display) -> Error {
    Error::failed(format!("cannot build the seccomp filter: {e}"))
}

/// Compile the default filter (tens of microseconds; done before the clone).
pub fn default_filter() -> Result<Filter> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        numbers().into_iter().map(|n| (n, vec![])).collect();
    // clone(flags, ...) with any namespace flag: one rule per flag (the rules are OR'ed).
    let ns_flags = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWCGROUP,
    ];
    let mut clone_rules = Vec::new();
    for f in ns_flags {
        let cond = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(f as u64),
            f as u64,
        )
        .map_err(err)?;
        clone_rules.push(SeccompRule::new(vec![cond]).map_err(err)?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let deny: BpfProgram = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(err)?
    .try_into()
    .map_err(err)?;
    let clone3: BpfProgram = SeccompFilter::new(
        [(libc::SYS_clone3, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )
    .map_err(err)?
    .try_into()
    .map_err(err)?;
    Ok(Filter {
        programs: vec![deny, clone3],
    })
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({} programs)", self.programs.len())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_filter_compiles() {
        let f = super::default_filter().unwrap();
        assert_eq!(f.programs.len(), 2);
        assert!(f.programs.iter().all(|p| !p.is_empty()));
        assert_eq!(super::numbers().len() + 2, super::DENIED.len());
    }
}
