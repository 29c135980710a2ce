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
    loadgen::wait_ready(redis.addr, Duration::from_secs(10)).expect("redis-server ready");
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

/// Runs `spec` while the server sleeps 300 ms (DEBUG SLEEP) 500 ms into the measured window.
fn run_with_stall(spec: &LoadSpec) -> LoadResult {
    std::thread::scope(|scope| {
        let load = scope.spawn(|| loadgen::run(spec));
        std::thread::sleep(spec.warmup + Duration::from_millis(500));
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
    let addr = redis.addr;
    let (r, took) = std::thread::scope(|scope| {
        let load = scope.spawn(|| {
            let started = Instant::now();
            let r = loadgen::run(&s);
            (r, started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(300));
        // Hangs the server for longer than the whole run (the scope waits for the reply).
        scope.spawn(move || command(addr, &["DEBUG", "SLEEP", "2"]));
        let (r, took) = load.join().unwrap();
        (r.expect("run against a hung server"), took)
    });
    println!("hung server, run took {took:?}: {r:?}");
    assert!(took < Duration::from_millis(1100 + 800), "took {took:?}");
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
    let r = std::thread::scope(|scope| {
        let load = scope.spawn(|| loadgen::run(&s));
        std::thread::sleep(Duration::from_millis(500));
        redis.child.kill().unwrap();
        redis.child.wait().unwrap();
        load.join().unwrap().expect("run that loses its server")
    });
    let took = started.elapsed();
    println!("server gone mid-run after {took:?}: {r:?}");
    assert!(took < Duration::from_millis(1100 + 800), "took {took:?}");
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

    // Nothing listens on `addr` (the port was free a moment ago).
    let started = Instant::now();
    let err = loadgen::run(&base).expect_err("run against a closed port");
    assert!(err.contains(&addr.to_string()), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
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
