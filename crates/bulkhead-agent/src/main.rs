//! bulkhead-agent: `crd` prints the CRDs (BulkheadPlan, BulkheadNode); `run` is the node agent.

use bulkhead::Choice;
use bulkhead_agent::machine::Machine;
use bulkhead_args::BackendArg;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "bulkhead-agent",
    version,
    about = "bulkhead's Kubernetes node agent"
)]
struct Cli {
    /// The cgroup the slices live under
    #[arg(long, global = true, env = "BULKHEAD_CGROUP_ROOT", default_value = "/")]
    cgroup_root: String,
    /// auto: systemd when PID 1 is systemd, else cgroupfs
    #[arg(long, global = true, value_enum, default_value = "auto")]
    backend: BackendArg,
    /// Less output (accepted for `bulkhead agent`; the agent logs only what happens)
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum OnRefusedArg {
    Fail,
    Log,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the CustomResourceDefinitions, BulkheadPlan and BulkheadNode (a JSON List;
    /// `kubectl apply -f -` takes it)
    Crd {
        /// Write one file per CRD into this directory instead (a Helm chart's crds/)
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run the agent for one node
    Run(RunArgs),
    /// The NRI plugin: per-pod isolation from bulkhead.io pod annotations, through the
    /// runtime's NRI socket (containerd 2.x, CRI-O); docs/FLEET.md has the annotations
    Nri {
        /// The runtime's NRI socket
        #[arg(long, default_value = "/var/run/nri/nri.sock")]
        socket: PathBuf,
        /// bulkhead-nri-stub, the NRI protocol's side (the NRI project's Go stub)
        #[arg(long, default_value = "/usr/bin/bulkhead-nri-stub")]
        stub: PathBuf,
        /// Directives a bulkhead.io/DIRECTIVE annotation may set (comma-separated; of
        /// CPUWeight, CPUQuota, MemoryHigh, MemoryMax, IOWeight, TasksMax). None by default
        #[arg(long, value_delimiter = ',')]
        allow: Vec<String>,
        /// Slices of the plan the agent applied on this node that bulkhead.io/slice may name
        /// (comma-separated, by name). None by default: a pod naming a slice is refused
        #[arg(long = "slice", value_delimiter = ',')]
        slices: Vec<String>,
        /// Namespaces whose pods may use bulkhead.io annotations at all (comma-separated;
        /// "*" for every namespace). None by default: every pod's annotations are refused.
        /// What a listed namespace may set is --allow and --slice
        #[arg(long = "namespace", value_delimiter = ',')]
        namespaces: Vec<String>,
        /// The agent's state directory (the plan it applied)
        #[arg(long, default_value = "/run/bulkhead/agent")]
        state_dir: PathBuf,
        /// A refused annotation, or a directive this node cannot apply: log it and report it
        /// on the pod (an event) and start the container with what applies (log, the
        /// default), or fail the container's creation (fail, fail closed)
        #[arg(long, value_enum, default_value = "log")]
        on_refused: OnRefusedArg,
        /// The plugin's name and index (its order among the runtime's plugins)
        #[arg(long, default_value = "bulkhead")]
        name: String,
        #[arg(long, default_value = "50")]
        index: String,
        /// Serve /healthz and /readyz on this address (e.g. 0.0.0.0:9651): ready once the
        /// runtime accepted the plugin's registration, the container's readiness probe
        #[arg(long)]
        health_listen: Option<std::net::SocketAddr>,
    },
    /// The chart's pre-delete hook: delete the agents' DaemonSet so that its pods undo what
    /// they made (foreground: the DaemonSet stays until its pods are gone), wait for that,
    /// then delete the BulkheadNode reports
    Uninstall {
        /// Kubeconfig file (default: KUBECONFIG, ~/.kube/config, or the in-cluster account)
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
        namespace: String,
        #[arg(long)]
        daemonset: String,
        /// Seconds to wait for the agents' pods to finish
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
}

// `bulkhead-agent run`'s options.
#[derive(Args)]
struct RunArgs {
    /// This node's name (a DaemonSet passes it with the downward API)
    #[arg(long, env = "NODE_NAME")]
    node: String,
    /// Kubeconfig file (default: KUBECONFIG, ~/.kube/config, or the in-cluster account)
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where the agent keeps what it made
    #[arg(long, default_value = "/run/bulkhead/agent")]
    state_dir: PathBuf,
    /// Seconds between drift checks
    #[arg(long, default_value_t = 10.0)]
    interval: f64,
    /// Seconds between writes of the slices' figures to the node's BulkheadNode when
    /// nothing else changed
    #[arg(long, default_value_t = 60.0)]
    report_every: f64,
    /// The kubelet's configuration file, to check plans against (reserved cgroups,
    /// reservedSystemCPUs); a missing file is only logged
    #[arg(long, env = "BULKHEAD_KUBELET_CONFIG", default_value = bulkhead_agent::kubelet::DEFAULT_PATH)]
    kubelet_config: PathBuf,
    /// Do not read the kubelet's configuration (the Node object's huge pages are still
    /// checked)
    #[arg(long)]
    no_kubelet_config: bool,
    /// Serve /healthz and /readyz on this address, e.g. 127.0.0.1:9650
    #[arg(long)]
    health_listen: Option<std::net::SocketAddr>,
    /// The DaemonSet running this agent: when it is being deleted at SIGTERM (the chart
    /// is uninstalled), the agent removes what it made before it exits
    #[arg(long, env = "BULKHEAD_DAEMONSET")]
    daemonset: Option<String>,
    /// The DaemonSet's namespace (the downward API's metadata.namespace)
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    namespace: String,
}

use bulkhead::actions::hugepages::STATE_ENV as HUGEPAGES_STATE_ENV;

fn write_crds(dir: &std::path::Path) -> i32 {
    for (name, text) in bulkhead_agent::crd::crd_files() {
        let p = dir.join(name);
        if let Err(e) = std::fs::write(&p, text) {
            eprintln!("bulkhead-agent: {}: {e}", p.display());
            return 1;
        }
    }
    0
}

/// Run one of the agent's async commands on a current-thread runtime; its exit code.
fn block_on(f: impl std::future::Future<Output = Result<(), String>>) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bulkhead-agent: cannot start the runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(f) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bulkhead-agent: {e}");
            1
        }
    }
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::Crd { dir: None } => {
            print!("{}", bulkhead_agent::crd::crd_json());
            0
        }
        Cmd::Crd { dir: Some(dir) } => write_crds(&dir),
        Cmd::Nri {
            socket,
            stub,
            allow,
            slices,
            namespaces,
            state_dir,
            on_refused,
            name,
            index,
            health_listen,
        } => {
            use bulkhead_agent::nri::{stub, OnRefused, Policy};
            let o = stub::Options {
                stub,
                socket,
                name,
                index,
                health: health_listen,
                policy: Policy {
                    allow: allow.into_iter().collect(),
                    slices: slices.into_iter().collect(),
                    namespaces: namespaces.into_iter().collect(),
                    state_dir,
                    on_refused: match on_refused {
                        OnRefusedArg::Fail => OnRefused::Fail,
                        OnRefusedArg::Log => OnRefused::Log,
                    },
                },
            };
            match stub::serve(o) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("bulkhead-agent nri: {e}");
                    1
                }
            }
        }
        Cmd::Uninstall {
            kubeconfig,
            namespace,
            daemonset,
            timeout,
        } => block_on(bulkhead_agent::uninstall::run(
            kubeconfig,
            namespace,
            daemonset,
            Duration::from_secs(timeout),
        )),
        Cmd::Run(a) => run(a, cli.cgroup_root, cli.backend),
    };
    std::process::exit(code);
}

