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
