//! A RESP (Redis protocol) load generator.
//!
//! It speaks RESP2 directly over tokio TCP sockets: `GET key:N` and `SET key:N <value>` with the
//! keys drawn uniformly from `key:0 .. key:{keys-1}`, and the replies parsed by hand (simple
//! strings, errors, integers, bulk strings including nil, arrays).
//!
//! Two modes:
//!
//! - **closed loop** (`rate: None`): every connection sends its next request as soon as the reply
//!   to the previous one arrived. Measures what the server can do, but a stalled server also
//!   stalls the load, so a stall shows up as a handful of slow requests only.
//! - **open loop** (`rate: Some(r)`): `r` requests per second in total, scheduled at fixed
//!   intended times spread evenly over the connections (request `n` is due at `start + n / r`
//!   and goes to connection `n % C`). Requests are pipelined: a connection keeps sending on
//!   schedule while earlier replies are outstanding, and if it fell behind it sends the backlog
//!   at once. Latency is measured from the *intended* send time, so a server stall counts
//!   against every request that should have been sent during it (no coordinated omission).
//!   The schedule is kept by a dedicated thread (sleep precision ~50 µs) that wakes each
//!   connection when its next request falls due: tokio's own timer has 1 ms granularity, which
//!   would add up to 1 ms of client-made latency to every open-loop request.
//!
//! Only requests that complete inside the measured window (after the warm-up) count in `ops` and
//! in the latency histogram (microseconds, 1 µs .. 60 s, 3 significant digits). Error replies,
//! timed-out requests and requests lost with a broken connection count as `errors`. A request
//! that times out makes its connection reconnect; a connection that cannot reconnect retries
//! every 100 ms until the window ends. Every wait is bounded by the end of the window, so
//! [`run`] returns at `warmup + duration` plus a small grace even if the server hangs.
//!
//! [`preload`] fills the key space with pipelined `SET`s and [`wait_ready`] polls with `PING`
//! until the server answers.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::{LatencySummary, LoadResult};

mod resp;
pub(crate) mod stats;

use resp::{encode_get, encode_set, error_text, parse_reply, ReplyKind, SplitMix64};
pub(crate) use stats::Stats;
use stats::HIST_MAX_US;

/// How long [`run`] waits for its connections after the window ended before giving up on them.
const GRACE: Duration = Duration::from_millis(500);
/// Pause between reconnection attempts when the server is gone.
const RECONNECT_EVERY: Duration = Duration::from_millis(100);
/// Commands per write in [`preload`].
const PRELOAD_BATCH: u64 = 1000;
/// Connections used by [`preload`].
const PRELOAD_CONNS: u64 = 4;

/// What to run: see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    /// Concurrent connections.
    pub connections: usize,
    /// Load runs but is not measured.
    pub warmup: Duration,
    /// The measured window.
    pub duration: Duration,
    /// `None`: closed loop. `Some(r)`: open loop at `r` ops/s over all connections.
    pub rate: Option<u64>,
    /// Share of GETs, 0..=1; the rest are SETs.
    pub get_ratio: f64,
    /// Key space: `key:0 .. key:{keys-1}`, chosen uniformly at random.
    pub keys: u64,
    /// Bytes of each SET value.
    pub value_size: usize,
    /// Per-request timeout; a timed-out request is an error and its connection reconnects.
    pub timeout: Duration,
}

impl Default for LoadSpec {
    /// 127.0.0.1:6379, 20 connections, 2 s warm-up, 10 s window, closed loop, 90 % GETs,
    /// 100 000 keys, 128-byte values, 1 s timeout.
    fn default() -> Self {
        LoadSpec {
            addr: SocketAddr::from(([127, 0, 0, 1], 6379)),
            connections: 20,
            warmup: Duration::from_secs(2),
            duration: Duration::from_secs(10),
            rate: None,
            get_ratio: 0.9,
            keys: 100_000,
            value_size: 128,
            timeout: Duration::from_secs(1),
        }
    }
}

