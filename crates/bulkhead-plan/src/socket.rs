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

use super::{Loc, SliceName, Source};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::units::{parse_duration, parse_size};
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
    pub ready: Ready,
    pub start_timeout: Duration,
    pub stop_timeout: Duration,
    /// A connect to the backend that takes longer is abandoned and tried again (a full accept
    /// queue drops SYNs silently, and the kernel would retry only after 1 s, 3 s, 7 s...).
    pub connect_timeout: Duration,
    pub max_connections: u32,
    /// Close a proxied connection with no traffic either way for this long.
    pub connection_idle_timeout: Option<Duration>,
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
const KEYS: &[&str] = &[
    "listen",
    "mode",
    "backend",
    "idle_timeout",
    "ready",
    "start_timeout",
    "stop_timeout",
    "connect_timeout",
    "max_connections",
    "connection_idle_timeout",
    "pipe_size",
    "backlog",
    "proxy_protocol",
    "accept_proxy_protocol",
    "socket_mode",
    "socket_user",
    "socket_group",
    "target",
];
const TARGET_KEYS: &[&str] = &[
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
];

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

struct Ctx<'a> {
    source: &'a Source,
    section: String,
    errors: &'a mut Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn err(&mut self, loc: Loc, key: &str, msg: String, hint: &str) {
        let mut d = Diagnostic::error(msg)
            .at(self.source.at(loc))
            .context(format!("{} {key}", self.section));
        if !hint.is_empty() {
            d = d.hint(hint);
        }
        self.errors.push(d);
    }
    fn string(&mut self, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<String> {
        match v {
            DeValue::String(s) => Some(s.to_string()),
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} must be a string"),
                    "write it in double quotes",
                );
                None
            }
        }
    }
    fn strings(&mut self, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<Vec<String>> {
        match v {
            DeValue::String(s) => Some(vec![s.to_string()]),
            DeValue::Array(a) => {
                let mut out = Vec::new();
                for i in a.iter() {
                    out.push(self.string(loc, key, i.get_ref())?);
                }
                Some(out)
            }
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} must be a list of strings"),
                    "write it as [\"a\", \"b\"]",
                );
                None
            }
        }
    }
    fn duration(&mut self, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<Option<Duration>> {
        let s = match v {
            DeValue::Integer(i) => i.as_str().to_string(),
            DeValue::String(s) => s.to_string(),
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} must be a time span"),
                    "write e.g. \"30s\", \"500ms\", \"2min\" or \"infinity\"",
                );
                return None;
            }
        };
        if s == "infinity" {
            return Some(None);
        }
        match parse_duration(&s) {
            Ok(d) => Some(Some(d)),
            Err(m) => {
                self.err(
                    loc,
                    key,
                    format!("{key} = {s}: {m}"),
                    "write e.g. \"30s\", \"500ms\", \"2min\" or \"infinity\"",
                );
                None
            }
        }
    }
    fn count(&mut self, loc: Loc, key: &str, v: &DeValue<'_>, min: u64, max: u64) -> Option<u64> {
        let n = match v {
            DeValue::Integer(i) => i.as_str().replace('_', "").parse::<i64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n >= min as i64 && n <= max as i64 => Some(n as u64),
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} must be a whole number from {min} to {max}"),
                    "",
                );
                None
            }
        }
    }
}

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
        section: section.clone(),
        errors,
    };
    let mut listen = Vec::new();
    let mut mode = Mode::Proxy;
    let mut backend = None;
    let mut idle_timeout = Some(Duration::from_secs(30));
    let mut ready = Ready::Connect;
    let mut start_timeout = Duration::from_secs(10);
    let mut stop_timeout = Duration::from_secs(10);
    let mut connect_timeout = Duration::from_millis(250);
    let mut max_connections = None;
    let mut connection_idle_timeout = None;
    // As systemd-socket-proxyd's.
    let mut pipe_size = Some(256 << 10);
    let mut backlog = 4096;
    let mut proxy_protocol = None;
    let mut accept_proxy_protocol = false;
    let mut socket_mode = None;
    let mut socket_user = None;
    let mut socket_group = None;
    let mut target = None;
    let mut seen = std::collections::HashMap::new();
    for (k, v) in table.iter() {
        let key = k.get_ref().as_ref();
        let kloc = source.loc(k.span().start);
        seen.insert(key.to_string(), kloc);
        let val = v.get_ref();
        match key {
            "listen" => {
                for s in c.strings(kloc, key, val).unwrap_or_default() {
                    match Endpoint::parse(&s) {
                        Ok(e) => listen.push((e, source.at(kloc))),
                        Err(m) => c.err(kloc, key, m, ""),
                    }
                }
            }
            "mode" => match c.string(kloc, key, val).as_deref() {
                Some("proxy") => mode = Mode::Proxy,
                Some("pass") => mode = Mode::Pass,
                Some("per-connection") => mode = Mode::PerConnection,
                Some(o) => c.err(
                    kloc,
                    key,
                    format!("'{o}' is not a mode"),
                    "use proxy, pass or per-connection",
                ),
                None => {}
            },
            "backend" => {
                if let Some(s) = c.string(kloc, key, val) {
                    match Endpoint::parse(&s) {
                        Ok(e) => backend = Some(e),
                        Err(m) => c.err(kloc, key, m, ""),
                    }
                }
            }
            "idle_timeout" => {
                if let Some(d) = c.duration(kloc, key, val) {
                    idle_timeout = d;
                }
            }
            "connection_idle_timeout" => {
                if let Some(d) = c.duration(kloc, key, val) {
                    connection_idle_timeout = d;
                }
            }
            "start_timeout" | "stop_timeout" | "connect_timeout" => match c.duration(kloc, key, val) {
                Some(Some(d)) if !d.is_zero() => match key {
                    "start_timeout" => start_timeout = d,
                    "stop_timeout" => stop_timeout = d,
                    _ => connect_timeout = d,
                },
                Some(_) => c.err(
                    kloc,
                    key,
                    format!("{key} must be a finite time span above 0"),
                    "write e.g. \"10s\"",
                ),
                None => {}
            },
            "ready" => match c.string(kloc, key, val).as_deref() {
                Some("connect") => ready = Ready::Connect,
                Some("notify") => ready = Ready::Notify,
                Some(o) => c.err(
                    kloc,
                    key,
                    format!("'{o}' is not a readiness check"),
                    "use connect (the backend accepts a connection) or notify (READY=1 on $NOTIFY_SOCKET)",
                ),
                None => {}
            },
            "max_connections" => max_connections = c.count(kloc, key, val, 1, 1 << 20),
            "backlog" => {
                if let Some(n) = c.count(kloc, key, val, 1, 65535) {
                    backlog = n as u32
                }
            }
            "pipe_size" => {
                let s = match val {
                    DeValue::Integer(i) => Some(i.as_str().to_string()),
                    DeValue::String(s) => Some(s.to_string()),
                    _ => None,
                };
                match s.map(|s| parse_size(&s, 1024)) {
                    Some(Ok(n)) if (4096..=1 << 30).contains(&n) => pipe_size = Some(n),
                    _ => c.err(
                        kloc,
                        key,
                        "pipe_size must be a size from 4K to 1G".into(),
                        "write e.g. \"1M\"; /proc/sys/fs/pipe-max-size caps it for unprivileged users",
                    ),
                }
            }
            "proxy_protocol" => match val {
                DeValue::Boolean(false) => proxy_protocol = None,
                DeValue::String(s) if s == "v1" => proxy_protocol = Some(ProxyVersion::V1),
                DeValue::String(s) if s == "v2" => proxy_protocol = Some(ProxyVersion::V2),
                _ => c.err(
                    kloc,
                    key,
                    "proxy_protocol must be \"v1\", \"v2\" or false".into(),
                    "it is the PROXY protocol version bulkhead sends to the target",
                ),
            },
            "accept_proxy_protocol" => match val {
                DeValue::Boolean(b) => accept_proxy_protocol = *b,
                _ => c.err(
                    kloc,
                    key,
                    "accept_proxy_protocol must be true or false".into(),
                    "",
                ),
            },
            "socket_mode" => {
                let s = match val {
                    DeValue::String(s) => Some(s.to_string()),
                    DeValue::Integer(i) => Some(i.as_str().to_string()),
                    _ => None,
                };
                match s.and_then(|s| u32::from_str_radix(&s, 8).ok()) {
                    Some(m) if m <= 0o7777 => socket_mode = Some(m),
                    _ => c.err(
                        kloc,
                        key,
                        "socket_mode must be an octal mode".into(),
                        "write it as systemd's SocketMode=, e.g. \"0660\"",
                    ),
                }
            }
            "socket_user" => socket_user = c.string(kloc, key, val),
            "socket_group" => socket_group = c.string(kloc, key, val),
            "target" => target = parse_target(&mut c, kloc, val),
            other => {
                let hint = match super::directives::suggest(other, KEYS) {
                    Some(s) => format!("did you mean {s}?"),
                    None => format!("a socket takes: {}", KEYS.join(", ")),
                };
                c.err(kloc, other, format!("unknown key '{other}'"), &hint);
            }
        }
    }
    // Rules across keys.
    let at = |k: &str| seen.get(k).copied().unwrap_or(loc);
    if listen.is_empty() && !seen.contains_key("listen") {
        c.err(
            loc,
            "listen",
            "a socket needs at least one listen address".into(),
            "add listen = [\"127.0.0.1:8080\"]",
        );
    }
    match (mode, &backend) {
        (Mode::Proxy, None) => c.err(
            at("mode"),
            "backend",
            "proxy mode needs a backend address".into(),
            "add backend = \"127.0.0.1:8000\" (where the target listens), or use mode = \"pass\"",
        ),
        (Mode::Pass | Mode::PerConnection, Some(_)) => c.err(
            at("backend"),
            "backend",
            format!(
                "backend is only used in proxy mode, and this socket is in {} mode",
                if mode == Mode::Pass {
                    "pass"
                } else {
                    "per-connection"
                }
            ),
            "remove backend, or set mode = \"proxy\"",
        ),
        _ => {}
    }
    if let Some(b) = &backend {
        if ready == Ready::Connect && !b.is_stream() {
            c.err(
                at("ready"),
                "ready",
                "ready = \"connect\" cannot check a UDP backend".into(),
                "use ready = \"notify\" and have the target send READY=1",
            );
        }
        let udp_listen = listen.iter().any(|(e, _)| !e.is_stream());
        if udp_listen == b.is_stream() || listen.iter().any(|(e, _)| e.is_stream() == udp_listen) {
            c.err(
                at("backend"),
                "backend",
                "a UDP listener needs a UDP backend, and a stream listener a stream backend".into(),
                "proxy UDP to udp:HOST:PORT and TCP or unix listeners to a TCP or unix backend; use two sockets for both",
            );
        }
    }
    if mode == Mode::PerConnection && listen.iter().any(|(e, _)| !e.is_stream()) {
        c.err(
            at("listen"),
            "listen",
            "per-connection mode needs stream (TCP or unix) listeners".into(),
            "use mode = \"pass\" to hand a UDP socket to the target",
        );
    }
    if accept_proxy_protocol && mode != Mode::Proxy {
        c.err(
            at("accept_proxy_protocol"),
            "accept_proxy_protocol",
            "accept_proxy_protocol works in proxy mode only".into(),
            "",
        );
    }
    if (socket_mode.is_some() || socket_user.is_some() || socket_group.is_some())
        && !listen.iter().any(|(e, _)| matches!(e, Endpoint::Unix(_)))
    {
        c.err(
            at("socket_mode"),
            "socket_mode",
            "socket_mode, socket_user and socket_group apply to unix sockets, and this socket has none".into(),
            "add a unix:/PATH address to listen, or remove them",
        );
    }
    let target = match target {
        Some(t) => Some(t),
        None => {
            if !seen.contains_key("target") {
                c.err(
                    loc,
                    "target",
                    "a socket needs a target".into(),
                    "add a [socket.NAME.target] table with command = [...] (and rootfs = ... for a sandbox)",
                );
            }
            None
        }
    };
    if c.errors.len() > before {
        return None;
    }
    let max_connections = max_connections.unwrap_or(match mode {
        Mode::PerConnection => 64,
        _ => 1024,
    }) as u32;
    Some(SocketSpec {
        name,
        loc,
        listen,
        mode,
        backend,
        idle_timeout,
        ready,
        start_timeout,
        stop_timeout,
        connect_timeout,
        max_connections,
        connection_idle_timeout,
        pipe_size,
        backlog,
        proxy_protocol,
        accept_proxy_protocol,
        socket_mode,
        socket_user,
        socket_group,
        target: target?,
    })
}

