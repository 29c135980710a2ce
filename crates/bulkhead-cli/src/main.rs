//! The `bulkhead` command: a thin layer over the library that parses arguments, prints
//! results for people (or JSON for machines) and maps errors to exit codes.

mod bench;
mod hugepages;
mod image;
mod serve;
mod show;
mod spawn;
mod systemd;

use bulkhead::cgroup::{Backend, CgroupFs, Changes, Layout};
use bulkhead::error::{Diagnostic, Error, Result, Severity};
use bulkhead::host::Host;
use bulkhead::plan::{Plan, SliceName};
use bulkhead::run::{RunSpec, EXIT_RUN_FAILED};
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Isolate the workloads of a database host: slices (cgroups) for the server and its
/// helpers, without Docker.
#[derive(Parser)]
#[command(
    name = "bulkhead",
    version,
    about,
    long_about = "bulkhead isolates the workloads of a database host. A plan file names slices \
(cgroups nested like systemd's: db-server is inside db) with systemd's resource directives; \
`apply` creates them, `run` and `move` put processes into them, and `status` shows what each \
slice uses and how much it stalls.",
    after_help = "Exit status: 0 on success, 1 when acting on the system failed, 2 for bad \
input (plan, arguments). `run` exits with the command's own status (125: bulkhead could not \
start it, 126: not executable, 127: not found).\n\nFiles: /etc/bulkhead/bulkhead.toml (the \
plan; an embedded default is used when it is missing), /run/bulkhead (runtime state)."
)]
struct Cli {
    #[command(flatten)]
    globals: Globals,

    #[command(subcommand)]
    command: Command,
}

/// The options every command takes (`cli.config` etc. reach them through Deref).
#[derive(Args)]
struct Globals {
    /// The plan file [default: /etc/bulkhead/bulkhead.toml, else the embedded default plan]
    #[arg(
        short = 'c',
        long = "config",
        global = true,
        env = "BULKHEAD_CONFIG",
        value_name = "FILE"
    )]
    config: Option<PathBuf>,

    /// The cgroup under which slices live (a delegated subtree, or a test root)
    #[arg(
        long,
        global = true,
        env = "BULKHEAD_CGROUP_ROOT",
        default_value = "/",
        value_name = "PATH"
    )]
    cgroup_root: String,

    /// Only print errors
    #[arg(short, long, global = true)]
    quiet: bool,

    /// Who creates slices: systemd over D-Bus, or bulkhead writing cgroupfs [auto: systemd
    /// when PID 1 is systemd and answers on D-Bus, else cgroupfs]
    #[arg(
        long,
        global = true,
        env = "BULKHEAD_BACKEND",
        value_enum,
        default_value_t = systemd::BackendArg::Auto,
        value_name = "BACKEND"
    )]
    backend: systemd::BackendArg,
}

impl std::ops::Deref for Cli {
    type Target = Globals;
    fn deref(&self) -> &Globals {
        &self.globals
    }
}

/// The one-line help of `spawn`, in both parsers.
const SPAWN_ABOUT: &str =
    "Run a command in a sandbox (namespaces, a root file system, an ephemeral snapshot)";

/// `bulkhead spawn ...` is parsed by a parser of its own: building the whole command tree
/// costs about 0.3 ms, a tenth of a sandbox's start. Same options, same help.
#[derive(Parser)]
#[command(name = "bulkhead")]
struct SpawnOnly {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: SpawnCmd,
}

#[derive(Subcommand)]
enum SpawnCmd {
    #[command(
        about = SPAWN_ABOUT
    )]
    Spawn(spawn::SpawnArgs),
}

/// The full parser, or the spawn-only one when the command line starts with `spawn`.
fn parse_cli() -> Cli {
    if std::env::args_os().nth(1).is_some_and(|a| a == "spawn") {
        let s = SpawnOnly::parse();
        let SpawnCmd::Spawn(a) = s.command;
        return Cli {
            globals: s.globals,
            command: Command::Spawn(a),
        };
    }
    Cli::parse()
}