impl LoadSpec {
    /// Checks the spec; the error says which field is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.connections < 1 {
            return Err(format!(
                "invalid load spec: connections must be >= 1 (got {})",
                self.connections
            ));
        }
        if self.duration.is_zero() {
            return Err("invalid load spec: duration must be > 0".to_string());
        }
        if self.rate == Some(0) {
            return Err("invalid load spec: rate must be > 0 ops/s when given".to_string());
        }
        if !(0.0..=1.0).contains(&self.get_ratio) {
            return Err(format!(
                "invalid load spec: get_ratio must be within 0..=1 (got {})",
                self.get_ratio
            ));
        }
        if self.keys < 1 {
            return Err("invalid load spec: keys must be >= 1".to_string());
        }
        if self.timeout.is_zero() {
            return Err("invalid load spec: timeout must be > 0".to_string());
        }
        Ok(())
    }
}

/// Runs the load described by `spec` and blocks until done (`warmup + duration`, plus a little).
pub fn run(spec: &LoadSpec) -> Result<LoadResult, String> {
    run_with_progress(spec, &|_| {})
}

/// Like [`run`], calling `progress` about every 100 ms with the fraction of the run
/// (warm-up included) done so far, 0..=1; the last call is with 1.0.
pub fn run_with_progress(spec: &LoadSpec, progress: &dyn Fn(f64)) -> Result<LoadResult, String> {
    spec.validate()?;
    // One worker: on a small host a second one mostly spins and steals CPU from the server
    // (measured: 126k -> 160k op/s against local Redis on 2 CPUs).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build the tokio runtime: {e}"))?;
    let result = rt.block_on(run_async(spec, progress));
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

async fn run_async(spec: &LoadSpec, progress: &dyn Fn(f64)) -> Result<LoadResult, String> {
    // Connect everything first: a server that is not there is an error, not a run full of errors.
    let mut connecting = Vec::with_capacity(spec.connections);
    for _ in 0..spec.connections {
        connecting.push(tokio::spawn(connect(spec.addr, spec.timeout)));
    }
    let mut streams = Vec::with_capacity(spec.connections);
    for c in connecting {
        let stream = c
            .await
            .map_err(|e| format!("connecting to redis at {}: {e}", spec.addr))??;
        streams.push(stream);
    }

    let start = Instant::now();
    let measure_start = start + spec.warmup;
    let end = measure_start + spec.duration;
    let ctx = Arc::new(Ctx {
        addr: spec.addr,
        conns: spec.connections as u64,
        rate: spec.rate,
        get_ratio: spec.get_ratio,
        keys: spec.keys,
        value: value_bytes(spec.value_size),
        timeout: spec.timeout,
        start,
        measure_start,
        end,
    });
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5eed);
    // Open loop: a thread with a finer clock than tokio's (1 ms) says when requests fall due.
    let bells: Vec<Arc<Notify>> = match spec.rate {
        Some(_) => (0..spec.connections)
            .map(|_| Arc::new(Notify::new()))
            .collect(),
        None => Vec::new(),
    };
    let mut workers = Vec::with_capacity(streams.len());
    for (idx, stream) in streams.into_iter().enumerate() {
        let bell = bells.get(idx).cloned();
        let conn = Conn::new(idx as u64, stream, ctx.clone(), bell, seed);
        workers.push(tokio::spawn(conn.run()));
    }
    let ticker = spec.rate.map(|rate| {
        let (start, end) = (start.into_std(), end.into_std());
        tokio::task::spawn_blocking(move || tick(start, end, rate, &bells))
    });

    let total = (end - start).as_secs_f64();
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        progress(((now - start).as_secs_f64() / total).clamp(0.0, 1.0));
        sleep_until((now + Duration::from_millis(100)).min(end)).await;
    }

    let mut stats = Stats::new();
    let mut stopped = measure_start;
    for w in workers {
        // A panicked worker, or one that hung past the grace (cannot happen: all its waits are
        // bounded by the end of the window), loses its share; the rest still counts.
        if let Ok(Ok(s)) = timeout_at(end + GRACE, w).await {
            stopped = stopped.max(s.stopped);
            stats.merge(&s);
        }
    }
    if let Some(t) = ticker {
        let _ = timeout_at(end + GRACE, t).await;
    }
    progress(1.0);

    let duration_s = (stopped.min(end) - measure_start).as_secs_f64();
    Ok(summarize(
        &stats,
        spec.connections,
        spec.rate,
        duration_s,
        spec.duration,
    ))
}

