//! The command line: every argument type, and the one parse. The commands themselves live
//! in the `cmd` module; this one only describes what they take.

pub mod guard;
pub mod hugepages;
pub mod image;
pub mod iocost;
pub mod place;
mod spawn;
pub mod target;

pub use spawn::SpawnArgs;

use bulkhead::plan::SliceName;
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// Isolate the workloads of a database host: slices (cgroups) for the server and its
/// helpers, without Docker.
#[derive(Parser)]
#[command(
    name = "bulkhead",
    version,
    about = "Isolate the workloads of a database host: slices (cgroups) for the server and its \
helpers, without Docker",
    long_about = "bulkhead isolates the workloads of a database host. A plan file names slices \
(cgroups nested like systemd's: db-server is inside db) with systemd's resource directives; \
`apply` creates them, `run` and `move` put processes into them, and `status` shows what each \
slice uses and how much it stalls.",
    after_help = AFTER_HELP,
    after_long_help = concat!(
        "Global options (every command takes them, before or after its name):\n",
        "  -c, --config FILE     the plan [env BULKHEAD_CONFIG]; without it \
/etc/bulkhead/bulkhead.toml,\n",
        "                        else the embedded default plan (`bulkhead plan show` prints it)\n",
        "  --cgroup-root PATH    the cgroup slices live under [env BULKHEAD_CGROUP_ROOT; default /]:\n",
        "                        a delegated subtree, or a test root\n",
        "  --backend BACKEND     who creates slices [env BULKHEAD_BACKEND; default auto]:\n",
        "                          auto      systemd where PID 1 is systemd on D-Bus, else cgroupfs\n",
        "                          systemd   transient systemd units over D-Bus (persistent ones \
with\n",
        "                                    apply --persist)\n",
        "                          cgroupfs  bulkhead writes cgroupfs itself (v2, v1 or hybrid)\n",
        "  -q, --quiet           only print errors\n\n",
        "Exit status: 0 on success, 1 when acting on the system failed, 2 for bad \
input (plan, arguments; a -c file that cannot be read), 4 for a command that changes the \
system run without root. `run` exits with the command's own status (125: bulkhead could not \
start it, 126: not executable, 127: not found).\n\nFiles: /etc/bulkhead/bulkhead.toml (the \
plan; an embedded default is used when it is missing), /run/bulkhead (runtime state)."
    )
)]
pub struct Cli {
    #[command(flatten)]
    pub globals: Globals,

    #[command(subcommand)]
    pub command: Command,
}

/// The short help's epilogue (`-h`); `--help` of `bulkhead` itself adds the global options.
const AFTER_HELP: &str = "Exit status: 0 success, 1 failure, 2 bad input, 4 needs root; \
`run`: the command's own (125-127: bulkhead could not start it). Global options: see `bulkhead \
--help`.";

// The options every command takes (`cli.config` etc. reach them through Deref): one
// definition with the bench's, in bulkhead-args. One short line each under "Global options"
// in every command's help; the long text is once, in `bulkhead --help` (after_long_help above).
pub use bulkhead_args::Globals;

impl std::ops::Deref for Cli {
    type Target = Globals;
    fn deref(&self) -> &Globals {
        &self.globals
    }
}

/// The one-line help of `spawn`, in both parsers.
const SPAWN_ABOUT: &str =
    "Run a command in a sandbox (namespaces, a root file system, an ephemeral snapshot)";
/// The one-line help of `run`, in both parsers.
const RUN_ABOUT: &str = "Run a command in a slice";

/// `bulkhead spawn ...` and `bulkhead run ...` are parsed by parsers of their own: building
/// the whole command tree costs about 0.3 ms, a tenth of a sandbox's start and a fifth of
/// `run`'s own. Same options; errors and help come from the full parser, word for word.
#[derive(Parser)]
#[command(name = "bulkhead")]
struct SpawnOnly {
    #[command(flatten)]
    pub globals: Globals,
    #[command(subcommand)]
    pub command: SpawnCmd,
}

#[derive(Subcommand)]
enum SpawnCmd {
    #[command(about = SPAWN_ABOUT)]
    Spawn(SpawnArgs),
}

/// The run-only parser (see [`SpawnOnly`]).
#[derive(Parser)]
#[command(name = "bulkhead")]
struct RunOnly {
    #[command(flatten)]
    pub globals: Globals,
    #[command(subcommand)]
    pub command: RunCmd,
}

