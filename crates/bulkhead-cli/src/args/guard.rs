//! `bulkhead guard`.

use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

pub const GUARD_LONG: &str = "Keep the plan's protected slice at full speed next to its \
sideloads. The guard reads the protected slice's pressure stall (PSI: cpu, io, memory), its \
threads' run-queue waits and an optional probe of the service, calibrates a baseline with the \
sideloads held, and then every period cuts the sideloads when the stall rises above the \
baseline (idle scheduling, a CPU quota halved down to cpu_floor, I/O bandwidth, at most \
max_frozen of freezing) and gives the plan back slowly when it is calm; with cpu_keep, a \
sideload starved of CPU (idle scheduling beside a busy server) is lifted to that bounded share \
so its work still progresses. It acts through the \
chosen backend: control files on cgroupfs (re-asserted every second), runtime unit properties \
and FreezeUnit through systemd. When it stops, is killed or hangs, its watchdog puts every \
sideload back as planned within seconds; under systemd, ExecStopPost=bulkhead guard --release \
does the same. The plan's [guard] section says what to protect (see docs/GUARD.md).";

pub const GUARD_AFTER: &str = "Files: /run/bulkhead/guard/status.json (what `bulkhead status` \
shows), holds.json (the sideloads a running or killed guard may hold), calibration.json (reused \
on restart within the same boot); BULKHEAD_GUARD_DIR moves them.\n\nSignals: SIGTERM, SIGINT \
and SIGHUP stop the guard; it gives every sideload its plan back before it exits.";

#[derive(Args)]
pub struct GuardArgs {
    /// Print what the guard would read and write, and change nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Append every action to FILE, one JSON object per line
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Calibrate again, even when this boot has a calibration of this [guard]
    #[allow(rustdoc::broken_intra_doc_links)] // --help text: the plan's [guard] section
    #[arg(long)]
    pub recalibrate: bool,
    /// Put back what a stopped or killed guard left, then exit (for ExecStopPost=)
    #[arg(long, conflicts_with_all = ["dry_run", "log", "recalibrate", "duration"])]
    pub release: bool,
    /// Stop after this long (e.g. 10m) [default: until SIGTERM or SIGINT]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub duration: Option<Duration>,
    /// Print JSON: the dry run or release as one object, actions as one object per line
    #[arg(long)]
    pub json: bool,
    /// The watchdog a guard starts beside itself (PID:START:HANG_MS)
    #[arg(long, hide = true, value_name = "PID:START:HANG_MS")]
    pub watchdog_of: Option<String>,
}

pub(super) fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = bulkhead::units::parse_duration(s)?;
    if d.is_zero() {
        return Err("the duration must be longer than 0".into());
    }
    Ok(d)
}
