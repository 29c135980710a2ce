//! A small HTTP/1.x server for `GET /metrics`, for untrusted clients. Every limit has a
//! default ([`Limits`]): connections in all (more wait in the kernel's listen backlog, in
//! order, so renewing connections cannot starve a scraper) and per client (an IPv4 address,
//! an IPv6 /64, or for a connection from this host the local user that made it, as the
//! kernel's socket table says; more are closed at once); a short deadline for the request
//! head (slowloris) and one for the whole exchange; a request head of at most
//! [`Limits::request_bytes`]; one request per connection. Concurrent scrapes share one
//! rendered page for [`Limits::fresh_for`] (`cache`), so a flood of scrapes costs copies,
//! not renders. Any bytes at all give an answer or a closed connection, never a panic. Only
//! `/metrics` exists (404 elsewhere), and only GET and HEAD (405 otherwise).

use super::cache::Page;
use super::served::Counters;
use crate::activate::sources::{Source, Sources};
use crate::exposition::CONTENT_TYPE;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more wait in the listen backlog.
    pub connections: usize,
    /// Connections at once from one client; more are closed at once.
    pub per_source: u32,
    pub request_bytes: usize,
    /// From accept to the end of the request head.
    pub head_timeout: Duration,
    /// From accept to the last byte written.
    pub timeout: Duration,
    /// How long one rendered page answers every scrape.
    pub fresh_for: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 64,
            per_source: 4,
            request_bytes: 8192,
            head_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
            fresh_for: Duration::from_secs(1),
        }
    }
}

/// What a request head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The exposition; `head_only` for HEAD.
    Metrics {
        head_only: bool,
    },
    NotFound,
    MethodNotAllowed,
    BadRequest,
    TooLarge,
}

/// Route a request head (the bytes up to its blank line). Pure.
pub fn route(head: &[u8]) -> Route {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let Ok(line) = std::str::from_utf8(&head[..line_end]) else {
        return Route::BadRequest;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !(version == "HTTP/1.1" || version == "HTTP/1.0") || !target.starts_with('/') {
        return Route::BadRequest;
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return Route::NotFound;
    }
    match method {
        "GET" => Route::Metrics { head_only: false },
        "HEAD" => Route::Metrics { head_only: true },
        _ => Route::MethodNotAllowed,
    }
}

/// The whole response for a route (`body` is the exposition, used for Metrics only).
pub fn response(r: Route, body: &str) -> Vec<u8> {
    let (status, ctype, text, allow) = match r {
        Route::Metrics { .. } => ("200 OK", CONTENT_TYPE, body, false),
        Route::NotFound => (
            "404 Not Found",
            "text/plain",
            "not found: try /metrics\n",
            false,
        ),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain",
            "GET or HEAD\n",
            true,
        ),
        Route::BadRequest => ("400 Bad Request", "text/plain", "bad request\n", false),
        Route::TooLarge => (
            "431 Request Header Fields Too Large",
            "text/plain",
            "request too large\n",
            false,
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        text.len(),
        if allow { "Allow: GET, HEAD\r\n" } else { "" }
    )
    .into_bytes();
    if r != (Route::Metrics { head_only: true }) {
        out.extend_from_slice(text.as_bytes());
    }
    out
}

/// Read a request head: up to the blank line, `limit` bytes at most. None: the client
/// closed first or the read failed.
async fn read_head(s: &mut TcpStream, limit: usize) -> Option<Result<Vec<u8>, ()>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = s.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
        let from = head.len().saturating_sub(n + 3);
        if head[from..].windows(4).any(|w| w == b"\r\n\r\n")
            || head[from..].windows(2).any(|w| w == b"\n\n")
        {
            return Some(Ok(head));
        }
        if head.len() > limit {
            return Some(Err(()));
        }
    }
}

/// The client a connection counts against: for a connection from this host, the local user
/// that made it (any 127.0.0.0/8 or local address is one user's); else its address.
fn source_of(s: &TcpStream, peer: SocketAddr) -> Source {
    let local = s.local_addr().ok().and_then(|me| {
        bulkhead_sys::sockdiag::local_peer_uid(peer, me)
            .ok()
            .flatten()
    });
    match local {
        Some(uid) => Source::Uid(uid),
        None => Source::ip(peer.ip()),
    }
}

/// One exchange: the head within `head_timeout`, the answer within `timeout` of `t0`.
async fn exchange<F>(mut s: TcpStream, t0: Instant, limits: Limits, page: &Page<F>, n: &Counters)
where
    F: Fn() -> String + Send + Sync + 'static,
{
    let route =
        match tokio::time::timeout(limits.head_timeout, read_head(&mut s, limits.request_bytes))
            .await
        {
            Err(_) => {
                n.head_timeouts.fetch_add(1, Relaxed);
                return;
            }
            Ok(None) => return,
            Ok(Some(Err(()))) => {
                n.too_large.fetch_add(1, Relaxed);
                Route::TooLarge
            }
            Ok(Some(Ok(head))) => route(&head),
        };
    let left = limits.timeout.saturating_sub(t0.elapsed());
    let answer = async {
        let body = match route {
            Route::Metrics { .. } => {
                let mut text = page.get(n).await.as_str().to_owned();
                text.push_str(&n.render());
                text
            }
            _ => String::new(),
        };
        let _ = s.write_all(&response(route, &body)).await;
        let _ = s.shutdown().await;
    };
    match tokio::time::timeout(left, answer).await {
        Ok(()) => {
            n.requests.fetch_add(1, Relaxed);
        }
        Err(_) => {
            n.timeouts.fetch_add(1, Relaxed);
        }
    }
}

