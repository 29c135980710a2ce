//! The global options of bulkhead's command lines, defined once: `bulkhead` (the CLI) takes
//! them before or after any command, and `bulkhead bench` passes them on to the bench binary,
//! which takes the same ones. Each binary flattens [`Globals`] into its own parser.

#![forbid(unsafe_code)]

use bulkhead::actions::Context;
use bulkhead::Choice;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// The options every command takes.
#[derive(Args, Debug, Clone)]
pub struct Globals {
    /// The plan file [default: /etc/bulkhead/bulkhead.toml, else the embedded default plan]
    #[arg(
        short = 'c',
        long = "config",
        global = true,
        env = "BULKHEAD_CONFIG",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,

    /// The cgroup under which slices live (a delegated subtree, or a test root)
    #[arg(
        long,
        global = true,
        env = "BULKHEAD_CGROUP_ROOT",
        default_value = "/",
        value_name = "PATH"
    )]
    pub cgroup_root: String,

    /// Only print errors
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// Who creates slices: systemd over D-Bus, or bulkhead writing cgroupfs [auto: systemd
    /// when PID 1 is systemd and answers on D-Bus, else cgroupfs]
    #[arg(
        long,
        global = true,
        env = "BULKHEAD_BACKEND",
        value_enum,
        default_value_t = BackendArg::Auto,
        value_name = "BACKEND"
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
