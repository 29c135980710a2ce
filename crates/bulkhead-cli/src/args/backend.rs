//! `--backend auto|systemd|cgroupfs`.

use bulkhead::Choice;
use clap::ValueEnum;

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
