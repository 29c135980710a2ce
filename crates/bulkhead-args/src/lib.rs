//! The global options of bulkhead's command lines, defined once: `bulkhead` (the CLI) takes
//! them before or after any command, and `bulkhead bench` passes them on to the bench binary,
//! which takes the same ones. Each binary flattens [`Globals`] into its own parser.

#![forbid(unsafe_code)]

use bulkhead::actions::Context;
use bulkhead::Choice;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// The options every command takes. Short in every command's help, under "Global options";
/// `bulkhead --help` explains them once (its after_long_help).
#[derive(Args, Debug, Clone)]
pub struct Globals {
    /// The plan file (see bulkhead --help)
    #[arg(
        short = 'c',
        long = "config",
        global = true,
        env = "BULKHEAD_CONFIG",
        hide_env = true,
        value_name = "FILE",
        help_heading = "Global options"
    )]
    pub config: Option<PathBuf>,

    /// The cgroup slices live under [default: /]
    #[arg(
        long,
        global = true,
        env = "BULKHEAD_CGROUP_ROOT",
        hide_env = true,
        default_value = "/",
        hide_default_value = true,
        value_name = "PATH",
        help_heading = "Global options"
    )]
    pub cgroup_root: String,

    /// Only print errors
    #[arg(short, long, global = true, help_heading = "Global options")]
    pub quiet: bool,

    /// auto, systemd or cgroupfs [default: auto] (see bulkhead --help)
    #[arg(
        long,
        global = true,
        env = "BULKHEAD_BACKEND",
        hide_env = true,
        value_enum,
        default_value_t = BackendArg::Auto,
        hide_default_value = true,
        hide_possible_values = true,
        value_name = "BACKEND",
        help_heading = "Global options"
    )]
    pub backend: BackendArg,
}

impl Globals {
    /// The library's view of the global options.
    pub fn context(&self) -> Context {
        Context {
            config: self.config.clone(),
            cgroup_root: self.cgroup_root.clone(),
            backend: self.backend.into(),
        }
    }
}

/// `--backend auto|systemd|cgroupfs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// systemd when PID 1 is systemd and answers on D-Bus, else cgroupfs
    Auto,
    /// Transient (or with apply --persist, persistent) systemd units, over D-Bus
    Systemd,
    /// bulkhead writes cgroupfs itself
    Cgroupfs,
}

impl From<BackendArg> for Choice {
    fn from(b: BackendArg) -> Choice {
        match b {
            BackendArg::Auto => Choice::Auto,
            BackendArg::Systemd => Choice::Systemd,
            BackendArg::Cgroupfs => Choice::Cgroupfs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        globals: Globals,
    }

    #[test]
    fn the_options_parse_into_the_librarys_context() {
        let cli = Cli::try_parse_from([
            "x",
            "-c",
            "/tmp/p.toml",
            "--cgroup-root",
            "/t",
            "--backend",
            "cgroupfs",
            "-q",
        ])
        .unwrap();
        let cx = cli.globals.context();
        assert_eq!(
            cx.config.as_deref(),
            Some(std::path::Path::new("/tmp/p.toml"))
        );
        assert_eq!(cx.cgroup_root, "/t");
        assert_eq!(cx.backend, Choice::Cgroupfs);
        assert!(cli.globals.quiet);
        let bad = Cli::try_parse_from(["x", "--backend", "docker"]);
        assert!(bad.is_err());
    }
}
