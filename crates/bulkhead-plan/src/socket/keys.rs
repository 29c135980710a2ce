//! The keys of a `[socket.NAME]` section, by family: addresses and mode, timeouts, limits,
//! the PROXY protocol, and the unix socket's owner and mode.

use super::{Endpoint, Mode, OnIdle, ProxyVersion, Ready, SocketSpec, TargetSpec, KEYS};
use crate::values::Ctx;
use crate::Loc;
use bulkhead_sys::units::parse_size;
use std::collections::HashMap;
use std::time::Duration;
use toml::de::DeValue;

/// A socket section as read so far, with systemd-socket-proxyd's defaults.
pub(super) struct Draft {
    pub name: String,
    pub loc: Loc,
    /// Where each key stands.
    pub seen: HashMap<String, Loc>,
    pub listen: Vec<(Endpoint, String)>,
    pub mode: Mode,
    pub backend: Option<Endpoint>,
    pub idle_timeout: Option<Duration>,
    pub on_idle: OnIdle,
    pub freeze_timeout: Option<Duration>,
    pub ready: Ready,
    pub start_timeout: Duration,
    pub stop_timeout: Duration,
    pub connect_timeout: Duration,
    pub max_connections: Option<u64>,
    pub max_connections_per_source: Option<u64>,
    /// None: not written (the default depends on the listener); Some(None): infinity.
    pub connection_idle_timeout: Option<Option<Duration>>,
    pub proxy_header_timeout: Duration,
    pub pipe_size: Option<u64>,
    pub backlog: u32,
    pub proxy_protocol: Option<ProxyVersion>,
    pub accept_proxy_protocol: bool,
    pub socket_mode: Option<u32>,
    pub socket_user: Option<String>,
    pub socket_group: Option<String>,
    pub target: Option<TargetSpec>,
}

impl Draft {
    pub fn new(name: String, loc: Loc) -> Draft {
        Draft {
            name,
            loc,
            seen: HashMap::new(),
            listen: Vec::new(),
            mode: Mode::Proxy,
            backend: None,
            idle_timeout: Some(Duration::from_secs(30)),
            on_idle: OnIdle::Stop,
            freeze_timeout: None,
            ready: Ready::Connect,
            start_timeout: Duration::from_secs(10),
            stop_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_millis(250),
            max_connections: None,
            max_connections_per_source: None,
            connection_idle_timeout: None,
            proxy_header_timeout: Duration::from_secs(5),
            // As systemd-socket-proxyd's.
            pipe_size: Some(256 << 10),
            backlog: 4096,
            proxy_protocol: None,
            accept_proxy_protocol: false,
            socket_mode: None,
            socket_user: None,
            socket_group: None,
            target: None,
        }
    }

    /// Where a key stands, or the section's header when it is not written.
    pub fn at(&self, key: &str) -> Loc {
        self.seen.get(key).copied().unwrap_or(self.loc)
    }

    /// Read one key.
    pub fn set(&mut self, c: &mut Ctx<'_>, key: &str, kloc: Loc, val: &DeValue<'_>) {
        match key {
            "listen" | "backend" | "mode" | "ready" => self.addresses(c, key, kloc, val),
            "on_idle" => match c.string(kloc, key, val).as_deref() {
                Some("stop") => self.on_idle = OnIdle::Stop,
                Some("freeze") => self.on_idle = OnIdle::Freeze,
                Some(o) => c.err(
                    kloc,
                    key,
                    format!("'{o}' is not what to do with an idle target"),
                    "use stop (SIGTERM, started again by the next connection) or freeze (the cgroup freezer, thawed by the next connection)",
                ),
                None => {}
            },
            "idle_timeout"
            | "freeze_timeout"
            | "connection_idle_timeout"
            | "start_timeout"
            | "stop_timeout"
            | "connect_timeout"
            | "proxy_header_timeout" => self.timeouts(c, key, kloc, val),
            "max_connections" | "max_connections_per_source" | "backlog" | "pipe_size" => {
                self.limits(c, key, kloc, val)
            }
            "proxy_protocol" | "accept_proxy_protocol" => self.proxy(c, key, kloc, val),
            "socket_mode" | "socket_user" | "socket_group" => self.unix(c, key, kloc, val),
            "target" => self.target = super::target::parse(c, kloc, val),
            other => {
                let hint = match crate::directives::suggest(other, KEYS) {
                    Some(s) => format!("did you mean {s}?"),
                    None => format!("a socket takes: {}", KEYS.join(", ")),
                };
                c.err(kloc, other, format!("unknown key '{other}'"), &hint);
            }
        }
    }

