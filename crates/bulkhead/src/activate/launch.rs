//! How a target starts: its `bulkhead spawn` or `bulkhead run` command line, and the child
//! process with the listening sockets (pass mode) or the connection (per-connection mode).

use super::command::{GlobalArgs, How, RenderTarget, RunTarget, TargetCommand};
use crate::run::RunSpec;
use crate::sandbox::{Bind, SandboxSpec, SpawnRequest, TmpfsSizes};
use bulkhead_plan::socket::{SocketSpec, TargetSpec};
use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// How `serve` starts targets: its own binary and the global options to pass on.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub exe: PathBuf,
    /// serve's own `--config`, `--cgroup-root` and `--backend`.
    pub globals: GlobalArgs,
    /// The backend is systemd: a plain target that is passed sockets runs with `run
    /// --scope` (a service cannot be given file descriptors).
    pub scope_for_fds: bool,
    /// The CLI's spelling of a target's command line.
    pub render: RenderTarget,
    /// How idle targets are frozen (on_idle = "freeze"): a cell below the slice
    /// (cgroupfs) or the target's unit (systemd). None: no socket freezes, or no backend.
    pub freezer: Option<super::frozen::Freezer>,
}

/// Where the notify socket is seen from inside a sandbox.
const NOTIFY_IN_SANDBOX: &str = "/run/bulkhead/notify";

impl Launcher {
    /// The target's command line, as the CLI spells it.
    pub fn argv(&self, target: &TargetCommand) -> Vec<OsString> {
        (self.render)(target)
    }

    /// The target's command line as a value: `spawn` for a target with a root, else `run`.
    /// `listen_fds`: sockets passed as fds 3.. (pass mode).
    pub fn target(
        &self,
        spec: &SocketSpec,
        listen_fds: u32,
        notify_dir: Option<&Path>,
        extra_env: &[(String, String)],
    ) -> TargetCommand {
        let t = &spec.target;
        let mut env = t.environment.clone();
        env.extend(extra_env.iter().cloned());
        // A booted target: its init gets the container's own socket from `spawn --boot`,
        // which passes READY=1 on to the NOTIFY_SOCKET of its process.
        let (notify_dir, notify_socket) = match notify_dir {
            Some(d) if t.boot => (None, Some(d.join("notify"))),
            d => (d, None),
        };
        if let Some(d) = notify_dir {
            let socket = match t.rootfs {
                Some(_) => format!("{NOTIFY_IN_SANDBOX}/notify"),
                None => d.join("notify").display().to_string(),
            };
            env.push(("NOTIFY_SOCKET".into(), socket));
        }
        if listen_fds > 0 {
            let names = vec![spec.name.as_str(); listen_fds as usize].join(":");
            env.push(("LISTEN_FDNAMES".into(), names));
        }
        let argv = t.command.iter().map(OsString::from).collect();
        let how = match &t.rootfs {
            Some(root) => {
                let mut r = spawn_request(t, root, spec.stop_timeout);
                if let Some(d) = notify_dir {
                    // Read-only: the sandbox can send to the socket, not change the host's /run.
                    r.spec.binds.push(Bind {
                        src: d.to_path_buf(),
                        dst: NOTIFY_IN_SANDBOX.into(),
                        read_only: true,
                    });
                }
                r.spec.listen_fds = listen_fds;
                r.spec.env = env;
                r.spec.argv = argv;
                How::Spawn(r)
            }
            None => How::Run(RunTarget {
                spec: RunSpec {
                    uid: t.user.clone(),
                    gid: t.group.clone(),
                    cwd: t.working_directory.clone(),
                    env,
                    listen_fds,
                    argv,
                    slice: t.slice.clone(),
                    ..Default::default()
                },
                scope: listen_fds > 0 && self.scope_for_fds,
            }),
        };
        TargetCommand {
            exe: self.exe.clone(),
            globals: self.globals.clone(),
            how,
            notify_socket,
        }
    }
}

