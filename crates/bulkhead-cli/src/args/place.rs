//! `bulkhead place`: the plan's placement rules.

use clap::Args;
use std::time::Duration;

pub const PLACE_LONG: &str = "Place processes as they start, by the plan's [place.NAME] rules: \
match on user, executable, command line, parent and systemd unit (every key a rule gives must \
match), and move each match into its rule's slice. Runs until SIGTERM or SIGINT, driven by the \
kernel's process events (fork, exec, user and name changes; /proc is scanned whole at the start \
and every 10 s), or where those cannot be had (no CAP_NET_ADMIN, another PID namespace) by a scan \
of /proc every --interval; a new process is read again every --interval for --recheck, since some \
(PostgreSQL's backends) change their command line after they start. SIGHUP reads the plan again \
(checked first: on an error the rules before it stay, and it says why). While it runs it keeps a \
state file (/run/bulkhead/place/, its PID, the plan's digest and a heartbeat every 10 s) that \
`bulkhead check` reads to say whether place runs, and with which plan. As root the plan file \
must be root's and writable only by root.";

pub const PLACE_AFTER: &str =
    "Exit status: 0 when every match moved, 1 when a move failed, 2 for a bad plan or arguments, \
4 without root. Examples: `man bulkhead-place`; docs/PLACEMENT.md.";

#[derive(Args)]
pub struct PlaceArgs {
    /// One scan: move what matches now, then exit
    #[arg(long)]
    pub once: bool,
    /// Say what one scan would move, move nothing
    #[arg(long)]
    pub dry_run: bool,
    /// How often young processes (and pidfiles) are read again; without the kernel's process
    /// events, the time between scans of /proc
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = super::guard::positive_duration)]
    pub interval: Duration,
    /// How long a new process is read again (its command line may change)
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = bulkhead::units::parse_duration)]
    pub recheck: Duration,
    /// Print JSON: one object per process placed, one line each
    #[arg(long)]
    pub json: bool,
    /// Append every line to FILE instead of the terminal, each stamped with the UTC time (a
    /// daemon's log: the init script's /var/log/bulkhead-place.log)
    #[arg(long, value_name = "FILE")]
    pub log: Option<std::path::PathBuf>,
}
