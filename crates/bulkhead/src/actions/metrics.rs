//! `status --format prometheus` and `exporter`: one reading of every slice, served socket,
//! huge page pool and the guard, and `check`'s verdict (judged at most every
//! [`CHECK_EVERY`]) (no interval: the counters are the point, rates are
//! Prometheus's job), rendered by `exposition::render`, once or for every
//! `GET /metrics`.

use super::Context;
/// The exporter's limits on a client (the agent's health endpoint keeps the same).
pub use crate::exposition::http::Limits;
use crate::exposition::{self, http, Reading};
use bulkhead_cgroups::stats::{self, SliceStatus};
use bulkhead_cgroups::{Chosen, Placement};
use bulkhead_sys::error::{Error, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The exporter runs `check` (a scan of every process, apply's plan) at most this often;
/// scrapes in between show its last verdict.
pub const CHECK_EVERY: Duration = Duration::from_secs(15);

/// The last check: when (monotonic, Unix time) and what it found.
type Checked = Arc<Mutex<Option<(Instant, f64, Arc<crate::check::Report>)>>>;

/// Reads the slices that exist under the cgroup root, as `status` does, and `check`'s verdict.
pub struct Scraper {
    chosen: Chosen,
    cx: Context,
    checked: Checked,
    /// `check` runs on a thread of its own ([`Scraper::check_in_background`]).
    background: bool,
}

/// Choose the backend once; every scrape then only reads files.
pub fn scraper(cx: &Context) -> Result<Scraper> {
    Ok(Scraper {
        chosen: cx.choose()?,
        cx: cx.clone(),
        checked: Arc::new(Mutex::new(None)),
        background: false,
    })
}

impl Scraper {
    /// One reading of every slice.
    pub fn read_slices(&self) -> Vec<SliceStatus> {
        let fs = self.chosen.reader();
        self.chosen
            .slices()
            .iter()
            .map(|n| stats::read_slice(fs, n))
            .collect()
    }

    /// One reading of everything.
    pub fn read(&self) -> Reading {
        Reading {
            slices: self.read_slices(),
            sockets: crate::activate::state::read_all(),
            hugepages: bulkhead_sys::host::hugepages::pools(&Default::default()),
            guard: crate::guard::status(),
            protection: self.protection(),
        }
    }

    /// Judge `check` on a thread of its own, now and every [`CHECK_EVERY`]: a scrape serves
    /// the last verdict with the time it was judged and never waits for a walk of /proc
    /// (issue 40 #4: a host with 20,000 processes of another user timed scrapes out).
    pub fn check_in_background(&mut self) {
        let (cx, checked) = (self.cx.clone(), self.checked.clone());
        let spawned = std::thread::Builder::new()
            .name("check".into())
            .spawn(move || loop {
                let r = Arc::new(super::check::check(&cx));
                let at = bulkhead_sys::process::unix_now();
                *checked.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), at, r));
                std::thread::sleep(CHECK_EVERY);
            });
        self.background = spawned.is_ok();
    }

    /// `check`'s verdict and when it was judged: the background thread's last (None before
    /// its first), or judged here when the last is older than [`CHECK_EVERY`].
    fn protection(&self) -> Option<(Arc<crate::check::Report>, f64)> {
        let mut last = self.checked.lock().unwrap_or_else(|p| p.into_inner());
        if self.background {
            return last.as_ref().map(|(_, at, r)| (r.clone(), *at));
        }
        if let Some((when, at, r)) = last.as_ref() {
            if when.elapsed() < CHECK_EVERY {
                return Some((r.clone(), *at));
            }
        }
        let r = Arc::new(super::check::check(&self.cx));
        let at = bulkhead_sys::process::unix_now();
        *last = Some((Instant::now(), at, r.clone()));
        Some((r, at))
    }

    /// The exposition of one reading.
    pub fn render(&self) -> String {
        exposition::render(&self.read())
    }
}

/// An exporter bound to its address, not yet serving.
pub struct Exporter {
    listener: std::net::TcpListener,
    scraper: Scraper,
}

/// Bind `addr` (e.g. 127.0.0.1:9649; port 0 picks a free one).
pub fn exporter(cx: &Context, addr: &str) -> Result<Exporter> {
    let parsed: SocketAddr = addr.parse().map_err(|e| {
        Error::invalid(bulkhead_sys::Diagnostic::error(format!(
            "--listen {addr}: not an address:port ({e})"
        )))
    })?;
    let scraper = scraper(cx)?;
    let listener = std::net::TcpListener::bind(parsed)
        .map_err(|e| Error::failed(format!("cannot listen on {addr}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::failed(e.to_string()))?;
    Ok(Exporter { listener, scraper })
}

impl Exporter {
    /// The address it listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| Error::failed(e.to_string()))
    }

    /// Answer `GET /metrics` until SIGTERM or SIGINT.
    pub fn run(self) -> Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            // One render at a time (the page is shared), and room for a second.
            .max_blocking_threads(2)
            .build()
            .map_err(|e| Error::failed(format!("cannot start the event loop: {e}")))?;
        let mut scraper = self.scraper;
        scraper.check_in_background();
        let scraper = Arc::new(scraper);
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(self.listener)
                .map_err(|e| Error::failed(e.to_string()))?;
            let fail = |e: std::io::Error| Error::failed(e.to_string());
            let mut term = signal(SignalKind::terminate()).map_err(fail)?;
            let mut int = signal(SignalKind::interrupt()).map_err(fail)?;
            let render = Arc::new(move || scraper.render());
            tokio::select! {
                _ = http::serve(listener, http::Limits::default(), render) => {}
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            Ok(())
        })
    }
}