/// Answer connections on `listener` until the task is dropped.
pub async fn serve<F>(listener: TcpListener, limits: Limits, render: Arc<F>)
where
    F: Fn() -> String + Send + Sync + 'static,
{
    let page = Arc::new(Page::new(render, limits.fresh_for));
    let counters = Arc::new(Counters::default());
    let slots = Arc::new(Semaphore::new(limits.connections.max(1)));
    let sources = Sources::new(limits.per_source.max(1));
    loop {
        // At the limit, stop accepting: new clients wait in the backlog, first come first
        // served, and a slot frees within the head deadline at the latest.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            // Out of descriptors and the like: wait, never spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let t0 = Instant::now();
        // One client cannot take every slot: past its share it is closed at once.
        let Some(slot) = sources.take(source_of(&stream, peer)) else {
            counters.per_source.fetch_add(1, Relaxed);
            continue;
        };
        let (page, counters) = (page.clone(), counters.clone());
        tokio::spawn(async move {
            let _open = counters.open();
            exchange(stream, t0, limits, &page, &counters).await;
            drop((slot, permit));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn routes() {
        let m = Route::Metrics { head_only: false };
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), m);
        assert_eq!(route(b"GET /metrics?name[]=x HTTP/1.0\r\n\r\n"), m);
        assert_eq!(
            route(b"HEAD /metrics HTTP/1.1\r\n\r\n"),
            Route::Metrics { head_only: true }
        );
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"GET /metrics/x HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed
        );
        assert_eq!(route(b"GET /metrics HTTP/2\r\n\r\n"), Route::BadRequest);
        assert_eq!(route(b"GET  /metrics HTTP/1.1\r\n\r\n"), Route::BadRequest);
        assert_eq!(
            route(b"GET http://x/metrics HTTP/1.1\r\n\r\n"),
            Route::BadRequest
        );
        assert_eq!(
            route(b"\xff\xfe /metrics HTTP/1.1\r\n\r\n"),
            Route::BadRequest
        );
        assert_eq!(route(b""), Route::BadRequest);
    }

    #[test]
    fn responses() {
        let r = String::from_utf8(response(Route::Metrics { head_only: false }, "a 1\n")).unwrap();
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains("Content-Length: 4\r\n"));
        assert!(r.ends_with("\r\n\r\na 1\n"), "{r}");
        let h = String::from_utf8(response(Route::Metrics { head_only: true }, "a 1\n")).unwrap();
        assert!(
            h.contains("Content-Length: 4\r\n") && h.ends_with("\r\n\r\n"),
            "{h}"
        );
        let n = String::from_utf8(response(Route::MethodNotAllowed, "")).unwrap();
        assert!(n.starts_with("HTTP/1.1 405") && n.contains("Allow: GET, HEAD\r\n"));
    }

    proptest! {
        #[test]
        fn any_bytes_route_without_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let r = route(&b);
            let _ = response(r, "x");
        }
    }

    async fn exchange(addr: std::net::SocketAddr, send: &[u8]) -> String {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(send).await.unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn limits_hold_on_a_real_socket() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let limits = Limits {
            connections: 8,
            per_source: 2,
            request_bytes: 64,
            head_timeout: Duration::from_millis(300),
            timeout: Duration::from_secs(5),
            fresh_for: Duration::from_secs(1),
        };
        let server = tokio::spawn(serve(l, limits, Arc::new(|| "up 1\n".to_string())));
        let ok = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        assert!(
            ok.starts_with("HTTP/1.1 200") && ok.contains("\r\n\r\nup 1\n"),
            "{ok}"
        );
        assert!(ok.contains("bulkhead_exporter_renders_total 1\n"), "{ok}");
        let big = exchange(addr, &[b'A'; 200]).await;
        assert!(big.starts_with("HTTP/1.1 431"), "{big}");
        // A client that never finishes its head is cut off at the head deadline.
        let t = std::time::Instant::now();
        let slow = exchange(addr, b"GET /metrics HTTP/1.1\r\n").await;
        assert!(
            slow.is_empty() && t.elapsed() < Duration::from_secs(3),
            "{slow}"
        );
        assert!(exchange(addr, b"GET /x HTTP/1.1\r\n\r\n")
            .await
            .starts_with("HTTP/1.1 404"));
        // This user holds its two slots with idle connections: a third is closed at once.
        let _idle = (
            TcpStream::connect(addr).await.unwrap(),
            TcpStream::connect(addr).await.unwrap(),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = std::time::Instant::now();
        let refused = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        assert!(
            refused.is_empty() && t.elapsed() < Duration::from_millis(250),
            "{refused}"
        );
        drop(_idle);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let again = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        // The same page (within fresh_for), and the counters say what happened.
        assert!(
            again.contains("bulkhead_exporter_renders_total 1\n"),
            "{again}"
        );
        for reason in ["per_source", "head_timeout", "too_large"] {
            assert!(
                again.contains(&format!(
                    "bulkhead_exporter_connections_closed_total{{reason=\"{reason}\"}} 1\n"
                )),
                "{reason}: {again}"
            );
        }
        server.abort();
    }
}