#[derive(Subcommand)]
enum Command {
    /// Show or check the plan
    #[command(subcommand)]
    Plan(PlanCmd),
    /// Create or update the plan's slices (idempotent)
    Apply(ApplyArgs),
    /// Run a command in a slice
    Run(RunArgs),
    /// Move running processes (with all their threads) into a slice
    Move(MoveArgs),
    /// Show what each slice uses and how much it stalls
    Status(StatusArgs),
    /// Remove the plan's slices, children first
    Destroy(DestroyArgs),
    // `about` here, not a doc comment: a doc comment would also clear the long help that
    // SpawnArgs carries.
    #[command(
        about = SPAWN_ABOUT
    )]
    Spawn(spawn::SpawnArgs),
    #[command(
        about = "Start targets on their first connection: socket activation for the plan's sockets"
    )]
    Serve(serve::ServeArgs),
    /// Convert systemd .slice files (and their .d/*.conf drop-ins) to plan TOML
    Import(ImportArgs),
    /// Write the plan in another format (systemd unit files)
    #[command(subcommand)]
    Export(systemd::ExportCmd),
    /// Benchmarks that measure bulkhead against what people use today
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Root file system images for sandboxes, and the btrfs store that holds them
    #[command(
        subcommand,
        long_about = "Root file system images for sandboxes. An image is a directory with a plain \
name in the images directory: the mount point of the image store when one is recorded (a btrfs \
file system in a file, loop-mounted; every image is a subvolume, so a sandbox starts from a \
snapshot in constant time), else /var/lib/bulkhead/images. `spawn -D NAME` takes an image name \
where it takes a directory.",
        after_help = "Files: /var/lib/bulkhead/store.toml (the recorded store; BULKHEAD_STORE_RECORD \
overrides it), /var/lib/bulkhead/images (the default images directory and mount point)."
    )]
    Image(image::ImageCmd),
    /// Huge pages: pools, THP and what processes and slices really got
    #[command(
        subcommand,
        long_about = "Huge pages. The plan's [hugepages] section (applied by `bulkhead apply`) sets \
the hugetlb pools per page size and NUMA node, the THP switches and hugetlbfs mounts; these \
commands show what the machine, its slices and its processes really have, move a running \
process onto THP, and put back what bulkhead changed. `bulkhead run --hugepages thp|2M` \
starts a program with its allocator's huge page switch set.",
        after_help = "Files: /run/bulkhead/hugepages.json (what `reset` restores; \
BULKHEAD_HUGEPAGES_STATE overrides it), /sys/kernel/mm/hugepages, \
/sys/kernel/mm/transparent_hugepage, /proc/PID/smaps_rollup."
    )]
    Hugepages(hugepages::HugepagesCmd),
}

#[derive(Subcommand)]
enum PlanCmd {
    /// Print the resolved plan: every slice, every value in bytes and weights, for this host
    /// (or another one with --memory/--cpus). The output is itself a valid plan.
    Show(PlanShowArgs),
}

#[derive(Args)]
struct PlanShowArgs {
    /// Print JSON
    #[arg(long)]
    json: bool,
    /// Resolve for a host with this much RAM (e.g. 64G) instead of this one
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Resolve for a host with this many CPUs instead of this one
    #[arg(long, value_name = "N")]
    cpus: Option<u32>,
}

#[derive(Args)]
struct ApplyArgs {
    /// Print every write apply would make, and make none
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Treat directives this host cannot honour as errors
    #[arg(long)]
    strict: bool,
    /// Apply huge page pools that leave less than the safe share of RAM outside them
    #[arg(long)]
    force: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
    /// systemd backend: write unit files and drop-ins under /etc/systemd/system and reload
    /// systemd, instead of transient units (which are gone at reboot)
    #[arg(long)]
    persist: bool,
}

