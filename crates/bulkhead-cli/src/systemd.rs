//! The backend choice (`--backend`), what differs when systemd creates the slices, and
//! `bulkhead export systemd`.

use crate::{report, Cli};
use bulkhead::cgroup::systemd::{self as sd, export, props, Choice, Chosen};
use bulkhead::cgroup::{Changes, Layout};
use bulkhead::error::{Diagnostic, Error, Result};
use bulkhead::host::Host;
use bulkhead::plan::{Plan, ResolvedPlan};
use bulkhead::run::{RunError, RunSpec, EXIT_RUN_FAILED};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// systemd when PID 1 is systemd and answers on D-Bus, else cgroupfs
    Auto,
    /// Transient (or with apply --persist, persistent) systemd units, over D-Bus
    Systemd,
    /// bulkhead writes cgroupfs itself
    Cgroupfs,
}

/// The backend for this command.
pub fn choose(cli: &Cli) -> Result<Chosen> {
    let layout = Layout::detect()
        .map_err(|e| Error::failed(format!("cannot read /proc/self/mountinfo: {e}")))?;
    let choice = match cli.backend {
        BackendArg::Auto => Choice::Auto,
        BackendArg::Systemd => Choice::Systemd,
        BackendArg::Cgroupfs => Choice::Cgroupfs,
    };
    sd::choose(choice, layout, &cli.cgroup_root)
}

/// What `apply` does: transient units, unit files (`--persist`), or cgroupfs writes.
pub fn plan_apply(
    chosen: &Chosen,
    plan: &Plan,
    resolved: &ResolvedPlan,
    persist: bool,
) -> Result<Changes> {
    match (chosen, persist) {
        (Chosen::Systemd(s), true) => s.plan_persist(plan, resolved),
        (Chosen::Cgroupfs(_), true) => Err(Error::invalid(
            Diagnostic::error("--persist needs the systemd backend (unit files are systemd's)")
                .hint("on a host without systemd, apply again at boot (a boot script or unit), or write unit files with bulkhead export systemd"),
        )),
        (c, false) => c.backend().plan_apply(resolved),
    }
}

/// `run`: through systemd a service (or a scope with --scope), else join and exec. Returns
/// only when the command ran as a service (its exit code) or failed to start.
pub fn run(
    chosen: &Chosen,
    spec: &RunSpec,
    scope: bool,
    pty: bool,
) -> std::result::Result<i32, RunError> {
    match chosen {
        Chosen::Systemd(s) if !scope => {
            let exit = sd::run::run_service(s, spec, sd::run::ServiceOptions { pty })?;
            if let Some(n) = exit.note {
                report(&[n]);
            }
            Ok(exit.code)
        }
        Chosen::Cgroupfs(_) if scope || pty => Err(RunError::with_code(
            EXIT_RUN_FAILED,
            Error::invalid(
                Diagnostic::error(format!(
                    "--{} needs the systemd backend",
                    if scope { "scope" } else { "pty" }
                ))
                .hint("with the cgroupfs backend the command runs in bulkhead's own process and terminal; leave the option out"),
            ),
        )),
        c => Err(bulkhead::run::exec(c.backend(), spec)),
    }
}

/// The `layout` line of `status`.
pub fn layout_line(chosen: &Chosen) -> String {
    match chosen {
        Chosen::Systemd(s) => format!(
            "systemd {} via {}; {}",
            s.bus.version_text,
            s.bus.via,
            s.reader.layout.describe()
        ),
        Chosen::Cgroupfs(c) => c.layout.describe(),
    }
}