fn parse_target(c: &mut Ctx<'_>, loc: Loc, v: &DeValue<'_>) -> Option<TargetSpec> {
    let Some(table) = v.as_table() else {
        c.err(
            loc,
            "target",
            "target must be a table".into(),
            "write [socket.NAME.target] followed by command = [...]",
        );
        return None;
    };
    let before = c.errors.len();
    let mut t = TargetSpec {
        command: Vec::new(),
        rootfs: None,
        slice: None,
        user: None,
        group: None,
        working_directory: None,
        environment: Vec::new(),
        network: None,
        bind: Vec::new(),
        snapshot: None,
    };
    let mut seen = std::collections::HashMap::new();
    for (k, v) in table.iter() {
        let key = k.get_ref().as_ref();
        let kloc = c.source.loc(k.span().start);
        seen.insert(key.to_string(), kloc);
        let val = v.get_ref();
        let tkey = format!("target.{key}");
        match key {
            "command" => {
                if let Some(cmd) = c.strings(kloc, &tkey, val) {
                    t.command = cmd
                }
            }
            "rootfs" => t.rootfs = c.string(kloc, &tkey, val),
            "slice" => {
                if let Some(s) = c.string(kloc, &tkey, val) {
                    match SliceName::parse(&s) {
                        Ok(n) => t.slice = Some(n),
                        Err(m) => c.err(kloc, &tkey, format!("invalid slice name: {m}"), ""),
                    }
                }
            }
            "user" => t.user = c.string(kloc, &tkey, val),
            "group" => t.group = c.string(kloc, &tkey, val),
            "working_directory" => {
                if let Some(s) = c.string(kloc, &tkey, val) {
                    if s.starts_with('/') {
                        t.working_directory = Some(PathBuf::from(s))
                    } else {
                        c.err(kloc, &tkey, format!("'{s}' is not an absolute path"), "")
                    }
                }
            }
            "environment" => match val {
                DeValue::Table(env) => {
                    for (ek, ev) in env.iter() {
                        if let Some(s) = c.string(kloc, &tkey, ev.get_ref()) {
                            t.environment.push((ek.get_ref().to_string(), s));
                        }
                    }
                }
                _ => {
                    for s in c.strings(kloc, &tkey, val).unwrap_or_default() {
                        match crate::env::parse_env_assignment(&s) {
                            Ok(kv) => t.environment.push(kv),
                            Err(m) => c.err(kloc, &tkey, m, "write KEY=VALUE"),
                        }
                    }
                }
            },
            "network" => match c.string(kloc, &tkey, val) {
                Some(n) if n.parse::<crate::sandbox::Net>().is_ok() => t.network = Some(n),
                Some(n) => c.err(
                    kloc,
                    &tkey,
                    format!("'{n}' is not a network mode"),
                    "use none, private or host",
                ),
                None => {}
            },
            "bind" => {
                for s in c.strings(kloc, &tkey, val).unwrap_or_default() {
                    match s.parse::<crate::sandbox::Bind>() {
                        Ok(_) => t.bind.push(s),
                        Err(m) => c.err(kloc, &tkey, m, ""),
                    }
                }
            }
            "snapshot" => match c.string(kloc, &tkey, val) {
                Some(s) if s.parse::<crate::sandbox::Choice>().is_ok() => t.snapshot = Some(s),
                Some(s) => c.err(
                    kloc,
                    &tkey,
                    format!("'{s}' is not a snapshot method"),
                    "use auto, btrfs, reflink, overlay or copy",
                ),
                None => {}
            },
            other => {
                let hint = match super::directives::suggest(other, TARGET_KEYS) {
                    Some(s) => format!("did you mean {s}?"),
                    None => format!("a target takes: {}", TARGET_KEYS.join(", ")),
                };
                c.err(
                    kloc,
                    &format!("target.{other}"),
                    format!("unknown key '{other}'"),
                    &hint,
                );
            }
        }
    }
    if t.command.is_empty() && !seen.contains_key("command") {
        c.err(
            loc,
            "target.command",
            "a target needs a command".into(),
            "add command = [\"/usr/bin/server\", \"--port\", \"8000\"]",
        );
    } else if t.command.first().is_some_and(|p| p.is_empty()) || t.command.is_empty() {
        c.err(
            seen["command"],
            "target.command",
            "the command is empty".into(),
            "",
        );
    }
    if t.rootfs.is_none() {
        for k in ["network", "bind", "snapshot"] {
            if let Some(l) = seen.get(k) {
                c.err(
                    *l,
                    &format!("target.{k}"),
                    format!("{k} only applies to a sandboxed target"),
                    "add rootfs = \"...\" to run the target in an ephemeral sandbox, or remove it",
                );
            }
        }
    }
    if c.errors.len() > before {
        None
    } else {
        Some(t)
    }
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
        let e = errors("[socket.\"a/b\"]\nlisten = [\"1\"]\n");
        assert!(e.contains("not a valid socket name"), "{e}");
        let e = errors("[socket.a]\nlisten = [\"localhost:80\", \"unix:rel.sock\"]\nbackend = \"127.0.0.1:1\"\nidle_timeout = \"5 parsecs\"\n");
        assert!(e.contains("'localhost:80' is not an address"), "{e}");
        assert!(e.contains("must be absolute"), "{e}");
        assert!(e.contains("idle_timeout = 5 parsecs"), "{e}");
        assert!(e.contains("a socket needs a target"), "{e}");
    }
}
