//! Per-socket families from the status files `serve` writes ([`SocketStatus`]): state,
//! connections (open, total, refused with why), bytes, cold starts and how long they took,
//! and how often each limit was hit.

use crate::activate::latency::StartLatency;
use crate::activate::state::SocketStatus;
use crate::exposition::text::{HistogramSample, Kind, Sample, Value, Writer};

/// Every state a socket can be in: one series each, 1 for the current one (as
/// kube-state-metrics writes enums), so a state that is never seen still has a 0 series.
pub const STATES: [&str; 7] = [
    "idle", "starting", "ready", "stopping", "freezing", "frozen", "backoff",
];

fn socket(s: &SocketStatus) -> Vec<(&'static str, String)> {
    vec![("socket", s.name.clone())]
}

fn each(sockets: &[SocketStatus], f: impl Fn(&SocketStatus) -> u64) -> Vec<Sample> {
    sockets
        .iter()
        .map(|s| (socket(s), Value::Int(f(s))))
        .collect()
}

/// One series per socket and value of the label `key`: `values` gives each value's figure.
fn labelled<L: ToString>(
    sockets: &[SocketStatus],
    key: &'static str,
    values: impl Fn(&SocketStatus) -> Vec<(L, u64)>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    for s in sockets {
        for (value, n) in values(s) {
            let mut l = socket(s);
            l.push((key, value.to_string()));
            out.push((l, Value::Int(n)));
        }
    }
    out
}

fn states(sockets: &[SocketStatus]) -> Vec<Sample> {
    labelled(sockets, "state", |s| {
        STATES.map(|st| (st, u64::from(s.state == st))).to_vec()
    })
}

/// Connections closed before they reached a target, by why.
fn refused(sockets: &[SocketStatus]) -> Vec<Sample> {
    labelled(sockets, "reason", |s| {
        let l = &s.limits;
        vec![
            ("target_unavailable", s.connections_refused),
            ("max_connections_per_source", l.per_source),
            (
                "proxy_header",
                l.proxy_header_timeouts + l.proxy_header_invalid,
            ),
        ]
    })
}

fn limits(sockets: &[SocketStatus]) -> Vec<Sample> {
    labelled(sockets, "limit", |s| {
        s.limits
            .all()
            .into_iter()
            .map(|(limit, _, n)| (limit, n))
            .collect()
    })
}

fn start_latency(sockets: &[SocketStatus]) -> Vec<HistogramSample> {
    sockets
        .iter()
        .map(|s| {
            let h: &StartLatency = &s.start_latency;
            (socket(s), h.cumulative(), h.sum_seconds)
        })
        .collect()
}

/// A family of the table: its name, kind, help, and its samples from the sockets.
type Family = (
    &'static str,
    Kind,
    &'static str,
    fn(&[SocketStatus]) -> Vec<Sample>,
);

/// The families of counts, in the order they are written.
const COUNTS: [Family; 11] = [
    (
        "bulkhead_socket_state",
        Kind::Gauge,
        "The socket's target state (1 for the current one): idle, starting, ready, stopping, freezing, frozen (on_idle = freeze), backoff (starts failed in a row).",
        states,
    ),
    (
        "bulkhead_socket_connections",
        Kind::Gauge,
        "Connections open now.",
        |ss| each(ss, |s| s.connections_active),
    ),
    (
        "bulkhead_socket_connections_total",
        Kind::Counter,
        "Connections accepted.",
        |ss| each(ss, |s| s.connections_total),
    ),
    (
        "bulkhead_socket_connections_refused_total",
        Kind::Counter,
        "Connections closed before reaching a target: target_unavailable (it could not start, or serve backs off), max_connections_per_source, proxy_header.",
        refused,
    ),
    (
        "bulkhead_socket_received_bytes_total",
        Kind::Counter,
        "Bytes from clients to the target.",
        |ss| each(ss, |s| s.bytes_in),
    ),
    (
        "bulkhead_socket_sent_bytes_total",
        Kind::Counter,
        "Bytes from the target to clients.",
        |ss| each(ss, |s| s.bytes_out),
    ),
    (
        "bulkhead_socket_cold_starts_total",
        Kind::Counter,
        "Times the target was started by a connection.",
        |ss| each(ss, |s| s.cold_starts),
    ),
    (
        "bulkhead_socket_freezes_total",
        Kind::Counter,
        "Times the idle target was frozen (on_idle = freeze).",
        |ss| each(ss, |s| s.freezes),
    ),
    (
        "bulkhead_socket_thaws_total",
        Kind::Counter,
        "Times the frozen target was thawed (by a connection, or to stop it).",
        |ss| each(ss, |s| s.thaws),
    ),
    (
        "bulkhead_socket_frozen_memory_bytes",
        Kind::Gauge,
        "While the target is frozen: its processes' resident memory when they froze (0 otherwise).",
        |ss| each(ss, |s| s.frozen_memory_bytes.unwrap_or(0)),
    ),
    (
        "bulkhead_socket_failed_starts_total",
        Kind::Counter,
        "Starts that failed (the target exited early or was never ready).",
        |ss| each(ss, |s| s.failed_starts),
    ),
];

/// Write the socket families.
pub fn write(w: &mut Writer, sockets: &[SocketStatus]) {
    for (name, kind, help, samples) in COUNTS {
        w.family(name, kind, help, &samples(sockets));
    }
    w.histogram(
        "bulkhead_socket_start_duration_seconds",
        "Time from a cold start to the target being ready.",
        &start_latency(sockets),
    );
    w.family(
        "bulkhead_socket_limit_hits_total",
        Kind::Counter,
        "Times a limit of the socket was hit, by plan key.",
        &limits(sockets),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_counters_and_histogram() {
        let mut h = StartLatency::default();
        h.record(0.02);
        let s = SocketStatus {
            name: "redis".into(),
            state: "ready".into(),
            connections_active: 2,
            connections_total: 7,
            connections_refused: 1,
            bytes_in: 10,
            bytes_out: 20,
            cold_starts: 1,
            start_latency: h,
            freezes: 2,
            thaws: 1,
            frozen_memory_bytes: Some(4096),
            ..Default::default()
        };
        let mut w = Writer::new();
        write(&mut w, &[s]);
        let t = w.finish();
        for want in [
            "bulkhead_socket_state{socket=\"redis\",state=\"ready\"} 1\n",
            "bulkhead_socket_state{socket=\"redis\",state=\"idle\"} 0\n",
            "bulkhead_socket_connections{socket=\"redis\"} 2\n",
            "bulkhead_socket_state{socket=\"redis\",state=\"frozen\"} 0\n",
            "bulkhead_socket_freezes_total{socket=\"redis\"} 2\n",
            "bulkhead_socket_thaws_total{socket=\"redis\"} 1\n",
            "bulkhead_socket_frozen_memory_bytes{socket=\"redis\"} 4096\n",
            "bulkhead_socket_connections_refused_total{socket=\"redis\",reason=\"target_unavailable\"} 1\n",
            "bulkhead_socket_start_duration_seconds_bucket{socket=\"redis\",le=\"0.01\"} 0\n",
            "bulkhead_socket_start_duration_seconds_bucket{socket=\"redis\",le=\"0.025\"} 1\n",
            "bulkhead_socket_start_duration_seconds_count{socket=\"redis\"} 1\n",
        ] {
            assert!(t.contains(want), "{want} not in\n{t}");
        }
    }
}
