//! The parse of command lines people type.

use super::{try_parse_from, Command};
use std::ffi::OsString;

fn run_command(line: &[&str]) -> Vec<String> {
    let args: Vec<OsString> = line.iter().map(OsString::from).collect();
    let cli = try_parse_from(args).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    let Command::Run(a) = cli.command else {
        panic!("not run: {line:?}")
    };
    a.command
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn run_takes_the_command_with_or_without_a_double_dash() {
    assert_eq!(
        run_command(&["bulkhead", "run", "--slice", "db-helper", "id"]),
        ["id"]
    );
    assert_eq!(
        run_command(&["bulkhead", "run", "--slice", "db-helper", "--", "id", "-u"]),
        ["id", "-u"]
    );
    // Options after the command are the command's, even ones run also has.
    assert_eq!(
        run_command(&[
            "bulkhead",
            "run",
            "-s",
            "db-helper",
            "ls",
            "-v",
            "--slice",
            "--",
            "x"
        ]),
        ["ls", "-v", "--slice", "--", "x"]
    );
    let args: Vec<OsString> = ["bulkhead", "run", "--slice", "db-helper"]
        .iter()
        .map(OsString::from)
        .collect();
    assert!(try_parse_from(args).is_err(), "a command is required");
}

#[test]
fn global_options_are_one_short_block_in_commands_and_explained_once() {
    use clap::CommandFactory;
    let mut top = super::Cli::command();
    top.build();
    let long = top.render_long_help().to_string();
    assert!(
        long.contains("transient systemd units over D-Bus"),
        "{long}"
    );
    for name in ["status", "apply", "run", "guard"] {
        let sub = top.find_subcommand_mut(name).unwrap();
        let help = sub.render_long_help().to_string();
        assert!(help.contains("Global options:"), "{name}: {help}");
        assert!(
            help.contains("auto, systemd or cgroupfs [default: auto]"),
            "{name}: {help}"
        );
        assert!(!help.contains("Possible values"), "{name}: {help}");
        assert!(!help.contains("over D-Bus"), "{name}: {help}");
    }
}

fn argv(line: &[&str]) -> Vec<OsString> {
    line.iter().map(OsString::from).collect()
}

#[test]
fn the_command_is_found_after_the_global_options_before_it() {
    use super::leading_command;
    let cases: &[(&[&str], Option<&str>)] = &[
        (&["bulkhead", "run", "--slice", "s", "id"], Some("run")),
        (
            &[
                "bulkhead",
                "-c",
                "p.toml",
                "--cgroup-root=/t",
                "-q",
                "--backend",
                "cgroupfs",
                "spawn",
            ],
            Some("spawn"),
        ),
        (&["bulkhead", "--config", "run", "status"], Some("status")),
        (&["bulkhead", "--quiet", "apply"], Some("apply")),
        // Not a global option, a value stuck to a short one, a missing value: the full
        // parser decides.
        (&["bulkhead", "--slice", "s", "run"], None),
        (&["bulkhead", "-cplan.toml", "run"], None),
        (&["bulkhead", "-c"], None),
        (&["bulkhead"], None),
    ];
    for (line, want) in cases {
        assert_eq!(leading_command(&argv(line)), *want, "{line:?}");
    }
}

#[test]
fn the_one_command_parsers_read_what_the_full_parser_reads() {
    use clap::Parser;
    let lines: &[&[&str]] = &[
        &["bulkhead", "run", "--slice", "db-helper", "id"],
        &[
            "bulkhead",
            "-c",
            "p.toml",
            "run",
            "-s",
            "db-helper.slice",
            "-E",
            "A=b",
            "--",
            "ls",
            "-l",
        ],
        &[
            "bulkhead",
            "run",
            "--uid",
            "nobody",
            "--cwd",
            "/tmp",
            "--listen-fds",
            "2",
            "--cgroup-root",
            "/t",
            "--",
            "x",
        ],
        &[
            "bulkhead",
            "run",
            "--hugepages",
            "thp",
            "--no-verify",
            "-q",
            "id",
        ],
        &[
            "bulkhead",
            "spawn",
            "-D",
            "/srv/root",
            "--slice",
            "db-helper",
            "--",
            "/bin/sh",
        ],
        &[
            "bulkhead",
            "--backend=cgroupfs",
            "spawn",
            "--ephemeral",
            "-D",
            "busybox",
            "--",
            "true",
        ],
    ];
    for line in lines {
        let fast = try_parse_from(argv(line)).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        let full =
            super::Cli::try_parse_from(argv(line)).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(
            format!("{:?}", fast.globals),
            format!("{:?}", full.globals),
            "{line:?}"
        );
        match (&fast.command, &full.command) {
            (Command::Run(a), Command::Run(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}")),
            (Command::Spawn(a), Command::Spawn(b)) => {
                assert_eq!(format!("{a:?}"), format!("{b:?}"))
            }
            _ => panic!("{line:?}: not the same command"),
        }
    }
    // A mistake is told by the full parser, as without the fast path.
    for line in [
        &["bulkhead", "run", "--slise", "x", "--", "id"][..],
        &["bulkhead", "spawn", "--bogus"],
    ] {
        let fast = try_parse_from(argv(line)).err().expect("an error");
        let full = super::Cli::try_parse_from(argv(line))
            .err()
            .expect("an error");
        assert_eq!(fast.to_string(), full.to_string(), "{line:?}");
    }
}
