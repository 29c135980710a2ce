//! `[socket.NAME]` sections: sockets bulkhead listens on, and the target it starts on the
//! first connection (see `activate`).
//!
//! ```toml
//! [socket.app]
//! listen = ["127.0.0.1:8080", "unix:/run/bulkhead/app.sock"]
//! mode = "proxy"                 # or "pass" or "per-connection"
//! backend = "127.0.0.1:8000"
//! idle_timeout = "30s"
//! ready = "connect"              # or "notify"
//! [socket.app.target]
//! rootfs = "/var/lib/bulkhead/images/app"
//! command = ["/usr/bin/python3", "-m", "http.server", "8000"]
//! slice = "db-helper"
//! ```

mod keys;
mod limits;
mod rules;
mod target;

pub(crate) use limits::check_slices;

use crate::values::Ctx;
use crate::{Loc, SliceName, Source};
use bulkhead_sys::error::Diagnostic;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use toml::de::DeValue;
use toml::Spanned;

/// Where a socket listens, or where a backend is reached.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(into = "String")]
pub enum Endpoint {
    Tcp(SocketAddr),
    Udp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "{a}"),
            Endpoint::Udp(a) => write!(f, "udp:{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl From<Endpoint> for String {
    fn from(e: Endpoint) -> String {
        e.to_string()
    }
}

impl Endpoint {
    /// `HOST:PORT`, `[V6]:PORT`, `PORT` (all IPv4 addresses), `tcp:…`, `udp:…`, `unix:/path`.
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let s = s.trim();
        if let Some(p) = s.strip_prefix("unix:") {
            let path = PathBuf::from(p);
            if !path.is_absolute() {
                return Err(format!("'{s}': a unix socket path must be absolute"));
            }
            // sun_path holds 108 bytes with the terminating NUL.
            if p.len() > 107 {
                return Err(format!(
                    "'{s}': a unix socket path is at most 107 bytes long (this one has {})",
                    p.len()
                ));
            }
            return Ok(Endpoint::Unix(path));
        }
        let (udp, rest) = match s.strip_prefix("udp:") {
            Some(r) => (true, r),
            None => (false, s.strip_prefix("tcp:").unwrap_or(s)),
        };
        let addr = if let Ok(port) = rest.parse::<u16>() {
            SocketAddr::from(([0, 0, 0, 0], port))
        } else {
            rest.parse::<SocketAddr>().map_err(|_| {
                format!(
                    "'{s}' is not an address: write HOST:PORT (127.0.0.1:8080, [::1]:8080), PORT, udp:HOST:PORT or unix:/PATH"
                )
            })?
        };
        if addr.port() == 0 {
            return Err(format!("'{s}': port 0 is not a port to listen on or reach"));
        }
        Ok(if udp {
            Endpoint::Udp(addr)
        } else {
            Endpoint::Tcp(addr)
        })
    }
    pub fn is_stream(&self) -> bool {
        !matches!(self, Endpoint::Udp(_))
    }
}

/// How connections reach the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// bulkhead accepts and copies the bytes to the target's backend address.
    Proxy,
    /// The listening sockets are handed to the target (LISTEN_FDS), bulkhead steps aside.
    Pass,
    /// A fresh target per accepted connection, the connection on its stdin/stdout.
    PerConnection,
}

/// When a started target counts as ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ready {
    /// Its backend address accepts a connection.
    Connect,
    /// It sent READY=1 on $NOTIFY_SOCKET.
    Notify,
}

/// What becomes of a target that was idle for `idle_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnIdle {
    /// SIGTERM, then SIGKILL after stop_timeout; the next connection starts it again.
    Stop,
    /// Frozen by the cgroup freezer (it keeps its memory, uses no CPU); the next connection
    /// thaws it. Stopped after `freeze_timeout` frozen.
    Freeze,
}

/// The PROXY protocol version sent to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyVersion {
    V1,
    V2,
}

