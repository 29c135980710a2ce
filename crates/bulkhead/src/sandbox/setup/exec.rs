//! How the command is executed: host name, environment, argv and the PATH search, working
//! directory, and the capabilities the sandbox keeps.

use super::{cstr, Ids};
use crate::sandbox::{Net, SandboxSpec};
use bulkhead_sys::error::Result;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The exec arguments.
pub struct Exec {
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    /// Where execve is tried, in order (the PATH search, done in the child after the pivot).
    pub candidates: Vec<CString>,
    pub program_name: String,
    /// The index in `envp` of the `LISTEN_PID=` entry the child fills in with its own PID.
    pub listen_pid_slot: Option<usize>,
}

/// `--hostname`, else ROOTFS's directory name made into a valid host name.
pub fn hostname(spec: &SandboxSpec, rootfs: &Path) -> String {
    if let Some(h) = &spec.hostname {
        return h.clone();
    }
    let base = rootfs
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let h: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    if h.trim_matches('-').is_empty() {
        "sandbox".into()
    } else {
        h
    }
}

/// The environment (clean, as systemd-nspawn gives it, then the user's settings), argv, and
/// the places execve tries.
pub fn exec(spec: &SandboxSpec, ids: &Ids) -> Result<Exec> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), ids.home.clone()),
        ("container".into(), "bulkhead".into()),
    ];
    if let Some(u) = &ids.user {
        env.push(("USER".into(), u.clone()));
        env.push(("LOGNAME".into(), u.clone()));
    }
    if let Ok(t) = std::env::var("TERM") {
        env.push(("TERM".into(), t));
    }
    for (k, v) in &spec.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    let mut listen_pid_slot = None;
    if spec.listen_fds > 0 {
        env.retain(|(k, _)| k != "LISTEN_FDS" && k != "LISTEN_PID");
        env.push(("LISTEN_FDS".into(), spec.listen_fds.to_string()));
        // Filled in by the command's process with its PID inside the sandbox.
        listen_pid_slot = Some(env.len());
        env.push(("LISTEN_PID".into(), String::new()));
    }
    let envp = env
        .iter()
        .map(|(k, v)| cstr(format!("{k}={v}")))
        .collect::<Result<Vec<_>>>()?;
    let argv = spec.argv.iter().map(cstr).collect::<Result<Vec<_>>>()?;
    let prog = &spec.argv[0];
    let candidates = if prog.as_bytes().contains(&b'/') {
        vec![cstr(prog)?]
    } else {
        let path = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        path.split(':')
            .filter(|d| !d.is_empty())
            .map(|d| cstr(Path::new(d).join(prog)))
            .collect::<Result<Vec<_>>>()?
    };
    Ok(Exec {
        argv,
        envp,
        candidates,
        program_name: prog.to_string_lossy().to_string(),
        listen_pid_slot,
    })
}

/// `--cwd`, else the user's home with `--uid`, else /.
pub fn cwd(spec: &SandboxSpec, ids: &Ids) -> Result<CString> {
    match &spec.cwd {
        Some(c) => cstr(c),
        None if spec.uid.is_some() && ids.home.starts_with('/') => cstr(&ids.home),
        None => cstr("/"),
    }
}

/// The capabilities the sandbox keeps in its bounding set: Docker's default set, less
/// CAP_MKNOD (there is no device cgroup per sandbox) and less CAP_NET_RAW on the host's
/// network.
fn kept_caps(net: Net) -> Vec<u32> {
    let mut keep = vec![
        0,  // CAP_CHOWN
        1,  // CAP_DAC_OVERRIDE
        3,  // CAP_FOWNER
        4,  // CAP_FSETID
        5,  // CAP_KILL
        6,  // CAP_SETGID
        7,  // CAP_SETUID
        8,  // CAP_SETPCAP
        10, // CAP_NET_BIND_SERVICE
        18, // CAP_SYS_CHROOT
        29, // CAP_AUDIT_WRITE
        31, // CAP_SETFCAP
    ];
    if net != Net::Host {
        keep.push(13); // CAP_NET_RAW
    }
    keep
}

fn last_cap() -> u32 {
    bulkhead_sys::statefile::read_string(std::path::Path::new("/proc/sys/kernel/cap_last_cap"), 64)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// Every capability not in [`kept_caps`], up to the kernel's last.
pub fn dropped_caps(net: Net) -> Vec<u32> {
    let keep = kept_caps(net);
    (0..=last_cap()).filter(|c| !keep.contains(c)).collect()
}