/// A sandboxed target's `spawn`: an ephemeral copy of `root`, as the plan describes it.
/// The plan checked the network, snapshot and bind spellings when it was read.
fn spawn_request(t: &TargetSpec, root: &str, stop_timeout: std::time::Duration) -> SpawnRequest {
    let d = TmpfsSizes::DEFAULT;
    SpawnRequest {
        spec: SandboxSpec {
            ephemeral: true,
            snapshot: t.snapshot.as_deref().and_then(|s| s.parse().ok()),
            net: t
                .network
                .as_deref()
                .and_then(|n| n.parse().ok())
                .unwrap_or_default(),
            binds: t.bind.iter().filter_map(|b| b.parse().ok()).collect(),
            sizes: TmpfsSizes {
                tmp: t.tmp_size.unwrap_or(d.tmp),
                shm: t.shm_size.unwrap_or(d.shm),
                overlay: t.overlay_size.unwrap_or(d.overlay),
            },
            uid: t.user.clone(),
            gid: t.group.clone(),
            cwd: t.working_directory.clone(),
            seccomp: true,
            stop_timeout: Some(stop_timeout),
            boot: t.boot,
            slice: t.slice.clone(),
            ..Default::default()
        },
        directory: root.to_string(),
        private_users: t.private_users.clone(),
    }
}

/// Start a target process. `fds` become fds 3.. of the child; `stdio` (per-connection
/// mode) becomes its stdin and stdout; its $NOTIFY_SOCKET is the target's
/// ([`TargetCommand::notify_socket`]) or none. The child gets SIGTERM if `serve` dies.
pub fn start_process(
    launcher: &Launcher,
    target: &TargetCommand,
    fds: &[BorrowedFd<'_>],
    stdio: Option<OwnedFd>,
) -> io::Result<tokio::process::Child> {
    let argv = launcher.argv(target);
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).kill_on_drop(false);
    // serve's own $NOTIFY_SOCKET (its service manager's) is not the target's to use.
    match &target.notify_socket {
        Some(p) => cmd.env("NOTIFY_SOCKET", p),
        None => cmd.env_remove("NOTIFY_SOCKET"),
    };
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

    fn launcher(scope_for_fds: bool) -> Launcher {
        Launcher {
            exe: "/usr/bin/bulkhead".into(),
            globals: GlobalArgs::default(),
            scope_for_fds,
            render: |_| Vec::new(),
            freezer: None,
        }
    }

    #[test]
    fn a_plain_target_given_sockets_on_systemd_runs_in_a_scope() {
        let plan = bulkhead_plan::Plan::parse(
            "[socket.p]\nlisten = [\"1\"]\nmode = \"pass\"\n[socket.p.target]\ncommand = [\"/bin/srv\"]\n",
            None,
        )
        .unwrap();
        let spec = &plan.sockets["p"];
        let scope = |scope_for_fds: bool, fds: u32| match launcher(scope_for_fds)
            .target(spec, fds, None, &[])
            .how
        {
            How::Run(r) => {
                assert_eq!(r.spec.listen_fds, fds);
                r.scope
            }
            How::Spawn(r) => panic!("a plain target became a sandbox: {r:?}"),
        };
        assert!(scope(true, 1));
        assert!(!scope(false, 1));
        assert!(!scope(true, 0));
    }

    #[test]
    fn a_sandboxed_target_can_ask_for_a_user_namespace() {
        let plan = bulkhead_plan::Plan::parse(
            "[socket.p]\nlisten = [\"1\"]\nbackend = \"127.0.0.1:2\"\n[socket.p.target]\ncommand = [\"/bin/srv\"]\nrootfs = \"/srv/root\"\nprivate_users = true\nslice = \"db-helper\"\n",
            None,
        )
        .unwrap();
        match launcher(false).target(&plan.sockets["p"], 0, None, &[]).how {
            How::Spawn(r) => {
                assert_eq!(r.private_users.as_deref(), Some("auto"));
                assert_eq!(r.directory, "/srv/root");
                assert_eq!(
                    r.spec.slice.map(|s| s.to_string()),
                    Some("db-helper".into())
                );
            }
            How::Run(r) => panic!("a target with a root became a plain run: {r:?}"),
        }
    }
}
