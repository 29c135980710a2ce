//! `--health-listen`: GET /healthz (the agent runs) and /readyz (its first pass is done), with
//! the exporter's limits (bulkhead::actions::metrics::Limits): a bounded request head, a
//! deadline per connection, a few connections at a time, one request per connection.

use bulkhead::actions::metrics::Limits;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// What a request head asks for: (status line, body). Pure.
pub fn route(head: &[u8], ready: bool) -> (&'static str, &'static str) {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let method = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    if method != b"GET" && method != b"HEAD" {
        return ("405 Method Not Allowed", "method not allowed\n");
    }
    match path {
        b"/healthz" => ("200 OK", "ok\n"),
        b"/readyz" if ready => ("200 OK", "ok\n"),
        b"/readyz" => ("503 Service Unavailable", "not synced yet\n"),
        _ => ("404 Not Found", "not found\n"),
    }
}

pub async fn serve(listener: TcpListener, ready: Arc<AtomicBool>) {
    let limits = Limits::default();
    let slots = Arc::new(Semaphore::new(limits.connections));
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            drop(conn);
            continue;
        };
        let ready = ready.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(limits.timeout, answer(conn, limits, &ready)).await;
            drop(permit);
        });
    }
}

async fn answer(mut conn: TcpStream, limits: Limits, ready: &AtomicBool) -> std::io::Result<()> {
    let mut buf = vec![0u8; limits.request_bytes];
    let mut n = 0;
    while n < buf.len() {
        let got = conn.read(&mut buf[n..]).await?;
        if got == 0 {
            break;
        }
        n += got;
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n")
            || buf[..n].windows(2).any(|w| w == b"\n\n")
        {
            break;
        }
    }
    let (status, body) = route(&buf[..n], ready.load(Ordering::Relaxed));
    let head_only = buf[..n].starts_with(b"HEAD ");
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        out.push_str(body);
    }
    conn.write_all(out.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn routes() {
        assert_eq!(route(b"GET /healthz HTTP/1.1\r\n\r\n", false).0, "200 OK");
        assert_eq!(
            route(b"GET /readyz HTTP/1.1\r\n\r\n", false).0,
            "503 Service Unavailable"
        );
        assert_eq!(route(b"GET /readyz HTTP/1.1\r\n\r\n", true).0, "200 OK");
        assert_eq!(
            route(b"POST /healthz HTTP/1.1\r\n\r\n", true).0,
            "405 Method Not Allowed"
        );
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\n\r\n", true).0,
            "404 Not Found"
        );
        for junk in [&b""[..], b"\xff\xfe", b"GET", b" / /", b"\n\n\n"] {
            let _ = route(junk, true);
        }
    }
}