#[derive(Subcommand)]
pub enum ExportCmd {
    /// Write the plan as systemd .slice units (and .slice.d/ drop-ins for memory floors)
    #[command(
        long_about = "Write the plan as systemd unit files, for hosts that ship unit files instead of \
running bulkhead: one DIR/NAME.slice per slice the plan names, and DIR/NAME.slice.d/50-bulkhead-floor.conf \
where a memory floor or ceiling of the plan ({ value = \"4%\", min = \"1200M\" }) decides the value \
on the target host (this host, or --memory SIZE). Directives are chosen for --systemd-version: \
before 232 CPUWeight becomes CPUShares, before 231 MemoryMax becomes MemoryLimit and percentages \
become bytes, before 230 IOWeight becomes BlockIOWeight; what a version cannot take is left out \
and said. What systemd cannot express (floors, HugetlbMax, left-out directives) is kept in an \
[X-Bulkhead] section that systemd ignores, so `bulkhead import DIR/*.slice` gives the plan back.",
        after_help = "Files bulkhead did not write are never replaced. Writing the same plan again \
changes nothing. Check the files with: systemd-analyze verify DIR/*.slice"
    )]
    Systemd(ExportSystemdArgs),
}

#[derive(Args)]
pub struct ExportSystemdArgs {
    /// The directory to write the unit files into (created if missing)
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Write for this systemd version (e.g. 219 for CentOS 7) [default: this host's systemd
    /// if it answers, else 252 and newer]
    #[arg(long, value_name = "N")]
    systemd_version: Option<u32>,
    /// Write memory floors for a host with this much RAM (e.g. 64G) instead of this one
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Print the files instead of writing them
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub fn export(cli: &Cli, e: &ExportCmd) -> Result<i32> {
    let ExportCmd::Systemd(a) = e;
    let mut host = Host::detect();
    if let Some(m) = &a.memory {
        host.memory = bulkhead::units::parse_size(m, 1024)
            .map_err(|e| Error::invalid(Diagnostic::error(format!("--memory {m}: {e}"))))?;
    }
    let version = match a.systemd_version {
        Some(v) if v < 200 => return Err(Error::invalid(
            Diagnostic::error(format!(
                "--systemd-version {v}: bulkhead writes unit files for systemd 200 and newer"
            ))
            .hint(
                "give the number `systemctl --version` prints on the target host, e.g. 219 or 252",
            ),
        )),
        Some(v) => v,
        None if sd::pid1_is_systemd() => sd::bus::Bus::connect()
            .map(|b| b.version)
            .unwrap_or(props::CURRENT),
        None => props::CURRENT,
    };
    let plan = Plan::load(cli.config.as_deref())?;
    let files = export::unit_files(&plan, &host, version)?;
    if a.json && a.dry_run {
        println!("{}", serde_json::to_string_pretty(&files).unwrap());
        return Ok(0);
    }
    if a.dry_run {
        for f in &files.files {
            println!("# {}", a.dir.join(&f.path).display());
            println!("{}", f.text);
        }
        if !cli.quiet {
            report(&files.notes);
        }
        return Ok(0);
    }
    let w = export::write(&a.dir, &files)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "systemd_version": version,
                "written": w.written,
                "unchanged": w.unchanged,
                "removed": w.removed,
                "notes": files.notes,
            }))
            .unwrap()
        );
        return Ok(0);
    }
    if !cli.quiet {
        report(&files.notes);
        for p in &w.written {
            println!("wrote {}", p.display());
        }
        for p in &w.removed {
            println!("removed {} (not needed for this host)", p.display());
        }
        println!(
            "{} file(s) for systemd {version}: {} written, {} unchanged",
            files.files.len(),
            w.written.len(),
            w.unchanged.len()
        );
    }
    Ok(0)
}

/// Whether `--slice` in `spawn` would meet systemd's slices, which it cannot join yet.
pub fn spawn_slice_unsupported(cli: &Cli) -> bool {
    match cli.backend {
        BackendArg::Cgroupfs => false,
        BackendArg::Systemd => true,
        BackendArg::Auto => {
            cli.cgroup_root.trim_matches('/').is_empty()
                && sd::pid1_is_systemd()
                && sd::bus::Bus::connect().is_ok()
        }
    }
}
