//! How a target starts: its `bulkhead spawn` or `bulkhead run` command line, and the child
//! process with the listening sockets (pass mode) or the connection (per-connection mode).

use bulkhead_plan::socket::SocketSpec;
use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// How `serve` starts targets: its own binary and the global options to pass on.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub exe: PathBuf,
    /// e.g. `--cgroup-root /x -c plan.toml`, placed before the subcommand.
    pub global_args: Vec<OsString>,
    /// The backend is systemd: a plain target that is passed sockets runs with `run
    /// --scope` (a service cannot be given file descriptors).
    pub scope_for_fds: bool,
}

/// Where the notify socket is seen from inside a sandbox.
const NOTIFY_IN_SANDBOX: &str = "/run/bulkhead/notify";

impl Launcher {
    /// The target's command line. `listen_fds`: sockets passed as fds 3.. (pass mode).
    pub fn command(
        &self,
        spec: &SocketSpec,
        listen_fds: u32,
        notify_dir: Option<&Path>,
        extra_env: &[(String, String)],
    ) -> Vec<OsString> {
        let t = &spec.target;
        let mut a: Vec<OsString> = vec![self.exe.clone().into()];
        a.extend(self.global_args.iter().cloned());
        let mut env = t.environment.clone();
        env.extend(extra_env.iter().cloned());
        if let Some(root) = &t.rootfs {
            a.extend([
                "spawn".into(),
                "-D".into(),
                root.into(),
                "--ephemeral".into(),
            ]);
            if let Some(s) = &t.snapshot {
                a.extend(["--snapshot".into(), s.into()]);
            }
            if let Some(u) = &t.private_users {
                a.push(format!("--private-users={u}").into());
            }
            if let Some(n) = &t.network {
                a.extend(["--net".into(), n.into()]);
            }
            for b in &t.bind {
                a.extend(["--bind".into(), b.into()]);
            }
            for (flag, size) in [
                ("--tmp-size", t.tmp_size),
                ("--shm-size", t.shm_size),
                ("--overlay-size", t.overlay_size),
            ] {
                if let Some(n) = size {
                    a.extend([flag.into(), n.to_string().into()]);
                }
            }
            if let Some(u) = &t.user {
                a.extend(["--uid".into(), u.into()]);
            }
            a.push("--stop-timeout".into());
            a.push(format!("{}ms", spec.stop_timeout.as_millis()).into());
            if let Some(d) = notify_dir {
                let mut b = d.as_os_str().to_os_string();
                b.push(":");
                b.push(NOTIFY_IN_SANDBOX);
                // Read-only: the sandbox can send to the socket, not change the host's /run.
                b.push(":ro");
                a.extend(["--bind".into(), b]);
                env.push((
                    "NOTIFY_SOCKET".into(),
                    format!("{NOTIFY_IN_SANDBOX}/notify"),
                ));
            }
        } else {
            a.push("run".into());
            if listen_fds > 0 && self.scope_for_fds {
                a.push("--scope".into());
            }
            if let Some(u) = &t.user {
                a.extend(["--uid".into(), u.into()]);
            }
            if let Some(d) = notify_dir {
                env.push((
                    "NOTIFY_SOCKET".into(),
                    d.join("notify").display().to_string(),
                ));
            }
        }
        if let Some(s) = &t.slice {
            a.extend(["--slice".into(), s.to_string().into()]);
        }
        if let Some(g) = &t.group {
            a.extend(["--gid".into(), g.into()]);
        }
        if let Some(c) = &t.working_directory {
            a.extend(["--cwd".into(), c.into()]);
        }
        if listen_fds > 0 {
            a.extend(["--listen-fds".into(), listen_fds.to_string().into()]);
            let names = vec![spec.name.as_str(); listen_fds as usize].join(":");
            env.push(("LISTEN_FDNAMES".into(), names));
        }
        for (k, v) in env {
            a.extend(["--env".into(), format!("{k}={v}").into()]);
        }
        a.push("--".into());
        a.extend(t.command.iter().map(OsString::from));
        a
    }
}

/// Start a target process. `fds` become fds 3.. of the child; `stdio` (per-connection
/// mode) becomes its stdin and stdout. The child gets SIGTERM if `serve` dies.
pub fn start_process(
    argv: &[OsString],
    fds: &[BorrowedFd<'_>],
    stdio: Option<OwnedFd>,
) -> io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).kill_on_drop(false);
    match stdio {
        Some(fd) => {
            let dup = fd.try_clone()?;
            cmd.stdin(std::process::Stdio::from(fd))
                .stdout(std::process::Stdio::from(dup));
        }
        None => {
            cmd.stdin(std::process::Stdio::null());
        }
    }
    // Move the passed fds out of the way of 3..3+N first (F_DUPFD_CLOEXEC above 100), so
    // the dup2 calls in the child cannot overwrite one another.
    let high: Vec<OwnedFd> = fds
        .iter()
        .map(|fd| bulkhead_sys::fd::dup_above(fd, 100))
        .collect::<io::Result<_>>()?;
    bulkhead_sys::process::pass_fds_before_exec(cmd.as_std_mut(), &high, libc::SIGTERM);
    if let Some(soft) = super::fds::target_soft() {
        bulkhead_sys::process::nofile_soft_before_exec(cmd.as_std_mut(), soft);
    }
    let child = cmd.spawn();
    drop(high);
    child
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_target_given_sockets_on_systemd_runs_in_a_scope() {
        let plan = bulkhead_plan::Plan::parse(
            "[socket.p]\nlisten = [\"1\"]\nmode = \"pass\"\n[socket.p.target]\ncommand = [\"/bin/srv\"]\n",
            None,
        )
        .unwrap();
        let spec = &plan.sockets["p"];
        let argv = |scope_for_fds: bool, fds: u32| {
            let l = Launcher {
                exe: "/usr/bin/bulkhead".into(),
                global_args: Vec::new(),
                scope_for_fds,
            };
            l.command(spec, fds, None, &[])
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(
            argv(true, 1).starts_with("/usr/bin/bulkhead run --scope --listen-fds 1"),
            "{}",
            argv(true, 1)
        );
        assert!(!argv(false, 1).contains("--scope"));
        assert!(!argv(true, 0).contains("--scope"));
    }

    #[test]
    fn a_sandboxed_target_can_ask_for_a_user_namespace() {
        let plan = bulkhead_plan::Plan::parse(
            "[socket.p]\nlisten = [\"1\"]\nbackend = \"127.0.0.1:2\"\n[socket.p.target]\ncommand = [\"/bin/srv\"]\nrootfs = \"/srv/root\"\nprivate_users = true\n",
            None,
        )
        .unwrap();
        let l = Launcher {
            exe: "/usr/bin/bulkhead".into(),
            global_args: Vec::new(),
            scope_for_fds: false,
        };
        let argv: Vec<String> = l
            .command(&plan.sockets["p"], 0, None, &[])
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(
            argv.contains(&"--private-users=auto".to_string()),
            "{argv:?}"
        );
    }
}