#[derive(Args)]
struct RunArgs {
    /// The slice to run in (as in the plan: db-helper or db-helper.slice); without it the
    /// command stays in bulkhead's own cgroups
    #[arg(long, short = 's', value_name = "SLICE")]
    slice: Option<String>,
    /// Make the program's heap use huge pages: thp, or a hugetlb page size (2M, 1G) from the
    /// pool. Sets glibc's glibc.malloc.hugetlb tunable (and jemalloc's thp:always), then
    /// stays the command's parent to check that it got them
    #[arg(long, value_name = "thp|2M|1G")]
    hugepages: Option<String>,
    /// With --hugepages: exec the command in place instead of checking (check later with
    /// `bulkhead hugepages usage PID`; the command keeps bulkhead's PID)
    #[arg(long, requires = "hugepages")]
    no_verify: bool,
    /// Run as this user (name or UID); the user's groups come with it
    #[arg(long, value_name = "USER")]
    uid: Option<String>,
    /// Run with this group (name or GID) [default: the user's primary group]
    #[arg(long, value_name = "GROUP")]
    gid: Option<String>,
    /// Working directory
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Set an environment variable (repeatable)
    #[arg(long = "env", short = 'E', value_name = "KEY=VALUE", value_parser = bulkhead::plan::env::parse_env_assignment)]
    env: Vec<(String, String)>,
    /// Read KEY=VALUE lines from a file, as systemd's EnvironmentFile= (repeatable)
    #[arg(long = "setenv-file", value_name = "FILE")]
    setenv_file: Vec<PathBuf>,
    /// Pass fds 3..3+N to the command by the systemd protocol (LISTEN_FDS, LISTEN_PID)
    #[arg(long, value_name = "N", default_value_t = 0)]
    listen_fds: u32,
    /// systemd backend: move bulkhead itself into a transient scope in the slice and exec
    /// the command there (like systemd-run --scope), instead of starting a service
    #[arg(long)]
    scope: bool,
    /// systemd backend: give the command a pseudo-terminal (like systemd-run --pty)
    #[arg(long, short = 't', conflicts_with = "scope")]
    pty: bool,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

#[derive(Args)]
struct MoveArgs {
    /// The slice to move into
    #[arg(long, short = 's', value_name = "SLICE")]
    slice: String,
    /// Process IDs
    #[arg(required = true, value_name = "PID")]
    pids: Vec<i32>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct StatusArgs {
    /// Print JSON (one object; with --watch, one per line)
    #[arg(long)]
    json: bool,
    /// Refresh every SECONDS until interrupted
    #[arg(long, short = 'w', value_name = "SECONDS")]
    watch: Option<f64>,
    /// The interval CPU shares are measured over, in seconds
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    interval: f64,
}

#[derive(Args)]
struct DestroyArgs {
    /// Kill the processes still in the slices
    #[arg(long)]
    kill: bool,
    /// Print what would be removed, and remove nothing
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Remove these slices (and their children) instead of the plan's
    #[arg(long = "slice", value_name = "SLICE")]
    slices: Vec<String>,
    /// Remove every slice bulkhead created under the cgroup root
    #[arg(long, conflicts_with = "slices")]
    all: bool,
}

#[derive(Args)]
struct ImportArgs {
    /// systemd slice unit files
    #[arg(required = true, value_name = "FILE.slice")]
    files: Vec<PathBuf>,
    /// Write the plan here instead of standard output
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

fn main() {
    // Die quietly on a closed pipe (`bulkhead status | head`), as Unix tools do.
    // SAFETY: setting a signal disposition before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = parse_cli();
    let code = match dispatch(&cli) {
        Ok(code) => code,
        Err(e) => {
            report(&e.diagnostics());
            e.exit_code()
        }
    };
    std::process::exit(code);
}

/// Print diagnostics to stderr, prefixed like every Unix tool does.
fn report(ds: &[Diagnostic]) {
    for d in ds {
        eprintln!("bulkhead: {d}");
    }
}

fn backend(cli: &Cli) -> Result<CgroupFs> {
    let layout = Layout::detect()
        .map_err(|e| Error::failed(format!("cannot read /proc/self/mountinfo: {e}")))?;
    CgroupFs::new(layout, &cli.cgroup_root)
}

fn dispatch(cli: &Cli) -> Result<i32> {
    match &cli.command {
        Command::Plan(PlanCmd::Show(a)) => plan_show(cli, a),
        Command::Apply(a) => apply(cli, a),
        Command::Run(a) => run(cli, a),
        Command::Move(a) => move_pids(cli, a),
        Command::Status(a) => status(cli, a),
        Command::Serve(a) => serve::serve(cli, a),
        Command::Destroy(a) => destroy(cli, a),
        Command::Import(a) => import(a),
        Command::Export(e) => systemd::export(cli, e),
        Command::Spawn(a) => spawn::spawn(cli, a),
        Command::Bench(b) => bench::dispatch(cli, b),
        Command::Image(i) => image::dispatch(cli, i),
        Command::Hugepages(h) => hugepages::dispatch(cli, h),
    }
}

fn load_resolved(cli: &Cli, host: &Host) -> Result<(Plan, bulkhead::plan::ResolvedPlan)> {
    let plan = Plan::load(cli.config.as_deref())?;
    let resolved = plan.resolve(host)?;
    Ok((plan, resolved))
}

fn plan_show(cli: &Cli, a: &PlanShowArgs) -> Result<i32> {
    let mut host = Host::detect();
    if let Some(m) = &a.memory {
        host.memory = bulkhead::units::parse_size(m, 1024)
            .map_err(|e| Error::invalid(Diagnostic::error(format!("--memory {m}: {e}"))))?;
    }
    if let Some(n) = a.cpus {
        if n == 0 {
            return Err(Error::invalid(Diagnostic::error(
                "--cpus must be at least 1",
            )));
        }
        host.cpus = bulkhead::units::IdSet((0..n).collect());
    }
    let (plan, resolved) = load_resolved(cli, &host)?;
    let hp = hugepages::show(&plan, host.memory)?;
    if a.json {
        let mut v = serde_json::to_value(&resolved).unwrap();
        if let Some(h) = &hp {
            v["hugepages"] = serde_json::to_value(h).unwrap();
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
    } else {
        print!("{}", show::plan_toml(&resolved));
        if let Some(h) = &hp {
            print!("{}", bulkhead::plan::hugepages::show_toml(h));
        }
        if !cli.quiet {
            report(&resolved.notes);
        }
    }
    Ok(0)
}

fn apply(cli: &Cli, a: &ApplyArgs) -> Result<i32> {
    let host = Host::detect();
    let (plan, resolved) = load_resolved(cli, &host)?;
    let chosen = systemd::choose(cli)?;
    let fs = chosen.backend();
    let changes = systemd::plan_apply(&chosen, &plan, &resolved, a.persist)?;
    let hp = hugepages::plan_for_apply(&plan, a.force)?;
    let mut notes = resolved.notes.clone();
    notes.extend(changes.warnings.iter().cloned());
    if a.strict {
        let mut bad: Vec<Diagnostic> = notes
            .iter()
            .filter(|d| d.severity == Severity::Warning)
            .cloned()
            .map(|mut d| {
                d.severity = Severity::Error;
                d
            })
            .collect();
        if !bad.is_empty() {
            bad.push(Diagnostic::error(
                "--strict: nothing was changed because the host cannot honour the plan as written",
            ));
            return Err(Error::Invalid(bad));
        }
    }
    // What --force let through is said, but is no reason for --strict to refuse.
    if let Some(h) = &hp {
        notes.extend(h.resolved.notes.iter().cloned());
    }
    if a.json {
        let done = if a.dry_run {
            None
        } else {
            let applied = hugepages::execute(cli, &hp)?;
            Some(hugepages::execute_slices_or_undo(fs, &changes, applied)?)
        };
        let out = serde_json::json!({
            "backend": fs.name(),
            "layout": systemd::layout_line(&chosen),
            "plan": resolved.source,
            "dry_run": a.dry_run,
            "changes": changes.ops,
            "hugepages": hp.as_ref().map(|h| &h.ops),
            "warnings": notes,
            "outcome": done,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
        return Ok(0);
    }
    if !cli.quiet {
        eprintln!("bulkhead: {} ({})", fs.describe(), resolved.source);
        report(&notes);
    }
    hugepages::print_ops(cli, &hp, a.dry_run);
    print_changes(cli, &changes, a.dry_run, "apply");
    if a.dry_run {
        return Ok(0);
    }
    let applied = hugepages::execute(cli, &hp)?;
    if changes.ops.is_empty() {
        return Ok(0);
    }
    let out = hugepages::execute_slices_or_undo(fs, &changes, applied)?;
    if !cli.quiet {
        println!(
            "applied: {} slice(s), {} change(s){}",
            changes.slices.len(),
            out.done,
            if out.skipped > 0 {
                format!(", {} default(s) this kernel has no file for", out.skipped)
            } else {
                String::new()
            }
        );
    }
    Ok(0)
}

fn print_changes(cli: &Cli, changes: &Changes, dry_run: bool, verb: &str) {
    if changes.ops.is_empty() {
        if !cli.quiet && !changes.slices.is_empty() {
            println!(
                "nothing to change: {} slice(s) already match the plan",
                changes.slices.len()
            );
        }
        return;
    }
    if dry_run {
        for op in &changes.ops {
            println!("{op}");
        }
        println!(
            "dry run: {} change(s) not made (run without --dry-run to {verb})",
            changes.ops.len()
        );
    } else if !cli.quiet {
        for op in &changes.ops {
            println!("{op}");
        }
    }
}

fn parse_slice(s: &str) -> Result<SliceName> {
    SliceName::parse(s)
        .map_err(|m| Error::invalid(Diagnostic::error(format!("invalid slice name: {m}"))))
}

/// The slice must exist; otherwise say whether the plan has it (then: apply) or not.
fn require_slice(cli: &Cli, fs: &dyn Backend, name: &SliceName) -> Result<()> {
    if fs.slice_exists(name) {
        return Ok(());
    }
    let plan = Plan::load(cli.config.as_deref()).ok();
    let in_plan = plan.as_ref().is_some_and(|p| p.slices.contains_key(name));
    let d = if in_plan {
        Diagnostic::error(format!(
            "slice '{name}' is in the plan but does not exist yet"
        ))
        .hint("create it first: bulkhead apply")
    } else {
        let mut known: Vec<String> = fs.slices().iter().map(|s| s.to_string()).collect();
        if let Some(p) = &plan {
            for n in p.slices.keys() {
                if !known.contains(&n.to_string()) {
                    known.push(n.to_string());
                }
            }
        }
        let hint = if known.is_empty() {
            "no slices exist; define them in the plan and run bulkhead apply".to_string()
        } else {
            let nearest = bulkhead::plan::nearest(name.as_str(), &known)
                .map(|k| format!("did you mean {k}? "))
                .unwrap_or_default();
            format!("{nearest}known slices: {}", known.join(", "))
        };
        Diagnostic::error(format!("unknown slice '{name}'")).hint(hint)
    };
    Err(Error::invalid(d))
}

fn run(cli: &Cli, a: &RunArgs) -> Result<i32> {
    let chosen = match systemd::choose(cli) {
        Ok(f) => f,
        Err(e) => {
            report(&e.diagnostics());
            return Ok(EXIT_RUN_FAILED);
        }
    };
    // The slice is looked up by join itself; the explanation is only built when it is missing.
    let slice = match a.slice.as_deref().map(parse_slice).transpose() {
        Ok(s) => s,
        Err(e) => {
            report(&e.diagnostics());
            return Ok(EXIT_RUN_FAILED);
        }
    };
    let mut spec = RunSpec {
        slice,
        listen_fds: a.listen_fds,
        uid: a.uid.clone(),
        gid: a.gid.clone(),
        cwd: a.cwd.clone(),
        env: a.env.clone(),
        env_files: a.setenv_file.clone(),
        argv: a.command.clone(),
    };
    let fs = chosen.backend();
    let e = match &a.hugepages {
        Some(mode) => {
            let error = match hugepages::prepare_run(cli, &mut spec, mode) {
                Err(e) => (EXIT_RUN_FAILED, e),
                Ok(_) if a.no_verify => {
                    if !cli.quiet {
                        eprintln!(
                            "bulkhead: hugepages: not verified (--no-verify); check with `bulkhead hugepages usage {}` (the command keeps this PID)",
                            std::process::id()
                        );
                    }
                    let e = bulkhead::run::exec(fs, &spec);
                    (e.code, e.error)
                }
                Ok((p, facts)) => match hugepages::run_verified(cli, fs, &spec, &p, &facts) {
                    Ok(code) => return Ok(code),
                    Err(ce) => ce,
                },
            };
            bulkhead::run::RunError::with_code(error.0, error.1)
        }
        None => match systemd::run(&chosen, &spec, a.scope, a.pty) {
            Ok(code) => return Ok(code),
            Err(e) => e,
        },
    };
    let missing = e
        .error
        .diagnostics()
        .iter()
        .any(|d| d.context.as_deref() == Some(bulkhead::cgroup::MISSING_SLICE));
    match (missing, &spec.slice) {
        (true, Some(s)) => report(
            &require_slice(cli, fs, s)
                .err()
                .unwrap_or(e.error)
                .diagnostics(),
        ),
        _ => report(&e.error.diagnostics()),
    }
    Ok(e.code)
}

fn move_pids(cli: &Cli, a: &MoveArgs) -> Result<i32> {
    let chosen = systemd::choose(cli)?;
    let fs = chosen.backend();
    let slice = parse_slice(&a.slice)?;
    require_slice(cli, fs, &slice)?;
    let mut results = Vec::new();
    for &pid in &a.pids {
        let r = if pid <= 0 {
            Err("is not a process ID".to_string())
        } else {
            fs.move_pid(&slice, pid)
        };
        results.push((pid, r));
    }
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    if a.json {
        let v: Vec<_> = results
            .iter()
            .map(|(pid, r)| match r {
                Ok(()) => serde_json::json!({"pid": pid, "moved": true}),
                Err(e) => serde_json::json!({"pid": pid, "moved": false, "error": e}),
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"slice": slice, "results": v}))
                .unwrap()
        );
    } else {
        for (pid, r) in &results {
            match r {
                Ok(()) => {
                    if !cli.quiet {
                        println!("moved {pid} to {}", slice.unit());
                    }
                }
                Err(e) => eprintln!("bulkhead: error: could not move {pid}: {e}"),
            }
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

fn status(cli: &Cli, a: &StatusArgs) -> Result<i32> {
    let chosen = systemd::choose(cli)?;
    let fs = chosen.backend();
    let secs = a.watch.unwrap_or(a.interval);
    if !(secs.is_finite() && secs > 0.0 && secs <= 3600.0) {
        return Err(Error::invalid(Diagnostic::error(format!(
            "the interval must be between 0 and 3600 seconds, not {secs}"
        ))));
    }
    let interval = Duration::from_secs_f64(secs);
    loop {
        let names = fs.slices();
        let mut st = bulkhead::metrics::status(chosen.reader(), &names, interval);
        st.backend = fs.name().into();
        st.layout = systemd::layout_line(&chosen);
        let sockets = bulkhead::activate::state::read_all();
        if a.json {
            let mut v = serde_json::to_value(&st).unwrap();
            v["sockets"] = serde_json::to_value(&sockets).unwrap();
            let text = if a.watch.is_some() {
                serde_json::to_string(&v).unwrap()
            } else {
                serde_json::to_string_pretty(&v).unwrap()
            };
            println!("{text}");
        } else {
            if a.watch.is_some() {
                print!("\x1b[H\x1b[2J");
            }
            print!("{}", show::status_table(&st));
            if !sockets.is_empty() {
                print!("{}", show::sockets_table(&sockets));
            }
        }
        if a.watch.is_none() {
            return Ok(0);
        }
    }
}

fn destroy(cli: &Cli, a: &DestroyArgs) -> Result<i32> {
    let chosen = systemd::choose(cli)?;
    let fs = chosen.backend();
    let names: Vec<SliceName> = if a.all {
        fs.slices()
    } else if !a.slices.is_empty() {
        a.slices
            .iter()
            .map(|s| parse_slice(s))
            .collect::<Result<_>>()?
    } else {
        let plan = Plan::load(cli.config.as_deref())?;
        plan.slices.keys().cloned().collect()
    };
    let present: Vec<SliceName> = names.into_iter().filter(|n| fs.slice_exists(n)).collect();
    if present.is_empty() {
        if !cli.quiet {
            println!("nothing to remove: none of the slices exist");
        }
        return Ok(0);
    }
    let changes = fs.plan_destroy(&present, a.kill)?;
    if a.dry_run {
        for op in &changes.ops {
            println!("{op}");
        }
        println!("dry run: {} change(s) not made", changes.ops.len());
        return Ok(0);
    }
    if !cli.quiet {
        for op in &changes.ops {
            println!("{op}");
        }
    }
    fs.execute(&changes)?;
    if !cli.quiet {
        println!("removed: {} slice(s)", changes.slices.len());
    }
    Ok(0)
}

fn import(a: &ImportArgs) -> Result<i32> {
    let text = bulkhead::plan::import::import(&a.files)?;
    match &a.output {
        Some(p) => std::fs::write(p, &text)
            .map_err(|e| bulkhead::error::io_failed("cannot write", p, e))?,
        None => print!("{text}"),
    }
    Ok(0)
}