    fn addresses(&mut self, c: &mut Ctx<'_>, key: &str, kloc: Loc, val: &DeValue<'_>) {
        match key {
            "listen" => {
                for s in c.strings(kloc, key, val).unwrap_or_default() {
                    match Endpoint::parse(&s) {
                        Ok(e) => self.listen.push((e, c.source.at(kloc))),
                        Err(m) => c.err(kloc, key, m, ""),
                    }
                }
            }
            "backend" => {
                if let Some(s) = c.string(kloc, key, val) {
                    match Endpoint::parse(&s) {
                        Ok(e) => self.backend = Some(e),
                        Err(m) => c.err(kloc, key, m, ""),
                    }
                }
            }
            "mode" => match c.string(kloc, key, val).as_deref() {
                Some("proxy") => self.mode = Mode::Proxy,
                Some("pass") => self.mode = Mode::Pass,
                Some("per-connection") => self.mode = Mode::PerConnection,
                Some(o) => c.err(
                    kloc,
                    key,
                    format!("'{o}' is not a mode"),
                    "use proxy, pass or per-connection",
                ),
                None => {}
            },
            _ => match c.string(kloc, key, val).as_deref() {
                Some("connect") => self.ready = Ready::Connect,
                Some("notify") => self.ready = Ready::Notify,
                Some(o) => c.err(
                    kloc,
                    key,
                    format!("'{o}' is not a readiness check"),
                    "use connect (the backend accepts a connection) or notify (READY=1 on $NOTIFY_SOCKET)",
                ),
                None => {}
            },
        }
    }

    fn timeouts(&mut self, c: &mut Ctx<'_>, key: &str, kloc: Loc, val: &DeValue<'_>) {
        let Some(d) = c.duration(kloc, key, val) else {
            return;
        };
        match (key, d) {
            ("idle_timeout", d) => self.idle_timeout = d,
            ("freeze_timeout", None) => self.freeze_timeout = None,
            ("freeze_timeout", Some(d)) if !d.is_zero() => self.freeze_timeout = Some(d),
            ("connection_idle_timeout", None) => self.connection_idle_timeout = Some(None),
            ("connection_idle_timeout", Some(d)) if !d.is_zero() => {
                self.connection_idle_timeout = Some(Some(d))
            }
            ("proxy_header_timeout", Some(d)) if !d.is_zero() => self.proxy_header_timeout = d,
            ("start_timeout", Some(d)) if !d.is_zero() => self.start_timeout = d,
            ("stop_timeout", Some(d)) if !d.is_zero() => self.stop_timeout = d,
            ("connect_timeout", Some(d)) if !d.is_zero() => self.connect_timeout = d,
            ("connection_idle_timeout" | "freeze_timeout", _) => c.err(
                kloc,
                key,
                format!("{key} must be a time span above 0, or \"infinity\""),
                "write e.g. \"1h\"; \"infinity\" keeps idle connections open for ever",
            ),
            _ => c.err(
                kloc,
                key,
                format!("{key} must be a finite time span above 0"),
                "write e.g. \"10s\"",
            ),
        }
    }

    fn limits(&mut self, c: &mut Ctx<'_>, key: &str, kloc: Loc, val: &DeValue<'_>) {
        match key {
            "max_connections" => self.max_connections = c.count(kloc, key, val, 1, 1 << 20),
            "max_connections_per_source" => {
                self.max_connections_per_source = c.count(kloc, key, val, 1, 1 << 20)
            }
            "backlog" => {
                if let Some(n) = c.count(kloc, key, val, 1, 65535) {
                    self.backlog = n as u32
                }
            }
            _ => {
                let s = match val {
                    DeValue::Integer(i) => Some(i.as_str().to_string()),
                    DeValue::String(s) => Some(s.to_string()),
                    _ => None,
                };
                match s.map(|s| parse_size(&s, 1024)) {
                    Some(Ok(n)) if (4096..=1 << 30).contains(&n) => self.pipe_size = Some(n),
                    _ => c.err(
                        kloc,
                        key,
                        "pipe_size must be a size from 4K to 1G".into(),
                        "write e.g. \"1M\"; /proc/sys/fs/pipe-max-size caps it for unprivileged users",
                    ),
                }
            }
        }
    }

