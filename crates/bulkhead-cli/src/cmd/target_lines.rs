//! serve's targets start through a typed command line ([`TargetCommand`]): the CLI's own
//! parser must read each rendered line back to the same value, and each line must take its
//! one-command parser (`spawn` or `run`: the cold-start fast path).

use crate::args::{self, Cli, Command};
use bulkhead::actions::serve::{GlobalArgs, How, TargetCommand, TargetLauncher};
use bulkhead::plan::Plan;
use bulkhead::Choice;
use clap::Parser;
use std::path::Path;

fn launcher(scope_for_fds: bool) -> TargetLauncher {
    TargetLauncher {
        exe: "/usr/bin/bulkhead".into(),
        globals: GlobalArgs {
            config: Some("/etc/bulkhead/a plan.toml".into()),
            cgroup_root: Some("/bulkhead-test".into()),
            backend: Choice::Cgroupfs,
        },
        scope_for_fds,
        render: args::target::argv,
        freezer: None,
    }
}

fn target(plan: &str, fds: u32, notify: Option<&Path>) -> TargetCommand {
    let plan = Plan::parse(plan, None).unwrap();
    let env = [("EXTRA".to_string(), "x=y z".to_string())];
    launcher(true).target(&plan.sockets["t"], fds, notify, &env)
}

/// The globals as the CLI read them, in the launcher's terms.
fn globals(cli: &Cli) -> GlobalArgs {
    GlobalArgs {
        config: cli.config.clone(),
        cgroup_root: Some(cli.cgroup_root.clone()).filter(|r| r != "/"),
        backend: cli.backend.into(),
    }
}

/// Parse `t`'s command line with the CLI (and with the full parser too) and compare.
fn read_back(t: &TargetCommand) -> Cli {
    let argv = args::target::argv(t);
    assert_eq!(argv[0], t.exe.as_os_str());
    let cli = args::try_parse_from(argv.clone()).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert_eq!(globals(&cli), t.globals, "{argv:?}");
    let full = Cli::try_parse_from(argv.clone()).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert_eq!(globals(&full), t.globals, "{argv:?}");
    cli
}

const SANDBOXED: &str = r#"
[socket.t]
listen = ["127.0.0.1:1"]
backend = "127.0.0.1:2"
stop_timeout = "7s"
[socket.t.target]
command = ["/bin/srv", "-p", "--", "a b"]
rootfs = "/srv/root"
slice = "db-helper"
user = "nobody"
group = "nogroup"
working_directory = "/var/lib/srv"
network = "host"
bind = ["/srv/data:/data:ro", "/srv/logs"]
snapshot = "overlay"
private_users = "auto"
tmp_size = 1048576
overlay_size = 2097152
environment = { A = "b c", EMPTY = "" }
"#;

#[test]
fn a_sandboxed_target_reads_back_through_the_spawn_fast_path() {
    for (fds, notify) in [(0, None), (2, Some(Path::new("/run/bulkhead/t.notify")))] {
        let t = target(SANDBOXED, fds, notify);
        let How::Spawn(want) = &t.how else {
            panic!("{t:?}")
        };
        let argv = args::target::argv(&t);
        assert_eq!(args::leading_command(&argv), Some("spawn"), "{argv:?}");
        let cli = read_back(&t);
        let Command::Spawn(a) = &cli.command else {
            panic!("{argv:?}")
        };
        assert_eq!(&super::spawn::request(a), want, "{argv:?}");
        assert_eq!(want.spec.listen_fds, fds);
        assert_eq!(want.spec.binds.len(), 2 + usize::from(notify.is_some()));
    }
}

const PLAIN: &str = r#"
[socket.t]
listen = ["127.0.0.1:1"]
mode = "pass"
[socket.t.target]
command = ["/usr/sbin/srv", "--flag"]
slice = "db-helper"
user = "nobody"
working_directory = "/tmp"
environment = { A = "1" }
"#;

#[test]
fn a_plain_target_reads_back_as_run() {
    for (fds, notify, scope) in [
        (0, None, false),
        (1, Some(Path::new("/run/bulkhead/t.notify")), true),
    ] {
        let t = target(PLAIN, fds, notify);
        let How::Run(want) = &t.how else {
            panic!("{t:?}")
        };
        assert_eq!(want.scope, scope);
        let argv = args::target::argv(&t);
        assert_eq!(args::leading_command(&argv), Some("run"), "{argv:?}");
        let Command::Run(a) = &read_back(&t).command else {
            panic!("{argv:?}")
        };
        let got = super::run::request(a);
        assert_eq!(got.spec, want.spec, "{argv:?}");
        assert_eq!(
            got.spec.slice.as_ref().map(|s| s.as_str()),
            Some("db-helper")
        );
        assert_eq!(got.scope, want.scope);
        assert!(!got.pty && got.hugepages.is_none());
    }
}

const BOOTED: &str = r#"
[socket.t]
listen = ["127.0.0.1:1"]
backend = "127.0.0.1:8000"
[socket.t.target]
rootfs = "/srv/debian"
boot = true
command = ["systemd.unit=multi-user.target"]
snapshot = "overlay"
slice = "db-helper"
"#;

/// A booted target: `spawn --boot` with the init's arguments, its READY=1 passed on to the
/// NOTIFY_SOCKET of the spawn process (serve's socket), not to one bound into the root.
#[test]
fn a_booted_target_reads_back_as_spawn_boot_with_the_notify_socket_outside() {
    let plan = Plan::parse(BOOTED, None).unwrap();
    let s = &plan.sockets["t"];
    assert_eq!(
        s.ready,
        bulkhead::plan::socket::Ready::Notify,
        "boot implies notify"
    );
    let notify = Path::new("/run/bulkhead/sockets/t");
    let t = launcher(false).target(s, 0, Some(notify), &[]);
    let How::Spawn(want) = &t.how else {
        panic!("{t:?}")
    };
    assert!(want.spec.boot && want.spec.binds.is_empty(), "{want:?}");
    assert!(!want.spec.env.iter().any(|(k, _)| k == "NOTIFY_SOCKET"));
    assert_eq!(
        t.notify_socket.as_deref(),
        Some(notify.join("notify").as_path())
    );
    let argv = args::target::argv(&t);
    assert_eq!(args::leading_command(&argv), Some("spawn"), "{argv:?}");
    let Command::Spawn(a) = &read_back(&t).command else {
        panic!("{argv:?}")
    };
    assert_eq!(&super::spawn::request(a), want, "{argv:?}");
}