/// What runs behind a socket.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TargetSpec {
    pub command: Vec<String>,
    /// An ephemeral sandbox from this root (a directory or an image name); else a plain command.
    pub rootfs: Option<String>,
    pub slice: Option<SliceName>,
    pub user: Option<String>,
    pub group: Option<String>,
    pub working_directory: Option<PathBuf>,
    pub environment: Vec<(String, String)>,
    /// Sandbox only: none, private (default) or host.
    pub network: Option<String>,
    /// Sandbox only: `SRC[:DST[:ro]]`, as `spawn --bind`.
    pub bind: Vec<String>,
    /// Sandbox only: the snapshot method (auto by default).
    pub snapshot: Option<String>,
    /// Sandbox only: a user namespace, `auto` or `BASE[:SIZE]` (as `spawn --private-users`).
    pub private_users: Option<String>,
    /// Sandbox only: the size of /tmp, of /dev/shm and of the overlay's upper layer, in
    /// bytes (`spawn --tmp-size`, `--shm-size`, `--overlay-size`); None: spawn's default.
    pub tmp_size: Option<u64>,
    pub shm_size: Option<u64>,
    pub overlay_size: Option<u64>,
    /// Sandbox only: boot the root's init as PID 1 (`spawn --boot`); `command` is then the
    /// init's arguments (e.g. `systemd.unit=...`), and the target is ready on the READY=1
    /// the container's systemd sends unless `ready` says otherwise.
    pub boot: bool,
    /// Where the target's table and its `slice` key stand, for messages.
    #[serde(skip)]
    pub loc: Loc,
    #[serde(skip)]
    pub slice_at: Option<Loc>,
}

/// One `[socket.NAME]` section, checked.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SocketSpec {
    pub name: String,
    #[serde(skip)]
    pub loc: Loc,
    /// Each address with the place it was written, for bind errors.
    pub listen: Vec<(Endpoint, String)>,
    pub mode: Mode,
    pub backend: Option<Endpoint>,
    /// None: never stop for idleness.
    pub idle_timeout: Option<Duration>,
    /// Stop (the default) or freeze a target idle for idle_timeout.
    pub on_idle: OnIdle,
    /// A frozen target is stopped after this long frozen; None: it stays frozen until a
    /// connection comes or serve stops.
    pub freeze_timeout: Option<Duration>,
    pub ready: Ready,
    pub start_timeout: Duration,
    pub stop_timeout: Duration,
    /// A connect to the backend that takes longer is abandoned and tried again (a full accept
    /// queue drops SYNs silently, and the kernel would retry only after 1 s, 3 s, 7 s...).
    pub connect_timeout: Duration,
    /// Connections at once (for a UDP listener: flows; the least recently used one is
    /// dropped for a new one).
    pub max_connections: u32,
    /// Connections at once from one client (systemd's MaxConnectionsPerSource=): an IPv4
    /// address, an IPv6 /64 or, on a unix socket, a user. More are closed at once.
    pub max_connections_per_source: u32,
    /// Close a proxied connection (or forget a UDP flow) with no traffic either way for this
    /// long; None: never.
    pub connection_idle_timeout: Option<Duration>,
    /// With accept_proxy_protocol: close a connection whose PROXY header is not complete
    /// after this long.
    pub proxy_header_timeout: Duration,
    /// The splice pipe's size in bytes (F_SETPIPE_SZ; 256K by default, as socket-proxyd's).
    pub pipe_size: Option<u64>,
    pub backlog: u32,
    pub proxy_protocol: Option<ProxyVersion>,
    pub accept_proxy_protocol: bool,
    pub socket_mode: Option<u32>,
    pub socket_user: Option<String>,
    pub socket_group: Option<String>,
    pub target: TargetSpec,
}

/// Keys of a socket section, for suggestions.
pub(crate) const KEYS: &[&str] = &[
    "listen",
    "mode",
    "backend",
    "idle_timeout",
    "on_idle",
    "freeze_timeout",
    "ready",
    "start_timeout",
    "stop_timeout",
    "connect_timeout",
    "max_connections",
    "max_connections_per_source",
    "connection_idle_timeout",
    "proxy_header_timeout",
    "pipe_size",
    "backlog",
    "proxy_protocol",
    "accept_proxy_protocol",
    "socket_mode",
    "socket_user",
    "socket_group",
    "target",
];
/// Keys of a socket's target: the plain ones, then the eight only a sandboxed target takes.
pub(crate) const TARGET_KEYS: &[&str] = &[
    "command",
    "rootfs",
    "slice",
    "user",
    "group",
    "working_directory",
    "environment",
    "network",
    "bind",
    "snapshot",
    "private_users",
    "tmp_size",
    "shm_size",
    "overlay_size",
    "boot",
];
/// The keys only a sandboxed target takes: the tail of [`TARGET_KEYS`].
pub(crate) const SANDBOX_TARGET_KEYS: &[&str] = TARGET_KEYS.split_at(TARGET_KEYS.len() - 8).1;