    fn proxy(&mut self, c: &mut Ctx<'_>, key: &str, kloc: Loc, val: &DeValue<'_>) {
        match (key, val) {
            ("proxy_protocol", DeValue::Boolean(false)) => self.proxy_protocol = None,
            ("proxy_protocol", DeValue::String(s)) if s == "v1" => {
                self.proxy_protocol = Some(ProxyVersion::V1)
            }
            ("proxy_protocol", DeValue::String(s)) if s == "v2" => {
                self.proxy_protocol = Some(ProxyVersion::V2)
            }
            ("proxy_protocol", _) => c.err(
                kloc,
                key,
                "proxy_protocol must be \"v1\", \"v2\" or false".into(),
                "it is the PROXY protocol version bulkhead sends to the target",
            ),
            (_, DeValue::Boolean(b)) => self.accept_proxy_protocol = *b,
            _ => c.err(
                kloc,
                key,
                "accept_proxy_protocol must be true or false".into(),
                "",
            ),
        }
    }

    fn unix(&mut self, c: &mut Ctx<'_>, key: &str, kloc: Loc, val: &DeValue<'_>) {
        match key {
            "socket_user" => self.socket_user = c.string(kloc, key, val),
            "socket_group" => self.socket_group = c.string(kloc, key, val),
            _ => {
                let s = match val {
                    DeValue::String(s) => Some(s.to_string()),
                    DeValue::Integer(i) => Some(i.as_str().to_string()),
                    _ => None,
                };
                match s.and_then(|s| u32::from_str_radix(&s, 8).ok()) {
                    Some(m) if m <= 0o7777 => self.socket_mode = Some(m),
                    _ => c.err(
                        kloc,
                        key,
                        "socket_mode must be an octal mode".into(),
                        "write it as systemd's SocketMode=, e.g. \"0660\"",
                    ),
                }
            }
        }
    }

    /// max_connections, written or by default (64 per-connection sandboxes, 1024 else).
    pub fn max_connections(&self) -> u64 {
        self.max_connections.unwrap_or(match self.mode {
            Mode::PerConnection => 64,
            _ => 1024,
        })
    }

    /// max_connections_per_source, written or by default: a quarter of max_connections, so
    /// that one client (address, IPv6 /64 or local user) cannot take every slot.
    pub fn max_connections_per_source(&self) -> u64 {
        self.max_connections_per_source
            .unwrap_or((self.max_connections() / 4).max(1))
    }

    /// The checked socket (None when the target is missing; that was said already).
    pub fn finish(self) -> Option<SocketSpec> {
        let max_connections = self.max_connections() as u32;
        let max_connections_per_source = self.max_connections_per_source() as u32;
        // A UDP flow has no end of its own: it is forgotten after 30 s without datagrams,
        // as conntrack's UDP timeout; a stream connection after an hour.
        let udp = self.listen.iter().any(|(e, _)| !e.is_stream());
        let connection_idle_timeout = self
            .connection_idle_timeout
            .unwrap_or(Some(Duration::from_secs(if udp { 30 } else { 3600 })));
        // A booted system says when it is up (READY=1 from its systemd), as nspawn's
        // --notify-ready: the backend's port may open before the system has started.
        let booted = self.target.as_ref().is_some_and(|t| t.boot);
        let ready = match self.seen.contains_key("ready") || !booted {
            true => self.ready,
            false => Ready::Notify,
        };
        Some(SocketSpec {
            name: self.name,
            loc: self.loc,
            listen: self.listen,
            mode: self.mode,
            backend: self.backend,
            idle_timeout: self.idle_timeout,
            on_idle: self.on_idle,
            freeze_timeout: self.freeze_timeout,
            ready,
            start_timeout: self.start_timeout,
            stop_timeout: self.stop_timeout,
            connect_timeout: self.connect_timeout,
            max_connections,
            max_connections_per_source,
            connection_idle_timeout,
            proxy_header_timeout: self.proxy_header_timeout,
            pipe_size: self.pipe_size,
            backlog: self.backlog,
            proxy_protocol: self.proxy_protocol,
            accept_proxy_protocol: self.accept_proxy_protocol,
            socket_mode: self.socket_mode,
            socket_user: self.socket_user,
            socket_group: self.socket_group,
            target: self.target?,
        })
    }
}
