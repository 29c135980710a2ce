//! The rules across a socket's keys: what a mode needs, what fits together.

use super::keys::Draft;
use super::{Endpoint, Mode, Ready};
use crate::values::Ctx;

pub(super) fn check(c: &mut Ctx<'_>, d: &Draft) {
    if d.listen.is_empty() && !d.seen.contains_key("listen") {
        c.err(
            d.loc,
            "listen",
            "a socket needs at least one listen address".into(),
            "add listen = [\"127.0.0.1:8080\"]",
        );
    }
    mode_and_backend(c, d);
    if d.mode == Mode::PerConnection && d.listen.iter().any(|(e, _)| !e.is_stream()) {
        c.err(
            d.at("listen"),
            "listen",
            "per-connection mode needs stream (TCP or unix) listeners".into(),
            "use mode = \"pass\" to hand a UDP socket to the target",
        );
    }
    limits(c, d);
    if d.accept_proxy_protocol && d.mode != Mode::Proxy {
        c.err(
            d.at("accept_proxy_protocol"),
            "accept_proxy_protocol",
            "accept_proxy_protocol works in proxy mode only".into(),
            "",
        );
    }
    if (d.socket_mode.is_some() || d.socket_user.is_some() || d.socket_group.is_some())
        && !d.listen.iter().any(|(e, _)| matches!(e, Endpoint::Unix(_)))
    {
        c.err(
            d.at("socket_mode"),
            "socket_mode",
            "socket_mode, socket_user and socket_group apply to unix sockets, and this socket has none".into(),
            "add a unix:/PATH address to listen, or remove them",
        );
    }
    if d.target.as_ref().is_some_and(|t| t.boot) && d.mode != Mode::Proxy {
        c.err(
            d.at("mode"),
            "target.boot",
            "a booted target serves on its own ports, so it works in proxy mode only".into(),
            "set mode = \"proxy\" and backend = where the system's server listens (e.g. \"127.0.0.1:8000\")",
        );
    }
    on_idle(c, d);
    if d.target.is_none() && !d.seen.contains_key("target") {
        c.err(
            d.loc,
            "target",
            "a socket needs a target".into(),
            "add a [socket.NAME.target] table with command = [...] (and rootfs = ... for a sandbox)",
        );
    }
}

/// A target frozen when idle: serve must see the next connection to thaw it (proxy mode),
/// it must go idle at all, and it needs a slice to hold its freeze cell.
fn on_idle(c: &mut Ctx<'_>, d: &Draft) {
    use super::OnIdle;
    let at = d.at("on_idle");
    if d.on_idle == OnIdle::Stop {
        if d.seen.contains_key("freeze_timeout") {
            c.err(
                d.at("freeze_timeout"),
                "freeze_timeout",
                "freeze_timeout applies to a target frozen when idle, and this one is stopped"
                    .into(),
                "add on_idle = \"freeze\", or remove freeze_timeout",
            );
        }
        return;
    }
    if d.mode != Mode::Proxy {
        c.err(
            at,
            "on_idle",
            "on_idle = \"freeze\" works in proxy mode only: serve thaws the target when a connection comes, and in pass and per-connection mode the target takes the connections itself".into(),
            "set mode = \"proxy\" with a backend, or use on_idle = \"stop\"",
        );
    }
    if d.idle_timeout.is_none() {
        c.err(
            at,
            "on_idle",
            "on_idle = \"freeze\" with idle_timeout = \"infinity\": the target never goes idle"
                .into(),
            "give idle_timeout a time span (\"30s\")",
        );
    }
    if d.target.as_ref().is_some_and(|t| t.slice.is_none()) {
        c.err(
            at,
            "on_idle",
            "on_idle = \"freeze\" needs the target in a slice: its processes are frozen in a cgroup below the slice".into(),
            "add slice = \"NAME\" to the target (a [slice.NAME] of the plan)",
        );
    }
}

/// Proxy mode needs a backend of the listeners' kind (stream or datagram); the others take
/// none.
fn mode_and_backend(c: &mut Ctx<'_>, d: &Draft) {
    match (d.mode, &d.backend) {
        (Mode::Proxy, None) => c.err(
            d.at("mode"),
            "backend",
            "proxy mode needs a backend address".into(),
            "add backend = \"127.0.0.1:8000\" (where the target listens), or use mode = \"pass\"",
        ),
        (Mode::Pass | Mode::PerConnection, Some(_)) => c.err(
            d.at("backend"),
            "backend",
            format!(
                "backend is only used in proxy mode, and this socket is in {} mode",
                if d.mode == Mode::Pass {
                    "pass"
                } else {
                    "per-connection"
                }
            ),
            "remove backend, or set mode = \"proxy\"",
        ),
        _ => {}
    }
    let Some(b) = &d.backend else { return };
    if d.ready == Ready::Connect && !b.is_stream() {
        c.err(
            d.at("ready"),
            "ready",
            "ready = \"connect\" cannot check a UDP backend".into(),
            "use ready = \"notify\" and have the target send READY=1",
        );
    }
    let udp_listen = d.listen.iter().any(|(e, _)| !e.is_stream());
    if udp_listen == b.is_stream() || d.listen.iter().any(|(e, _)| e.is_stream() == udp_listen) {
        c.err(
            d.at("backend"),
            "backend",
            "a UDP listener needs a UDP backend, and a stream listener a stream backend".into(),
            "proxy UDP to udp:HOST:PORT and TCP or unix listeners to a TCP or unix backend; use two sockets for both",
        );
    }
}

/// The connection limits: a per-source cap within the total, only where bulkhead accepts,
/// and a PROXY header timeout only where a header is read.
fn limits(c: &mut Ctx<'_>, d: &Draft) {
    if let Some(per) = d.max_connections_per_source {
        if d.mode == Mode::Pass {
            c.err(
                d.at("max_connections_per_source"),
                "max_connections_per_source",
                "max_connections_per_source applies to connections bulkhead accepts, and in pass mode the target accepts them".into(),
                "remove it (limit connections in the target), or use mode = \"proxy\"",
            );
        } else if per > d.max_connections() {
            c.err(
                d.at("max_connections_per_source"),
                "max_connections_per_source",
                format!(
                    "max_connections_per_source ({per}) is more than max_connections ({})",
                    d.max_connections()
                ),
                "lower max_connections_per_source, or raise max_connections",
            );
        }
    }
    if d.seen.contains_key("proxy_header_timeout") && !d.accept_proxy_protocol {
        c.err(
            d.at("proxy_header_timeout"),
            "proxy_header_timeout",
            "proxy_header_timeout applies only with accept_proxy_protocol = true".into(),
            "remove it, or set accept_proxy_protocol = true",
        );
    }
}