#[derive(Subcommand)]
enum RunCmd {
    #[command(about = RUN_ABOUT)]
    Run(RunArgs),
}

/// The full parser, or a one-command one when the command line names `run` or `spawn`.
pub fn parse() -> Cli {
    try_parse_from(std::env::args_os().collect()).unwrap_or_else(|e| e.exit())
}

/// `--slice NAME` of `run` and `spawn`: parsed here, once, into the plan's type.
pub(crate) fn slice_name(s: &str) -> Result<SliceName, String> {
    SliceName::parse(s).map_err(|m| format!("invalid slice name: {m}"))
}

/// The command a command line names: its first word after the global options that come
/// before it (`bulkhead -c plan.toml run ...`). None when anything else comes first (an
/// option that is not a global one, `-cFILE`): the full parser takes that line.
pub(crate) fn leading_command(args: &[OsString]) -> Option<&str> {
    use clap::Args as _;
    let globals = Globals::augment_args(clap::Command::new("globals"));
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        let w = word.to_str()?;
        if !w.starts_with('-') {
            return Some(w);
        }
        let (name, inline_value) = match w.split_once('=') {
            Some((n, _)) => (n, true),
            None => (w, false),
        };
        let arg = globals
            .get_arguments()
            .find(|a| match name.strip_prefix("--") {
                Some(long) => a.get_long() == Some(long),
                None => {
                    name.len() == 2
                        && a.get_short().map(|c| format!("-{c}")).as_deref() == Some(name)
                }
            })?;
        if arg.get_action().takes_values() && !inline_value {
            words.next()?;
        }
    }
    None
}

pub(crate) fn try_parse_from(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let fast = match leading_command(&args) {
        Some("spawn") => SpawnOnly::try_parse_from(&args).map(|s| {
            let SpawnCmd::Spawn(a) = s.command;
            (s.globals, Command::Spawn(a))
        }),
        Some("run") => RunOnly::try_parse_from(&args).map(|s| {
            let RunCmd::Run(a) = s.command;
            (s.globals, Command::Run(a))
        }),
        _ => return Cli::try_parse_from(args),
    };
    match fast {
        Ok((globals, command)) => Ok(Cli { globals, command }),
        Err(_) => Cli::try_parse_from(args),
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Show or check the plan
    #[command(subcommand)]
    Plan(PlanCmd),
    /// Create or update the plan's slices (idempotent)
    Apply(ApplyArgs),
    #[command(about = RUN_ABOUT)]
    Run(RunArgs),
    /// Move running processes (with all their threads) into a slice
    Move(MoveArgs),
    /// Place processes as they start, by the plan's [place.NAME] rules
    #[command(long_about = place::PLACE_LONG, after_help = place::PLACE_AFTER)]
    Place(place::PlaceArgs),
    /// Show what each slice uses and how much it stalls
    Status(StatusArgs),
    /// Say whether protection is in force: one verdict and exit code for a monitor
    #[command(long_about = CHECK_LONG, after_help = CHECK_AFTER)]
    Check(CheckArgs),
    /// Serve the slices' metrics for Prometheus: GET /metrics over HTTP
    #[command(
        long_about = "Serve what `status` knows as Prometheus text exposition: GET /metrics over \
HTTP (HEAD too; every other path is 404). Scrapes within a second share one page read from the \
slices under the cgroup root. Metrics a hierarchy cannot give are left out, never reported as 0. \
Requests are limited (4 connections per client, 64 in all, the head within 2 s and 8 KiB, 10 s \
in all); listen on loopback or a private address."
    )]
    Exporter(ExporterArgs),
    /// Remove the plan's slices, children first
    Destroy(DestroyArgs),
    /// Keep the protected slice at full speed: throttle its sideloads when it stalls
    #[command(long_about = guard::GUARD_LONG, after_help = guard::GUARD_AFTER)]
    Guard(guard::GuardArgs),
    // `about` here, not a doc comment: a doc comment would also clear the long help that
    // SpawnArgs carries.
    #[command(
        about = SPAWN_ABOUT
    )]
    Spawn(SpawnArgs),
    #[command(
        about = "Start targets on their first connection: socket activation for the plan's sockets"
    )]
    Serve(ServeArgs),
    /// Convert systemd .slice files (and their .d/*.conf drop-ins) to plan TOML
    Import(ImportArgs),
    /// Write the plan in another format (systemd unit files)
    #[command(subcommand)]
    Export(ExportCmd),
    /// Benchmarks that measure bulkhead against what people use today
    #[command(disable_help_flag = true)]
    Bench(BenchArgs),
    /// The Kubernetes node agent (BulkheadPlan resources): `agent crd`, `agent run --node N`
    #[command(disable_help_flag = true)]
    Agent(AgentArgs),
    /// Per-pod isolation from bulkhead.io pod annotations, as an NRI plugin of the container
    /// runtime (runs `bulkhead-agent nri`)
    #[command(disable_help_flag = true)]
    Nri(AgentArgs),
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
    /// io.cost, the [iocost] section's controller: measure a disk's cost model
    #[command(subcommand)]
    Iocost(iocost::IocostCmd),
    /// Print a shell completion script to standard output
    #[command(
        long_about = "Print the completion script of a shell to standard output. Load it for this \
shell with `source <(bulkhead completions bash)`, or install it where the shell looks (the \
Debian package does this for bash, zsh and fish).",
        after_help = "Where the scripts go:\n  bash  /usr/share/bash-completion/completions/bulkhead \
(or ~/.local/share/bash-completion/completions/bulkhead)\n  zsh   a directory of $fpath, as _bulkhead \
(/usr/share/zsh/vendor-completions/_bulkhead)\n  fish  ~/.config/fish/completions/bulkhead.fish \
(/usr/share/fish/vendor_completions.d/bulkhead.fish)"
    )]
    Completions(CompletionsArgs),
    /// Write the manual pages (section 8: bulkhead.8, bulkhead-apply.8, ...) into a directory
    #[command(hide = true)]
    Manpages(ManpagesArgs),
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to print the script for
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Args)]
pub struct ManpagesArgs {
    /// The directory to write the pages into (created if missing)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Subcommand)]
pub enum PlanCmd {
    /// Print the resolved plan: every slice, every value in bytes and weights, for this host
    /// (or another one with --memory/--cpus). The output is itself a valid plan.
    Show(PlanShowArgs),
}

#[derive(Args)]
pub struct PlanShowArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// Print the plan's slice names, one a line (for shell completion)
    #[arg(long, hide = true, conflicts_with_all = ["json", "memory", "cpus"])]
    pub names: bool,
    /// Resolve for a host with this much RAM (e.g. 64G) instead of this one
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Resolve for a host with this many CPUs instead of this one
    #[arg(long, value_name = "N")]
    pub cpus: Option<u32>,
}