/// `bulkhead-agent run`: its options checked, then the agent until SIGTERM; its exit code.
fn run(a: RunArgs, cgroup_root: String, backend: BackendArg) -> i32 {
    for (flag, v) in [
        ("--interval", a.interval),
        ("--report-every", a.report_every),
    ] {
        if !(v.is_finite() && (0.1..=3600.0).contains(&v)) {
            eprintln!("bulkhead-agent: {flag} must be between 0.1 and 3600 seconds");
            std::process::exit(2);
        }
    }
    if a.node.is_empty() {
        eprintln!("bulkhead-agent: --node (or NODE_NAME) is empty");
        std::process::exit(2);
    }
    let backend = match backend {
        BackendArg::Auto => Choice::Auto,
        BackendArg::Systemd => Choice::Systemd,
        BackendArg::Cgroupfs => Choice::Cgroupfs,
    };
    // The huge page settings the agent's applies change are recorded in its own state
    // directory, so that removing a plan puts back exactly those (set before any
    // thread starts).
    if std::env::var_os(HUGEPAGES_STATE_ENV).is_none() {
        std::env::set_var(HUGEPAGES_STATE_ENV, a.state_dir.join("hugepages.json"));
    }
    let opts = bulkhead_agent::run::Options {
        node: a.node,
        kubeconfig: a.kubeconfig,
        machine: Machine {
            cgroup_root,
            backend,
            state_dir: a.state_dir,
        },
        interval: Duration::from_secs_f64(a.interval),
        report_every: Duration::from_secs_f64(a.report_every),
        kubelet_config: (!a.no_kubelet_config).then_some(a.kubelet_config),
        health: a.health_listen,
        daemonset: a.daemonset.map(|d| (a.namespace, d)),
    };
    block_on(bulkhead_agent::run::run(opts))
}