/// A load run's report from its merged statistics: open loop when a rate was asked for.
pub(crate) fn summarize(
    stats: &Stats,
    connections: usize,
    rate: Option<u64>,
    duration_s: f64,
    window: Duration,
) -> LoadResult {
    let h = &stats.hist;
    let ms = |us: u64| us as f64 / 1000.0;
    let latency = if h.is_empty() {
        LatencySummary::default()
    } else {
        LatencySummary {
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    };
    LoadResult {
        mode: if rate.is_some() { "open" } else { "closed" }.to_string(),
        connections,
        target_rate: rate,
        ops: stats.ops,
        gets: stats.gets,
        sets: stats.sets,
        errors: stats.errors,
        duration_s,
        op_rate: if duration_s > 0.0 {
            stats.ops as f64 / duration_s
        } else {
            0.0
        },
        latency,
        seconds: seconds(stats, window),
    }
}

/// The whole seconds of the window (a last partial second is left out).
fn seconds(stats: &Stats, window: Duration) -> Vec<crate::SecondFigures> {
    let ms = |us: u64| us as f64 / 1000.0;
    stats
        .seconds
        .iter()
        .take(window.as_secs() as usize)
        .map(|s| crate::SecondFigures {
            ops: s.ops,
            errors: s.errors,
            p50_ms: if s.hist.is_empty() {
                0.0
            } else {
                ms(s.hist.value_at_quantile(0.5))
            },
            p99_ms: if s.hist.is_empty() {
                0.0
            } else {
                ms(s.hist.value_at_quantile(0.99))
            },
            max_ms: ms(s.hist.max()),
        })
        .collect()
}

/// The open-loop clock. Request `n` falls due at `start + n / rate` and belongs to connection
/// `n % C`: this rings that connection's bell at (or just after) that time, with a thread sleep,
/// about 50 µs late rather than tokio's up to 1 ms. A connection behind on its schedule catches
/// up on its own, so when the clock itself falls behind it rings each connection once and skips.
fn tick(start: std::time::Instant, end: std::time::Instant, rate: u64, bells: &[Arc<Notify>]) {
    let conns = bells.len() as u64;
    let due =
        |n: u64| start + Duration::from_nanos((n as u128 * 1_000_000_000 / rate as u128) as u64);
    let mut n = 0u64;
    loop {
        let now = std::time::Instant::now();
        let next = due(n);
        if next >= end || now >= end {
            return;
        }
        if next > now {
            std::thread::sleep(next - now);
        }
        let now = std::time::Instant::now();
        // Requests due by now: 0 ..= floor(elapsed * rate).
        let due_end = ((now - start).as_nanos() * rate as u128 / 1_000_000_000) as u64 + 1;
        for m in n..due_end.min(n + conns) {
            bells[(m % conns) as usize].notify_one();
        }
        n = due_end.max(n + 1);
    }
}

/// Sets every key `key:0 .. key:{keys-1}` to a value of `value_size` bytes, pipelined in batches
/// of 1000 commands over a few connections.
pub fn preload(addr: SocketAddr, keys: u64, value_size: usize) -> Result<(), String> {
    if keys == 0 {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build the tokio runtime: {e}"))?;
    // Generous: a local server takes about a microsecond per key.
    let limit = Duration::from_secs(30) + Duration::from_micros(keys.saturating_mul(20));
    let result = rt.block_on(async move {
        let deadline = Instant::now() + limit;
        let value: Arc<[u8]> = value_bytes(value_size).into();
        let conns = PRELOAD_CONNS.min(keys.div_ceil(PRELOAD_BATCH));
        let per_conn = keys.div_ceil(conns);
        let mut tasks = Vec::new();
        for c in 0..conns {
            let (lo, hi) = (c * per_conn, ((c + 1) * per_conn).min(keys));
            let value = value.clone();
            tasks.push(tokio::spawn(async move {
                match timeout_at(deadline, preload_range(addr, lo, hi, &value)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!(
                        "preloading redis at {addr}: not done after {limit:?}"
                    )),
                }
            }));
        }
        for t in tasks {
            t.await
                .map_err(|e| format!("preloading redis at {addr}: {e}"))??;
        }
        Ok(())
    });
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

async fn preload_range(addr: SocketAddr, lo: u64, hi: u64, value: &[u8]) -> Result<(), String> {
    let mut stream = connect(addr, Duration::from_secs(5)).await?;
    let (mut rd, mut wr) = stream.split();
    let io_err = |e: std::io::Error| format!("preloading redis at {addr}: {e}");
    let writer = async {
        let mut buf = Vec::with_capacity((PRELOAD_BATCH as usize) * (value.len() + 64));
        let mut k = lo;
        while k < hi {
            buf.clear();
            let batch_end = (k + PRELOAD_BATCH).min(hi);
            for key in k..batch_end {
                encode_set(&mut buf, key, value);
            }
            wr.write_all(&buf).await.map_err(io_err)?;
            k = batch_end;
        }
        wr.flush().await.map_err(io_err)?;
        Ok::<(), String>(())
    };
    let reader = async {
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut pos = 0;
        let mut left = hi - lo;
        while left > 0 {
            match parse_reply(&buf[pos..]) {
                Ok(Some(reply)) => {
                    if reply.kind == ReplyKind::Error {
                        return Err(format!(
                            "preloading redis at {addr}: SET failed: {}",
                            error_text(&buf[pos..pos + reply.len])
                        ));
                    }
                    pos += reply.len;
                    left -= 1;
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Err(format!("preloading redis at {addr}: {e}")),
            }
            compact(&mut buf, &mut pos);
            buf.reserve(64 * 1024);
            let n = rd.read_buf(&mut buf).await.map_err(io_err)?;
            if n == 0 {
                return Err(format!(
                    "preloading redis at {addr}: connection closed by the server"
                ));
            }
        }
        Ok(())
    };
    let (w, r) = tokio::join!(writer, reader);
    // A reader error explains a writer error (broken pipe), so report it first.
    r?;
    w
}

/// Polls the server with `PING` until it answers `+PONG`, for at most `timeout`.
pub fn wait_ready(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    let deadline = std::time::Instant::now() + timeout;
    let mut last_err;
    loop {
        match ping_once(addr, deadline) {
            Ok(()) => return Ok(()),
            Err(e) => last_err = e,
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return Err(format!(
                "redis at {addr} not ready after {timeout:?}: {last_err}"
            ));
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

fn ping_once(addr: SocketAddr, deadline: std::time::Instant) -> Result<(), String> {
    let left = |d: std::time::Instant| {
        d.saturating_duration_since(std::time::Instant::now())
            .max(Duration::from_millis(1))
    };
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, left(deadline)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(left(deadline)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"*1\r\n$4\r\nPING\r\n")
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(64);
    let mut chunk = [0u8; 256];
    loop {
        if let Some(reply) = parse_reply(&buf)? {
            let line = &buf[..reply.len];
            return if line == b"+PONG\r\n" {
                Ok(())
            } else {
                Err(format!(
                    "PING answered {:?}",
                    String::from_utf8_lossy(line).trim_end()
                ))
            };
        }
        s.set_read_timeout(Some(left(deadline)))
            .map_err(|e| e.to_string())?;
        let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed by the server".to_string());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, String> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(format!("cannot connect to redis at {addr}: {e}")),
        Err(_) => Err(format!(
            "cannot connect to redis at {addr}: timed out after {timeout:?}"
        )),
    }
}

/// The SET payload: printable, cheap, same for every key.
fn value_bytes(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

// ---------------------------------------------------------------------------------------------
// One connection's load loop.

/// What every connection shares.
struct Ctx {
    addr: SocketAddr,
    conns: u64,
    rate: Option<u64>,
    get_ratio: f64,
    keys: u64,
    value: Vec<u8>,
    timeout: Duration,
    start: Instant,
    measure_start: Instant,
    end: Instant,
}

impl Ctx {
    fn in_window(&self, t: Instant) -> bool {
        t >= self.measure_start && t <= self.end
    }

    /// The second of the measured window `t` falls in.
    fn second(&self, t: Instant) -> usize {
        t.saturating_duration_since(self.measure_start).as_secs() as usize
    }
}

/// A request on the wire, waiting for its reply.
struct Pending {
    /// When it should have been sent: latency counts from here.
    intended: Instant,
    /// When it was actually handed to the socket: the timeout counts from here.
    sent: Instant,
    get: bool,
}

/// Why a connection has to be re-established.
enum Broken {
    Closed,
    Io,
    Protocol,
    TimedOut,
}

struct Conn {
    idx: u64,
    ctx: Arc<Ctx>,
    rng: SplitMix64,
    stream: Option<TcpStream>,
    rbuf: Vec<u8>,
    rpos: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    queue: VecDeque<Pending>,
    /// Open loop: the number of this connection's next request (global request `idx + k * C`).
    k: u64,
    next_intended: Instant,
    /// Open loop: rung by [`tick`] when a request of this connection falls due.
    bell: Option<Arc<Notify>>,
    stats: Stats,
}

impl Conn {
    fn new(
        idx: u64,
        stream: TcpStream,
        ctx: Arc<Ctx>,
        bell: Option<Arc<Notify>>,
        seed: u64,
    ) -> Self {
        let mut conn = Conn {
            idx,
            bell,
            rng: SplitMix64::new(seed ^ idx.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            stream: Some(stream),
            rbuf: Vec::with_capacity(16 * 1024),
            rpos: 0,
            wbuf: Vec::with_capacity(4 * 1024),
            wpos: 0,
            queue: VecDeque::with_capacity(64),
            k: 0,
            next_intended: ctx.start,
            stats: Stats::new(),
            ctx,
        };
        conn.next_intended = conn.intended(0);
        conn
    }

    /// Intended send time of this connection's `k`-th request (open loop).
    fn intended(&self, k: u64) -> Instant {
        let rate = self.ctx.rate.unwrap_or(1) as u128;
        let n = (self.idx + k * self.ctx.conns) as u128;
        let nanos = n * 1_000_000_000 / rate;
        self.ctx.start + Duration::from_nanos(nanos.min(u64::MAX as u128) as u64)
    }

    fn advance_schedule(&mut self) {
        self.k += 1;
        self.next_intended = self.intended(self.k);
    }

    fn error_at(&mut self, t: Instant, n: u64) {
        if self.ctx.in_window(t) {
            self.stats.error(self.ctx.second(t), n);
        }
    }

    /// Encodes the next request (GET or SET on a random key) and queues it as pending.
    fn enqueue(&mut self, intended: Instant, sent: Instant) {
        let get = self.rng.next_f64() < self.ctx.get_ratio;
        let key = self.rng.below(self.ctx.keys);
        if get {
            encode_get(&mut self.wbuf, key);
        } else {
            encode_set(&mut self.wbuf, key, &self.ctx.value);
        }
        self.queue.push_back(Pending {
            intended,
            sent,
            get,
        });
    }

    async fn run(mut self) -> Stats {
        let end = self.ctx.end;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let Some(stream) = self.stream.take() else {
                self.stream = self.reconnect().await;
                if self.stream.is_none() {
                    break; // the window ended while the server was gone
                }
                continue;
            };
            match self.step(&stream, now).await {
                Ok(()) => self.stream = Some(stream),
                Err(why) => {
                    drop(stream);
                    self.broken(why);
                }
            }
        }
        self.stats.stopped = Instant::now().min(end);
        self.stats
    }

    /// One turn of the event loop: send what is due, wait for a reply, a due request, a timeout
    /// or the end of the window, and account for whatever replies came in.
    async fn step(&mut self, stream: &TcpStream, now: Instant) -> Result<(), Broken> {
        let (open, end, timeout) = (self.ctx.rate.is_some(), self.ctx.end, self.ctx.timeout);
        // 1. What is due.
        if open {
            while self.next_intended <= now {
                self.enqueue(self.next_intended, now);
                self.advance_schedule();
            }
        } else if self.queue.is_empty() {
            self.enqueue(now, now);
        }
        // 2. Send without blocking; what the socket does not take waits for writability.
        self.flush(stream)?;
        // 3. Timeout of the oldest request.
        let mut wake = end;
        if let Some(front) = self.queue.front() {
            let deadline = front.sent + timeout;
            if now >= deadline {
                return Err(Broken::TimedOut);
            }
            wake = wake.min(deadline);
        }
        if open {
            // The bell should ring first; tokio's coarser timer is the fallback.
            wake = wake.min(self.next_intended + Duration::from_millis(2));
        }
        let bell = async {
            match &self.bell {
                Some(b) => b.notified().await,
                None => std::future::pending().await,
            }
        };
        // 4. Wait.
        let interest = if self.wpos < self.wbuf.len() {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        tokio::select! {
            biased;
            ready = stream.ready(interest) => {
                let ready = ready.map_err(|_| Broken::Io)?;
                if ready.is_readable() || ready.is_read_closed() {
                    self.read(stream)?;
                }
                if ready.is_writable() {
                    self.flush(stream)?;
                }
            }
            _ = bell => {}
            _ = sleep_until(wake) => {}
        }
        Ok(())
    }

    fn flush(&mut self, stream: &TcpStream) -> Result<(), Broken> {
        while self.wpos < self.wbuf.len() {
            match stream.try_write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(Broken::Closed),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Broken::Io),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        Ok(())
    }

    fn read(&mut self, stream: &TcpStream) -> Result<(), Broken> {
        compact(&mut self.rbuf, &mut self.rpos);
        self.rbuf.reserve(16 * 1024);
        match stream.try_read_buf(&mut self.rbuf) {
            Ok(0) => return Err(Broken::Closed),
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::Interrupted =>
            {
                return Ok(())
            }
            Err(_) => return Err(Broken::Io),
        }
        let done = Instant::now();
        let counted = self.ctx.in_window(done);
        loop {
            let reply = match parse_reply(&self.rbuf[self.rpos..]) {
                Ok(Some(reply)) => reply,
                Ok(None) => break,
                Err(_) => return Err(Broken::Protocol),
            };
            self.rpos += reply.len;
            // A reply nobody asked for: the stream is out of step.
            let p = self.queue.pop_front().ok_or(Broken::Protocol)?;
            if !counted {
                continue;
            }
            let sec = self.ctx.second(done);
            if reply.kind == ReplyKind::Error {
                self.stats.error(sec, 1);
                continue;
            }
            let us = (done - p.intended).as_micros().min(HIST_MAX_US as u128) as u64;
            self.stats.record(sec, us, p.get);
        }
        Ok(())
    }

    /// The connection broke: everything in flight is lost.
    fn broken(&mut self, why: Broken) {
        let now = Instant::now();
        let lost = self.queue.len() as u64;
        let lost = match why {
            // The timed-out request itself, plus the ones behind it.
            Broken::TimedOut => lost.max(1),
            Broken::Closed | Broken::Io | Broken::Protocol => lost,
        };
        self.error_at(now, lost);
        self.queue.clear();
        self.rbuf.clear();
        self.rpos = 0;
        self.wbuf.clear();
        self.wpos = 0;
    }

    /// Reconnects, retrying every 100 ms until the end of the window (then `None`).
    /// While the server cannot be reached, each failed attempt (closed loop) or each request
    /// that fell due (open loop) is an error.
    async fn reconnect(&mut self) -> Option<TcpStream> {
        let ctx = self.ctx.clone();
        loop {
            let now = Instant::now();
            if now >= ctx.end {
                return None;
            }
            let attempt = timeout_at(
                (now + ctx.timeout).min(ctx.end),
                TcpStream::connect(ctx.addr),
            );
            if let Ok(Ok(s)) = attempt.await {
                let _ = s.set_nodelay(true);
                return Some(s);
            }
            let now = Instant::now();
            if ctx.rate.is_some() {
                while self.next_intended <= now {
                    let t = self.next_intended;
                    self.error_at(t, 1);
                    self.advance_schedule();
                }
            } else {
                self.error_at(now, 1);
            }
            sleep_until((now + RECONNECT_EVERY).min(ctx.end)).await;
        }
    }
}

/// Drops the consumed prefix of a read buffer.
fn compact(buf: &mut Vec<u8>, pos: &mut usize) {
    if *pos == buf.len() {
        buf.clear();
        *pos = 0;
    } else if *pos > 0 && *pos >= buf.len() / 2 {
        buf.drain(..*pos);
        *pos = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_specs() {
        assert!(LoadSpec::default().validate().is_ok());
        let bad = [
            LoadSpec {
                connections: 0,
                ..LoadSpec::default()
            },
            LoadSpec {
                duration: Duration::ZERO,
                ..LoadSpec::default()
            },
            LoadSpec {
                rate: Some(0),
                ..LoadSpec::default()
            },
            LoadSpec {
                get_ratio: f64::NAN,
                ..LoadSpec::default()
            },
            LoadSpec {
                keys: 0,
                ..LoadSpec::default()
            },
        ];
        for spec in bad {
            assert!(spec.validate().is_err(), "{spec:?}");
        }
    }
}