#[derive(Args)]
pub struct ApplyArgs {
    /// Print every write apply would make, and make none
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// List every change as it is made (without it, apply prints a summary)
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Treat directives this host cannot honour as errors
    #[arg(long)]
    pub strict: bool,
    /// Apply huge page pools that leave less than the safe share of RAM outside them
    #[arg(long)]
    pub force: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// systemd backend: write unit files and drop-ins under /etc/systemd/system and reload
    /// systemd, instead of transient units (which are gone at reboot)
    #[arg(long)]
    pub persist: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The slice to run in (as in the plan: db-helper or db-helper.slice); without it the
    /// command stays in bulkhead's own cgroups
    #[arg(long, short = 's', value_name = "SLICE", value_parser = slice_name)]
    pub slice: Option<SliceName>,
    /// Make the program's heap use huge pages: thp, or a hugetlb page size (2M, 1G) from the
    /// pool. Sets glibc's glibc.malloc.hugetlb tunable (and jemalloc's thp:always), then
    /// stays the command's parent to check that it got them
    #[arg(long, value_name = "thp|2M|1G")]
    pub hugepages: Option<String>,
    /// With --hugepages: exec the command in place instead of checking (check later with
    /// `bulkhead hugepages usage PID`; the command keeps bulkhead's PID)
    #[arg(long, requires = "hugepages")]
    pub no_verify: bool,
    /// Run as this user (name or UID); the user's groups come with it
    #[arg(long, value_name = "USER")]
    pub uid: Option<String>,
    /// Run with this group (name or GID) [default: the user's primary group]
    #[arg(long, value_name = "GROUP")]
    pub gid: Option<String>,
    /// Working directory
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Set an environment variable (repeatable)
    #[arg(long = "env", short = 'E', value_name = "KEY=VALUE", value_parser = bulkhead::plan::env::parse_env_assignment)]
    pub env: Vec<(String, String)>,
    /// Read KEY=VALUE lines from a file, as systemd's EnvironmentFile= (repeatable)
    #[arg(long = "setenv-file", value_name = "FILE")]
    pub setenv_file: Vec<PathBuf>,
    /// Pass fds 3..3+N to the command by the systemd protocol (LISTEN_FDS, LISTEN_PID)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub listen_fds: u32,
    /// systemd backend: move bulkhead itself into a transient scope in the slice and exec
    /// the command there (like systemd-run --scope), instead of starting a service
    #[arg(long)]
    pub scope: bool,
    /// systemd backend: give the command a pseudo-terminal (like systemd-run --pty)
    #[arg(long, short = 't', conflicts_with = "scope")]
    pub pty: bool,
    /// Say how the command was put into its slice: cloned straight into it
    /// (clone3 CLONE_INTO_CGROUP, pure cgroup v2), or joined and exec'd in place
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// The command and its arguments, after run's options (as systemd-run and cgexec take
    /// them; everything from the command on is the command's, `--` before it is optional)
    #[arg(
        trailing_var_arg = true,
        required = true,
        num_args = 1..,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

#[derive(Args)]
pub struct MoveArgs {
    /// The slice to move into; `/` moves them out of every slice, back to the cgroup root
    /// (cgroupfs)
    #[arg(long, short = 's', value_name = "SLICE")]
    pub slice: String,
    /// Process IDs
    #[arg(required = true, value_name = "PID")]
    pub pids: Vec<i32>,
    /// Move each PID with all its descendants (listed again until no new one appears)
    #[arg(long, short = 't')]
    pub tree: bool,
    /// Say what would move, move nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Print JSON (one object; with --watch, one per line); the same as --format json
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// table, json, or prometheus (the text exposition, for node_exporter's textfile
    /// collector: one reading, no --interval wait)
    #[arg(long, value_enum, default_value_t = StatusFormat::Table)]
    pub format: StatusFormat,
    /// Refresh every SECONDS until interrupted
    #[arg(long, short = 'w', value_name = "SECONDS")]
    pub watch: Option<f64>,
    /// The interval CPU shares are measured over, in seconds
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    Table,
    Json,
    Prometheus,
}

const CHECK_LONG: &str = "Say whether protection is in force, in one verdict a monitor can alert on: \
the known database servers (postgres, mysqld, mariadbd, redis-server, mongod, ...) are in the server \
slice and the known helpers (pg_dump, pg_basebackup, restic, borg, rsync, node_exporter, ...) in the \
helper slices ([guard] protect and sideloads, else the slices named *server and *helper); no drift \
from the plan (what `apply --dry-run` would change; a missing slice); which directives have no \
effect on this host and why; the I/O scheduler or io.cost on the disks the database's data is on, \
swap and transparent huge pages as the database wants them, huge page pools as planned. Prints a \
one-line summary, then the details.

Exit codes (the Nagios/Icinga plugin convention):
  0  OK        PROTECTED: everything checked is as planned
  1  WARNING   DEGRADED: in force but weaker than planned (drift, a directive without effect,
               a helper outside the helper slices, THP 'always', swap the server may use)
  2  CRITICAL  NOT PROTECTED: a database server outside the server slice, a planned slice
               missing, or a plan apply refuses
  3  UNKNOWN   could not tell: no readable plan, or not root (drift and bulkhead's marks need
               root; a database seen outside its slice is still reported as CRITICAL)";

const CHECK_AFTER: &str = "Examples:
  bulkhead check                       the summary line and the details
  bulkhead check --json | jq .state    for a script
  Icinga/Nagios: command_line = \"/usr/bin/bulkhead check --brief\"
  Prometheus: `bulkhead exporter` serves bulkhead_protection{state=...} from the same check";

#[derive(Args)]
pub struct CheckArgs {
    /// Print JSON: the state, exit code, summary, every finding, placement and disk
    #[arg(long)]
    pub json: bool,
    /// Print only the summary line (a monitoring plugin's output)
    #[arg(long, conflicts_with = "json")]
    pub brief: bool,
}

#[derive(Args)]
pub struct ExporterArgs {
    /// Address and port to serve GET /metrics on (port 0: a free one, printed at start)
    #[arg(long, default_value = "127.0.0.1:9649", value_name = "ADDR:PORT")]
    pub listen: String,
}

#[derive(Args)]
pub struct DestroyArgs {
    /// Kill the processes still in the slices
    #[arg(long)]
    pub kill: bool,
    /// Print what would be removed, and remove nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Remove these slices (and their children) instead of the plan's
    #[arg(long = "slice", value_name = "SLICE")]
    pub slices: Vec<String>,
    /// Remove every slice bulkhead created under the cgroup root
    #[arg(long, conflicts_with = "slices")]
    pub all: bool,
    /// List every change as it is made (without it, destroy prints a summary)
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

#[derive(Args)]
pub struct ImportArgs {
    /// systemd slice unit files
    #[arg(required = true, value_name = "FILE.slice")]
    pub files: Vec<PathBuf>,
    /// Write the plan here instead of standard output
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Args)]
#[command(
    long_about = "Listen on the plan's sockets and start each socket's target on the first \
connection. Connections that arrive while the target starts wait (they are not refused) until \
it is ready: its backend accepts a connection (ready = \"connect\") or it sent READY=1 on \
$NOTIFY_SOCKET (ready = \"notify\"). In proxy mode bulkhead copies the bytes both ways with \
splice(2); in pass mode it hands the listening sockets to the target (LISTEN_FDS, as systemd \
does) and steps aside; in per-connection mode each connection gets its own target with the \
connection on stdin and stdout. A target is stopped (SIGTERM, then SIGKILL after \
stop_timeout) idle_timeout after its last connection closed, and started again by the next \
one; with on_idle = \"freeze\" it is frozen instead (the cgroup freezer, in a cgroup below its \
slice) and thawed by the next connection. A target with rootfs runs in an ephemeral sandbox (bulkhead spawn), else as a plain \
command (bulkhead run), in its slice.\n\nRuns in the foreground and logs to stderr; when \
systemd starts it (Type=notify), it says READY=1 once every socket listens. Started by a \
.socket unit, it takes the unit's sockets (LISTEN_FDS) for the plan addresses they are bound \
to and binds the rest itself; a passed socket that no listen names is an error. SIGTERM or \
SIGINT stops the targets and exits.",
    after_help = "Plan keys of [socket.NAME]: listen (list: HOST:PORT, [V6]:PORT, PORT, \
udp:HOST:PORT, unix:/PATH), mode (proxy | pass | per-connection), backend, ready (connect | \
notify), idle_timeout (30s; \"infinity\"), on_idle (stop | freeze), freeze_timeout \
(\"infinity\"), start_timeout (10s), stop_timeout (10s), \
max_connections (1024; 64 per-connection; UDP: flows), max_connections_per_source (a quarter \
of max_connections, per address, IPv6 /64 or unix user), connection_idle_timeout (1h; UDP \
30s; \"infinity\"), pipe_size, backlog, proxy_protocol (\"v1\" | \"v2\", sent to the target), \
accept_proxy_protocol (read from a load balancer), proxy_header_timeout (5s), socket_mode, \
socket_user, socket_group (the socket's directory must be one only root can change). [socket.NAME.target]: command, rootfs, \
slice, user, group, working_directory, environment, network, bind, snapshot.\n\nExit status: \
0 after SIGTERM/SIGINT, 1 when serving failed, 2 for a bad plan or a socket that cannot be \
bound.\n\nExample:\n  bulkhead serve -c /etc/bulkhead/bulkhead.toml --socket app\n  \
bulkhead status          # state, connections, bytes, cold starts, limits hit of each socket"
)]
pub struct ServeArgs {
    /// Serve only this socket (repeatable) [default: every socket of the plan]
    #[arg(long = "socket", value_name = "NAME")]
    pub sockets: Vec<String>,
    /// Print what would listen and how each target would start, and start nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
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
    pub dir: PathBuf,
    /// Write for this systemd version (e.g. 219 for CentOS 7) [default: this host's systemd
    /// if it answers, else 252 and newer]
    #[arg(long, value_name = "N")]
    pub systemd_version: Option<u32>,
    /// Write memory floors for a host with this much RAM (e.g. 64G) instead of this one
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Print the files instead of writing them
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// `bulkhead agent ...`: everything after `agent` goes to the bulkhead-agent binary.
#[derive(Args)]
pub struct AgentArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "ARGS")]
    pub args: Vec<OsString>,
}

/// `bulkhead bench ...`: everything after `bench` goes to the bulkhead-bench binary.
#[derive(Args)]
pub struct BenchArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "ARGS")]
    pub args: Vec<OsString>,
}

#[cfg(test)]
mod tests;