/// A socket name is a plain name: it names files under /run/bulkhead/sockets.
fn check_name(n: &str) -> Result<(), String> {
    if n.is_empty()
        || n.len() > 64
        || n.starts_with('.')
        || !n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "'{n}' is not a valid socket name: use letters, digits, '-', '_' and '.', at most 64 characters"
        ));
    }
    Ok(())
}

/// One `[socket.NAME]` section: each key checked on its own, then the rules across keys.
pub(super) fn parse_socket(
    source: &Source,
    name_key: &Spanned<std::borrow::Cow<'_, str>>,
    body: &Spanned<DeValue<'_>>,
    errors: &mut Vec<Diagnostic>,
) -> Option<SocketSpec> {
    let loc = source.loc(name_key.span().start);
    let name = name_key.get_ref().to_string();
    if let Err(m) = check_name(&name) {
        errors.push(Diagnostic::error(m).at(source.at(loc)));
        return None;
    }
    let section = format!("[socket.{name}]");
    let Some(table) = body.get_ref().as_table() else {
        errors.push(
            Diagnostic::error("a socket must be a table")
                .at(source.at(loc))
                .context(section)
                .hint("write [socket.NAME] on its own line, then key = value lines"),
        );
        return None;
    };
    let before = errors.len();
    let mut c = Ctx {
        source,
        section,
        errors,
    };
    let mut d = keys::Draft::new(name, loc);
    for (k, v) in table.iter() {
        let key = k.get_ref().as_ref();
        let kloc = source.loc(k.span().start);
        d.seen.insert(key.to_string(), kloc);
        d.set(&mut c, key, kloc, v.get_ref());
    }
    rules::check(&mut c, &d);
    if c.errors.len() > before {
        return None;
    }
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Plan;

    fn errors(text: &str) -> String {
        match Plan::parse(text, Some(std::path::Path::new("p.toml"))) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_booted_target_is_ready_on_notify_in_proxy_mode_with_the_inits_arguments() {
        let head = "[socket.a]\nlisten = [\"1\"]\nbackend = \"127.0.0.1:8000\"\n";
        let t = "[socket.a.target]\nrootfs = \"/r\"\nboot = true\n";
        let p = Plan::parse(&format!("{head}{t}"), None).unwrap();
        let s = &p.sockets["a"];
        assert!(s.target.boot && s.target.command.is_empty());
        assert_eq!(s.ready, Ready::Notify);
        let p = Plan::parse(&format!("{head}ready = \"connect\"\n{t}"), None).unwrap();
        assert_eq!(p.sockets["a"].ready, Ready::Connect, "said outright, kept");
        let e = errors(&format!("{head}{t}user = \"nobody\"\n"));
        assert!(
            e.contains("p.toml:7:1") && e.contains("user does not apply to a booted target"),
            "{e}"
        );
        let e = errors(&format!(
            "[socket.a]\nlisten = [\"1\"]\nmode = \"pass\"\n{t}"
        ));
        assert!(e.contains("works in proxy mode only"), "{e}");
        let e = errors(&format!(
            "{head}[socket.a.target]\ncommand = [\"x\"]\nboot = true\n"
        ));
        assert!(e.contains("boot only applies to a sandboxed target"), "{e}");
        let e = errors(&format!(
            "{head}[socket.a.target]\nrootfs = \"/r\"\nboot = \"yes\"\n"
        ));
        assert!(e.contains("boot must be true or false"), "{e}");
    }

    #[test]
    fn the_sandbox_keys_are_the_tail_of_the_target_keys() {
        assert_eq!(SANDBOX_TARGET_KEYS.first(), Some(&"network"));
        assert_eq!(SANDBOX_TARGET_KEYS.last(), Some(&"boot"));
    }

    #[test]
    fn a_full_socket_with_defaults() {
        let p = Plan::parse(
            r#"
[socket.app]
listen = ["127.0.0.1:8080", "unix:/run/bulkhead/app.sock", "9090", "[::1]:81"]
backend = "127.0.0.1:8000"
socket_mode = "0660"
[socket.app.target]
rootfs = "app"
command = ["/usr/bin/python3", "-m", "http.server", "8000"]
slice = "db-helper"
environment = { PYTHONUNBUFFERED = "1" }
"#,
            None,
        )
        .unwrap();
        let s = &p.sockets["app"];
        assert_eq!(s.listen.len(), 4);
        assert_eq!(
            s.listen[2].0,
            Endpoint::Tcp("0.0.0.0:9090".parse().unwrap())
        );
        assert_eq!(s.mode, Mode::Proxy);
        assert_eq!(s.ready, Ready::Connect);
        assert_eq!(s.idle_timeout, Some(Duration::from_secs(30)));
        assert_eq!(s.start_timeout, Duration::from_secs(10));
        assert_eq!(s.max_connections, 1024);
        assert_eq!(s.pipe_size, Some(256 << 10));
        assert_eq!(s.socket_mode, Some(0o660));
        assert_eq!(s.target.slice.as_ref().unwrap().to_string(), "db-helper");
        assert_eq!(
            s.target.environment,
            vec![("PYTHONUNBUFFERED".into(), "1".into())]
        );
    }

    #[test]
    fn connection_limits_have_safe_defaults_and_are_checked() {
        let t = "[socket.a.target]\ncommand = [\"/bin/true\"]\n";
        let parse = |head: &str| {
            Plan::parse(&format!("[socket.a]\n{head}\n{t}"), None)
                .unwrap()
                .sockets["a"]
                .clone()
        };
        let s = parse("listen = [\"1234\"]\nbackend = \"127.0.0.1:1\"");
        assert_eq!(
            (s.max_connections, s.max_connections_per_source),
            (1024, 256)
        );
        assert_eq!(s.connection_idle_timeout, Some(Duration::from_secs(3600)));
        assert_eq!(s.proxy_header_timeout, Duration::from_secs(5));
        let s = parse(
            "listen = [\"udp:127.0.0.1:53\"]\nbackend = \"udp:127.0.0.1:5353\"\nready = \"notify\"",
        );
        assert_eq!(s.connection_idle_timeout, Some(Duration::from_secs(30)));
        let s = parse("listen = [\"1234\"]\nmode = \"per-connection\"");
        assert_eq!((s.max_connections, s.max_connections_per_source), (64, 16));
        let s = parse("listen = [\"1234\"]\nbackend = \"127.0.0.1:1\"\nmax_connections = 10\nmax_connections_per_source = 10\nconnection_idle_timeout = \"infinity\"\naccept_proxy_protocol = true\nproxy_header_timeout = \"2s\"");
        assert_eq!(s.max_connections_per_source, 10);
        assert_eq!(s.connection_idle_timeout, None);
        assert_eq!(s.proxy_header_timeout, Duration::from_secs(2));
        let e = errors(&format!("[socket.a]\nlisten = [\"1234\"]\nbackend = \"127.0.0.1:1\"\nmax_connections = 8\nmax_connections_per_source = 9\nproxy_header_timeout = \"1s\"\nconnection_idle_timeout = \"0s\"\n{t}"));
        assert!(
            e.contains("p.toml:5:1")
                && e.contains("max_connections_per_source (9) is more than max_connections (8)"),
            "{e}"
        );
        assert!(
            e.contains("p.toml:6:1")
                && e.contains("proxy_header_timeout applies only with accept_proxy_protocol"),
            "{e}"
        );
        assert!(
            e.contains("p.toml:7:1")
                && e.contains("connection_idle_timeout must be a time span above 0"),
            "{e}"
        );
        let e = errors(&format!(
            "[socket.a]\nlisten = [\"1234\"]\nmode = \"pass\"\nmax_connections_per_source = 2\n{t}"
        ));
        assert!(e.contains("in pass mode the target accepts them"), "{e}");
    }

    #[test]
    fn a_target_frozen_when_idle_in_proxy_mode_with_a_slice() {
        let head = "[socket.a]\nlisten = [\"1\"]\nbackend = \"127.0.0.1:8000\"\n";
        let t = "[socket.a.target]\ncommand = [\"/bin/true\"]\nslice = \"db-helper\"\n";
        let p = Plan::parse(&format!("{head}{t}"), None).unwrap();
        assert_eq!(p.sockets["a"].on_idle, OnIdle::Stop);
        let p = Plan::parse(
            &format!("{head}on_idle = \"freeze\"\nfreeze_timeout = \"10min\"\n{t}"),
            None,
        )
        .unwrap();
        let s = &p.sockets["a"];
        assert_eq!(s.on_idle, OnIdle::Freeze);
        assert_eq!(s.freeze_timeout, Some(Duration::from_secs(600)));
        let p = Plan::parse(&format!("{head}on_idle = \"freeze\"\n{t}"), None).unwrap();
        assert_eq!(
            p.sockets["a"].freeze_timeout, None,
            "frozen until a connection"
        );
        // What does not fit, each at its key.
        let e = errors(&format!("{head}on_idle = \"pause\"\n{t}"));
        assert!(e.contains("p.toml:4:") && e.contains("'pause'"), "{e}");
        let e = errors(&format!("{head}freeze_timeout = \"1h\"\n{t}"));
        assert!(
            e.contains("p.toml:4:") && e.contains("on_idle = \"freeze\""),
            "{e}"
        );
        let e = errors(&format!(
            "{head}on_idle = \"freeze\"\nidle_timeout = \"infinity\"\n{t}"
        ));
        assert!(e.contains("never goes idle"), "{e}");
        let e = errors(&format!(
            "{head}on_idle = \"freeze\"\n[socket.a.target]\ncommand = [\"/bin/true\"]\n"
        ));
        assert!(e.contains("needs the target in a slice"), "{e}");
        let e = errors(&format!(
            "[socket.a]\nlisten = [\"1\"]\nmode = \"pass\"\non_idle = \"freeze\"\n{t}"
        ));
        assert!(e.contains("proxy mode only"), "{e}");
    }

    #[test]
    fn cross_key_rules_and_locations() {
        let t = "[socket.a.target]\ncommand = [\"/bin/true\"]\n";
        let e = errors(&format!(
            "[socket.a]\nlisten = [\"udp:127.0.0.1:53\"]\nbackend = \"udp:127.0.0.1:5353\"\n{t}"
        ));
        assert!(
            e.contains("p.toml:") && e.contains("cannot check a UDP backend"),
            "{e}"
        );
        let e = errors(&format!(
            "[socket.a]\nlisten = [\"1234\"]\nmode = \"pass\"\nbackend = \"127.0.0.1:1\"\n{t}"
        ));
        assert!(
            e.contains("p.toml:4:1") && e.contains("only used in proxy mode"),
            "{e}"
        );
        let e = errors(&format!(
            "[socket.a]\nlisten = [\"udp:127.0.0.1:53\"]\nmode = \"per-connection\"\n{t}"
        ));
        assert!(e.contains("per-connection mode needs stream"), "{e}");
        let e = errors(&format!("[socket.a]\nlisten = [\"1234\"]\nbackend = \"udp:127.0.0.1:1\"\nready = \"notify\"\n{t}"));
        assert!(e.contains("a UDP listener needs a UDP backend"), "{e}");
        let e = errors("[socket.a]\nlisten = [\"1234\"]\nbackend = \"127.0.0.1:1\"\n[socket.a.target]\ncommand = [\"x\"]\nnetwork = \"host\"\nsnapshott = \"btrfs\"\n");
        assert!(
            e.contains("network only applies to a sandboxed target"),
            "{e}"
        );
        assert!(
            e.contains("unknown key 'snapshott'") && e.contains("did you mean snapshot?"),
            "{e}"
        );
        let e = errors("[socket.a]\nlisten = [\"1\"]\nbackend = \"127.0.0.1:1\"\n[socket.a.target]\ncommand = [\"x\"]\nrootfs = \"/r\"\nprivate_users = \"0:10\"\n");
        assert!(
            e.contains("p.toml:7:1") && e.contains("must start above 0"),
            "{e}"
        );
        let e = errors("[socket.a]\nlisten = [\"1\"]\nbackend = \"127.0.0.1:1\"\n[socket.a.target]\ncommand = [\"x\"]\nprivate_users = \"auto\"\n");
        assert!(
            e.contains("private_users only applies to a sandboxed target"),
            "{e}"
        );
        let e = errors("[socket.\"a/b\"]\nlisten = [\"1\"]\n");
        assert!(e.contains("not a valid socket name"), "{e}");
        let e = errors("[socket.a]\nlisten = [\"localhost:80\", \"unix:rel.sock\"]\nbackend = \"127.0.0.1:1\"\nidle_timeout = \"5 parsecs\"\n");
        assert!(e.contains("'localhost:80' is not an address"), "{e}");
        assert!(e.contains("must be absolute"), "{e}");
        assert!(e.contains("idle_timeout = 5 parsecs"), "{e}");
        assert!(e.contains("a socket needs a target"), "{e}");
    }
}
