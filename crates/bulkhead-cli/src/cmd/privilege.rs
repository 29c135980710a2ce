//! Commands that change the system need root: say so first, before any other check, instead
//! of failing later with a reason that is not the real one (a non-root user cannot even read
//! the marks that tell bulkhead's cgroups from others).

use crate::args::hugepages::HugepagesCmd;
use crate::args::image::{ImageCmd, StoreCmd};
use crate::args::iocost::IocostCmd;
use crate::args::{Cli, Command};
use bulkhead::error::Diagnostic;
use std::ffi::OsString;

/// The exit status of a command refused for want of root (LSB's "insufficient privilege").
pub const NOT_ROOT: i32 = 4;

/// The command's name, and what it does that needs root, when it needs it.
fn needs_root(c: &Command) -> Option<(&'static str, &'static str)> {
    let why = match c {
        Command::Apply(_) => {
            "it creates and writes cgroups under /sys/fs/cgroup (its dry run too: it compares with them), and only root can read the marks that tell bulkhead's cgroups from others"
        }
        Command::Destroy(_) => {
            "it removes cgroups under /sys/fs/cgroup (its dry run too: it lists them), and only root can read the marks that tell bulkhead's cgroups from others"
        }
        Command::Run(a) if a.slice.is_some() => {
            "it moves the command into the slice's cgroups under /sys/fs/cgroup"
        }
        Command::Run(a) if a.uid.is_some() || a.gid.is_some() => "it changes the user and group",
        Command::Move(_) => "it moves processes into the slice's cgroups under /sys/fs/cgroup",
        Command::Place(_) => {
            "it reads every process's executable and moves processes into the slices' cgroups under /sys/fs/cgroup (its dry run too: only root sees other users' executables and the slices' marks)"
        }
        Command::Spawn(a) if !a.dry_run => {
            "a sandbox needs namespaces, mounts and a cgroup of its own"
        }
        Command::Serve(a) if !a.dry_run => {
            "it starts the sockets' targets in their slices and sandboxes"
        }
        Command::Guard(a) if !a.dry_run => {
            "it throttles slices by writing their cgroup files under /sys/fs/cgroup"
        }
        Command::Hugepages(HugepagesCmd::Reset(a)) if !a.dry_run => {
            "it writes /sys/kernel/mm/hugepages and /sys/kernel/mm/transparent_hugepage"
        }
        Command::Image(ImageCmd::Import(_) | ImageCmd::Rm(_)) => {
            "it writes the images directory /var/lib/bulkhead/images"
        }
        Command::Image(ImageCmd::Store(StoreCmd::Create(_) | StoreCmd::Mount | StoreCmd::Umount)) => {
            "it makes and mounts the image store's file system"
        }
        Command::Iocost(IocostCmd::Calibrate(_)) => {
            "it sets the disk's scheduler and merges while it measures"
        }
        _ => return None,
    };
    let name = match c {
        Command::Apply(_) => "apply",
        Command::Destroy(_) => "destroy",
        Command::Run(_) => "run",
        Command::Move(_) => "move",
        Command::Place(_) => "place",
        Command::Spawn(_) => "spawn",
        Command::Serve(_) => "serve",
        Command::Guard(_) => "guard",
        Command::Hugepages(_) => "hugepages reset",
        Command::Image(ImageCmd::Import(_)) => "image import",
        Command::Image(ImageCmd::Rm(_)) => "image rm",
        Command::Image(_) => "image store",
        _ => "iocost calibrate",
    };
    Some((name, why))
}

/// The command line again, quoted for a shell where it must be.
fn command_line(args: &[OsString]) -> String {
    args.iter()
        .map(|a| {
            let a = a.to_string_lossy();
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
            if plain {
                a.into_owned()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The refusal of a command that needs root, run without it: the diagnostic and the exit
/// status (`run` keeps its own: 125, bulkhead could not start the command).
pub fn refusal(cli: &Cli, args: &[OsString], root: bool) -> Option<(Diagnostic, i32)> {
    if root {
        return None;
    }
    let (name, why) = needs_root(&cli.command)?;
    let code = match cli.command {
        Command::Run(_) => bulkhead::actions::run::EXIT_RUN_FAILED,
        _ => NOT_ROOT,
    };
    let d = Diagnostic::error(format!("bulkhead {name} must run as root: {why}"))
        .hint(format!("sudo {}", command_line(args)));
    Some((d, code))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(line: &[&str]) -> Option<(String, i32)> {
        let args: Vec<OsString> = line.iter().map(OsString::from).collect();
        let cli = crate::args::try_parse_from(args.clone()).unwrap();
        refusal(&cli, &args, false).map(|(d, c)| (d.to_string(), c))
    }

    #[test]
    fn changing_commands_say_root_first_with_the_command_to_run() {
        let (text, code) = refused(&["bulkhead", "-c", "my plan.toml", "apply", "-n"]).unwrap();
        assert_eq!(code, NOT_ROOT);
        assert!(
            text.starts_with("error: bulkhead apply must run as root: it creates"),
            "{text}"
        );
        assert!(
            text.ends_with("hint: sudo bulkhead -c 'my plan.toml' apply -n"),
            "{text}"
        );
        let (text, code) =
            refused(&["bulkhead", "run", "--slice", "db-helper", "--", "id"]).unwrap();
        assert_eq!(code, 125);
        assert!(text.contains("bulkhead run must run as root"), "{text}");
        let (text, _) = refused(&["bulkhead", "hugepages", "reset"]).unwrap();
        assert!(text.contains("bulkhead hugepages reset must run"), "{text}");
        for line in [
            &["bulkhead", "destroy"][..],
            &["bulkhead", "move", "--slice", "db", "1"],
            &[
                "bulkhead",
                "move",
                "--tree",
                "--dry-run",
                "--slice",
                "db",
                "1",
            ],
            &["bulkhead", "place", "--once"],
            &["bulkhead", "place", "--dry-run"],
            &["bulkhead", "spawn", "-D", "/", "--", "true"],
            &["bulkhead", "guard"],
            &["bulkhead", "serve"],
            &["bulkhead", "run", "--uid", "0", "--", "id"],
        ] {
            assert!(refused(line).is_some(), "{line:?}");
        }
    }

    #[test]
    fn reading_commands_and_dry_runs_of_readers_pass() {
        for line in [
            &["bulkhead", "status"][..],
            &["bulkhead", "plan", "show"],
            &["bulkhead", "run", "--", "id"],
            &["bulkhead", "guard", "--dry-run"],
            &["bulkhead", "serve", "--dry-run"],
            &["bulkhead", "hugepages", "status"],
            &["bulkhead", "hugepages", "reset", "--dry-run"],
            &["bulkhead", "image", "list"],
            &["bulkhead", "export", "systemd", "/tmp/x", "-n"],
        ] {
            assert_eq!(refused(line), None, "{line:?}");
        }
    }

    #[test]
    fn root_is_never_refused() {
        let args: Vec<OsString> = ["bulkhead", "apply"].iter().map(OsString::from).collect();
        let cli = crate::args::try_parse_from(args.clone()).unwrap();
        assert!(refusal(&cli, &args, true).is_none());
    }
}
