//! The load generator against a real `redis-server` (no mocks).
//!
//! Each test starts its own server on a free port. Without `redis-server` the tests print
//! "SKIPPED" and pass, except under `CI=true`, where they fail.

use bulkhead_testkit::free_port;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bulkhead_bench::loadgen::{self, LoadSpec};
use bulkhead_bench::LoadResult;

/// The tests measure rates and latencies on a small machine: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A `redis-server` child process, killed and reaped on drop (panics included).
struct Redis {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a server, or returns `None` (after saying so) when redis-server is not installed.
fn start_redis() -> Option<Redis> {
    let bin = bulkhead_testkit::prereq::program(
        &["redis-server", "/usr/bin/redis-server"],
        "redis-server is not installed (apt-get install redis-server)",
    )?;
    let port = free_port();
    let child = Command::new(bin)
        .args(["--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
        .args(["--enable-debug-command", "yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server");
    let redis = Redis {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    loadgen::wait_ready(redis.addr, Duration::from_secs(60)).expect("redis-server ready");
    Some(redis)
}

/// Sends one command over a fresh connection and returns the reply: the line without its
/// type byte and CRLF for simple strings, errors and integers, the payload for bulk strings.
fn command(addr: SocketAddr, args: &[&str]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect for a raw command");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let line = line.trim_end();
    match line.as_bytes().first() {
        Some(b'$') => {
            let n: usize = line[1..].parse().unwrap();
            let mut body = vec![0; n + 2];
            r.read_exact(&mut body).unwrap();
            body.truncate(n);
            String::from_utf8(body).unwrap()
        }
        Some(_) => line[1..].to_string(),
        None => panic!("no reply to {args:?}"),
    }
}

/// Sends one command over a fresh connection and returns the connection without reading
/// the reply.
fn send_only(addr: SocketAddr, args: &[&str]) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect for a raw command");
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).unwrap();
    s
}

fn total_commands(addr: SocketAddr) -> u64 {
    let info = command(addr, &["INFO", "stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .expect("total_commands_processed in INFO stats")
        .trim()
        .parse()
        .unwrap()
}

fn spec(addr: SocketAddr) -> LoadSpec {
    LoadSpec {
        addr,
        connections: 4,
        warmup: Duration::from_millis(200),
        duration: Duration::from_secs(1),
        rate: None,
        get_ratio: 0.9,
        keys: 10_000,
        value_size: 128,
        timeout: Duration::from_secs(2),
    }
}

fn assert_sane(r: &LoadResult) {
    let l = &r.latency;
    assert!(
        l.p50_ms <= l.p95_ms
            && l.p95_ms <= l.p99_ms
            && l.p99_ms <= l.p999_ms
            && l.p999_ms <= l.max_ms,
        "percentiles out of order: {l:?}"
    );
    assert!(l.mean_ms > 0.0 && l.mean_ms <= l.max_ms, "{l:?}");
    assert_eq!(r.gets + r.sets, r.ops, "{r:?}");
    assert!(
        (r.op_rate - r.ops as f64 / r.duration_s).abs() < 1e-6 * r.op_rate.max(1.0),
        "{r:?}"
    );
}

#[test]
fn preload_sets_every_key() {
    let _g = serial();
    let Some(redis) = start_redis() else { return };
    loadgen::preload(redis.addr, 10_000, 128).expect("preload");
    assert_eq!(command(redis.addr, &["DBSIZE"]), "10000");
    assert_eq!(command(redis.addr, &["STRLEN", "key:9999"]), "128");
    assert_eq!(command(redis.addr, &["EXISTS", "key:10000"]), "0");
}

#[test]
fn closed_loop() {
    let _g = serial();
    let Some(redis) = start_redis() else { return };
    loadgen::preload(redis.addr, 10_000, 128).expect("preload");
    let before = total_commands(redis.addr);
    let s = spec(redis.addr);
    let r = loadgen::run(&s).expect("closed-loop run");
    let after = total_commands(redis.addr);
    println!("closed loop: {r:?}");
    assert_eq!(r.mode, "closed");
    assert_eq!(r.target_rate, None);
    assert_eq!(r.connections, 4);
    assert!(r.ops > 1000, "{r:?}");
    assert_eq!(r.errors, 0, "{r:?}");
    assert!(
        (r.gets as f64 / r.ops as f64 - s.get_ratio).abs() < 0.05,
        "{r:?}"
    );
    assert!((r.duration_s - 1.0).abs() < 0.05, "{r:?}");
    assert_sane(&r);
    assert!(
        after - before >= r.ops,
        "the server processed {} commands, the load generator counted {} ops",
        after - before,
        r.ops
    );
}

#[test]
fn open_loop_holds_the_rate() {
    let _g = serial();
    let Some(redis) = start_redis() else { return };
    let s = LoadSpec {
        rate: Some(2000),
        duration: Duration::from_secs(2),
        ..spec(redis.addr)
    };
    let r = loadgen::run(&s).expect("open-loop run");
    println!("open loop: {r:?}");
    assert_eq!(r.mode, "open");
    assert_eq!(r.target_rate, Some(2000));
    assert_eq!(r.errors, 0, "{r:?}");
    assert!((r.op_rate - 2000.0).abs() <= 200.0, "{r:?}");
    assert_sane(&r);
}

/// Runs `spec` in a thread; returns its handle and a receiver that gets one message once
/// the run is `into` past its start (warm-up included), by the run's own clock (its progress
/// callback): what the test waits for before it acts on the server, instead of a pause the
/// run may not have got through (connecting, say) on a busy host.
fn run_until<'s>(
    scope: &'s std::thread::Scope<'s, '_>,
    spec: &'s LoadSpec,
    into: Duration,
) -> (
    std::thread::ScopedJoinHandle<'s, Result<LoadResult, String>>,
    std::sync::mpsc::Receiver<()>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let total = (spec.warmup + spec.duration).as_secs_f64();
    let at = into.as_secs_f64() / total;
    let load = scope.spawn(move || {
        let told = std::cell::Cell::new(false);
        loadgen::run_with_progress(spec, &|done| {
            if done >= at && !told.replace(true) {
                let _ = tx.send(());
            }
        })
    });
    (load, rx)
}

/// Wait (at most a minute) for [`run_until`]'s message.
fn reached(rx: &std::sync::mpsc::Receiver<()>) {
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the run never got there");
}

/// Runs `spec` while the server sleeps 300 ms (DEBUG SLEEP) 500 ms into the measured window.
fn run_with_stall(spec: &LoadSpec) -> LoadResult {
    std::thread::scope(|scope| {
        let (load, at) = run_until(scope, spec, spec.warmup + Duration::from_millis(500));
        reached(&at);
        assert_eq!(command(spec.addr, &["DEBUG", "SLEEP", "0.3"]), "OK");
        load.join().unwrap().expect("run with a stall")
    })
}

#[test]
fn open_loop_counts_a_stall_against_every_request_due_during_it() {
    let _g = serial();
    let Some(redis) = start_redis() else { return };
    let base = LoadSpec {
        duration: Duration::from_millis(1500),
        ..spec(redis.addr)
    };
    let open = run_with_stall(&LoadSpec {
        rate: Some(2000),
        ..base.clone()
    });
    let closed = run_with_stall(&base);
    println!("open loop with a 300 ms stall: {open:?}");
    println!("closed loop with a 300 ms stall: {closed:?}");
    assert_sane(&open);
    assert_sane(&closed);
    assert_eq!(open.errors, 0, "{open:?}");
    // ~600 of ~3000 requests were due during the stall: the p99 sees it, not just the max.
    assert!(open.latency.max_ms >= 250.0, "{open:?}");
    assert!(open.latency.p99_ms >= 200.0, "{open:?}");
    // The closed loop only had one request per connection waiting through the stall.
    assert!(closed.latency.max_ms >= 250.0, "{closed:?}");
    assert!(closed.latency.p99_ms < open.latency.p99_ms, "{closed:?}");
}

#[test]
fn a_hung_server_does_not_hang_the_run() {
    let _g = serial();
    let Some(redis) = start_redis() else { return };
    let s = LoadSpec {
        connections: 2,
        warmup: Duration::from_millis(100),
        duration: Duration::from_secs(1),
        timeout: Duration::from_millis(200),
        ..spec(redis.addr)
    };
    let started = Instant::now();
    let (r, hang) = std::thread::scope(|scope| {
        let (load, at) = run_until(scope, &s, Duration::from_millis(300));
        reached(&at);
        // Hangs the server for far longer than the whole run: a run that waited for it would
        // take a minute. Its reply is not read (the server is killed when the test ends).
        let hang = send_only(s.addr, &["DEBUG", "SLEEP", "60"]);
        (
            load.join().unwrap().expect("run against a hung server"),
            hang,
        )
    });
    let took = started.elapsed();
    drop(hang);
    println!("hung server, run took {took:?}: {r:?}");
    // warm-up + duration + a grace of 0.5 s by design (about 1.6 s); a run that waited for
    // the server would take 60 s. The bound leaves a busy host room.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(r.errors > 0, "{r:?}");
}

#[test]
fn a_server_that_goes_away_mid_run_counts_errors_and_the_run_still_ends() {
    let _g = serial();
    let Some(mut redis) = start_redis() else {
        return;
    };
    let s = LoadSpec {
        connections: 2,
        warmup: Duration::from_millis(100),
        duration: Duration::from_secs(1),
        ..spec(redis.addr)
    };
    let started = Instant::now();
    let addr = redis.addr;
    let r = std::thread::scope(|scope| {
        // Half a second in by the run's clock (past the 100 ms warm-up), and the server has
        // answered more in the window since: some ops count before it goes.
        let (load, at) = run_until(scope, &s, Duration::from_millis(500));
        reached(&at);
        // (Each INFO counts as a command too: `asked` of them.)
        let seen = total_commands(addr);
        let (t0, mut asked) = (Instant::now(), 1);
        while total_commands(addr) < seen + 100 + asked {
            asked += 1;
            assert!(t0.elapsed() < Duration::from_secs(60), "the load stopped");
            std::thread::sleep(Duration::from_millis(10));
        }
        redis.child.kill().unwrap();
        redis.child.wait().unwrap();
        load.join().unwrap().expect("run that loses its server")
    });
    let took = started.elapsed();
    println!("server gone mid-run after {took:?}: {r:?}");
    // The run ends at warm-up + duration + a grace of 0.5 s by design (about 1.6 s), not
    // later because its server is gone; the bound leaves a busy host room.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(r.ops > 0, "{r:?}");
    assert!(r.errors > 0, "{r:?}");
}

#[test]
fn bad_specs_and_closed_ports_are_errors() {
    let _g = serial();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let base = spec(addr);
    for (what, bad) in [
        (
            "connections",
            LoadSpec {
                connections: 0,
                ..base.clone()
            },
        ),
        (
            "rate",
            LoadSpec {
                rate: Some(0),
                ..base.clone()
            },
        ),
        (
            "get_ratio",
            LoadSpec {
                get_ratio: 1.5,
                ..base.clone()
            },
        ),
    ] {
        let err = loadgen::run(&bad).expect_err(what);
        assert!(err.contains(what), "{what}: {err}");
    }

    // Nothing listens on `addr` (the port was free a moment ago): said at once, not after
    // the request timeout or the end of the run (a minute each here, so that the bound below
    // tells them apart with room for a busy host).
    let started = Instant::now();
    let err = loadgen::run(&LoadSpec {
        duration: Duration::from_secs(60),
        timeout: Duration::from_secs(60),
        ..base.clone()
    })
    .expect_err("run against a closed port");
    assert!(err.contains(&addr.to_string()), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a refused connection is fast"
    );
    let err = loadgen::preload(addr, 10, 8).expect_err("preload against a closed port");
    assert!(err.contains(&addr.to_string()), "{err}");
    let err = loadgen::wait_ready(addr, Duration::from_millis(200))
        .expect_err("wait_ready against a closed port");
    assert!(err.contains(&addr.to_string()), "{err}");
}

/// `cargo test -p bulkhead-bench --release --test loadgen -- --ignored`: the preload a real
/// benchmark does (1M keys of 128 B) takes a few seconds.
#[test]
#[ignore = "loads a million keys (~200 MB in redis); run by hand"]
fn preload_a_million_keys_in_a_few_seconds() {
    let _g = serial();
    let Some(redis) = start_redis() else { return };
    let started = Instant::now();
    loadgen::preload(redis.addr, 1_000_000, 128).expect("preload");
    let took = started.elapsed();
    println!("preloaded 1M keys in {took:?}");
    assert_eq!(command(redis.addr, &["DBSIZE"]), "1000000");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}
