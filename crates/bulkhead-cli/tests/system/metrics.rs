//! The Prometheus exposition against this machine's real cgroups: `status --format
//! prometheus` and a running `bulkhead exporter` scraped over TCP, values checked against
//! the cgroup files, the text checked by `promtool check metrics`.

use crate::common;
use bulkhead_testkit::assert_has;
use bulkhead_testkit::prereq::missing;

use crate::common::{prerequisites, stderr, stdout, TestRoot};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const HELPER: &str = "db.slice/db-helper.slice";

/// Samples by series (`name{labels}`).
fn parse(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("line {l:?}"));
            (
                series.to_string(),
                v.parse().unwrap_or_else(|_| panic!("value in {l:?}")),
            )
        })
        .collect()
}

fn sample(m: &HashMap<String, f64>, series: &str) -> f64 {
    *m.get(series)
        .unwrap_or_else(|| panic!("no {series} in {:?}", m.keys().collect::<Vec<_>>()))
}

/// `promtool check metrics` on the text; a missing promtool fails in CI, skips elsewhere.
fn promtool(text: &str) {
    let Ok(mut c) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        missing("promtool check: no promtool (Debian package prometheus)");
        return;
    };
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "promtool: {}{}\n{text}",
        stdout(&o),
        stderr(&o)
    );
}

/// The slice's directory in a hierarchy of this machine.
fn dir_in(t: &TestRoot, mount: &std::path::Path) -> PathBuf {
    mount.join(t.cgroup.trim_start_matches('/')).join(HELPER)
}

/// CPU seconds of the helper slice as the kernel counts them: the unified cpu.stat where it
/// has usage_usec, else v1 cpuacct.usage.
fn cpu_seconds(t: &TestRoot) -> f64 {
    let unified = t.layout.unified.as_ref().and_then(|u| {
        let text = std::fs::read_to_string(dir_in(t, &u.mount).join("cpu.stat")).ok()?;
        let us: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))?
            .trim()
            .parse()
            .ok()?;
        Some(us as f64 / 1e6)
    });
    unified.unwrap_or_else(|| {
        let h = t.layout.cpuacct().expect("a cpuacct or unified hierarchy");
        let ns: u64 = common::read(&dir_in(t, &h.mount).join("cpuacct.usage"))
            .parse()
            .unwrap();
        ns as f64 / 1e9
    })
}

fn file_u64(t: &TestRoot, ctrl: &str, file: &str) -> Option<u64> {
    let h = t.layout.hierarchy(ctrl)?;
    std::fs::read_to_string(dir_in(t, &h.mount).join(file))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Check one exposition of the test root with the busy helper; `before` and `after` are
/// the kernel's CPU seconds read around the scrape.
fn check(t: &TestRoot, text: &str, before: f64, after: f64) {
    promtool(text);
    let m = parse(text);
    let s = |name: &str| format!("{name}{{slice=\"db-helper\"}}");
    let cpu = sample(&m, &s("bulkhead_slice_cpu_usage_seconds_total"));
    assert!(
        cpu >= before - 0.001 && cpu <= after + 0.001,
        "cpu {cpu} s not within the kernel's {before}..{after}"
    );
    assert!(cpu > 0.05, "a busy loop used CPU: {cpu}");
    assert_eq!(sample(&m, &s("bulkhead_slice_processes")), 1.0);
    if let Some(tasks) = file_u64(t, "pids", "pids.current") {
        assert_eq!(sample(&m, &s("bulkhead_slice_tasks")), tasks as f64);
    }
    assert_eq!(
        sample(&m, &s("bulkhead_slice_memory_max_bytes")),
        (1400u64 << 20) as f64
    );
    // Families of every HELP line once.
    for l in text.lines().filter(|l| l.starts_with("# HELP ")) {
        let name = l.split(' ').nth(2).unwrap();
        assert_eq!(
            text.matches(&format!("# HELP {name} ")).count(),
            1,
            "{name}"
        );
    }
    // What the layout cannot give is absent, not 0.
    let v2_memory = t
        .layout
        .hierarchy("memory")
        .is_some_and(|h| h.version == bulkhead::cgroup::Version::V2);
    assert_eq!(text.contains("event=\"high\""), v2_memory, "{text}");
    let psi = t
        .layout
        .unified
        .as_ref()
        .is_some_and(|u| dir_in(t, &u.mount).join("cpu.pressure").exists());
    assert_eq!(
        m.contains_key(
            "bulkhead_slice_pressure_seconds_total{slice=\"db-helper\",resource=\"cpu\",kind=\"some\"}"
        ),
        psi,
        "{text}"
    );
    if !psi {
        assert!(!text.contains("bulkhead_slice_pressure_seconds_total"));
    }
}

/// A process killed and reaped however the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP exchange: the whole response as text.
fn http(addr: SocketAddr, request: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request).unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn status_prometheus_and_exporter_match_the_cgroup_files() {
    let Some((_suite, t, p)) = crate::suite::planned(&crate::common::default_weighted(100)) else {
        return;
    };
    t.ok(&["-c", p, "apply", "-q"]);
    let busy = Killed(t.sh_in("db-helper", "while :; do :; done").spawn().unwrap());
    // In the slice (`run` joins it, then execs the shell) and past the CPU time `check`
    // expects of it.
    let comm = format!("/proc/{}/comm", busy.0.id());
    common::wait_for("the busy loop in the slice, busy", || {
        std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sh") && cpu_seconds(&t) > 0.1
    });

    // (a) one-shot, for the textfile collector.
    let before = cpu_seconds(&t);
    let o = t.run(&["status", "--format", "prometheus"]);
    let after = cpu_seconds(&t);
    assert!(o.status.success(), "{}", stderr(&o));
    check(&t, &stdout(&o), before, after);

    // (b) a real exporter process, scraped over TCP.
    let mut child = t
        .cmd()
        .args(["exporter", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = common::exporter::address(&mut child);
    let exporter = Killed(child);
    let before = cpu_seconds(&t);
    let r = http(addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n");
    let after = cpu_seconds(&t);
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(
        head.contains(&format!("Content-Length: {}\r\n", body.len())),
        "{head}"
    );
    check(&t, body, before, after);
    // The counter goes on: a second scrape after the shared page went stale (1 s) reads
    // afresh. The pause is a least age (a slow host only makes it older), not a wait for
    // something to happen; that is the kernel's counter passing the first scrape's.
    std::thread::sleep(Duration::from_millis(1200));
    let first = sample(
        &parse(body),
        "bulkhead_slice_cpu_usage_seconds_total{slice=\"db-helper\"}",
    );
    common::wait_for("the helper's CPU time past the first scrape", || {
        cpu_seconds(&t) > first
    });
    let again = parse(
        http(addr, b"GET /metrics HTTP/1.0\r\n\r\n")
            .split_once("\r\n\r\n")
            .unwrap()
            .1,
    );
    let series = "bulkhead_slice_cpu_usage_seconds_total{slice=\"db-helper\"}";
    assert!(sample(&again, series) > sample(&parse(body), series));

    let head_only = http(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(
        head_only.starts_with("HTTP/1.1 200") && head_only.ends_with("\r\n\r\n"),
        "{head_only}"
    );
    assert!(http(addr, b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(http(addr, b"GET /metricsx HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(http(addr, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    assert!(http(addr, b"\x00\xff garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    assert!(http(addr, &[b'a'; 9000]).starts_with("HTTP/1.1 431"));
    // Still serving after all that; SIGTERM ends it with status 0.
    assert!(http(addr, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    let mut exporter = exporter;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(exporter.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = exporter.0.wait().unwrap();
    assert!(st.success(), "exporter ended with {st}");
    drop(busy);
    t.destroy(p);
}

#[test]
fn exporter_refuses_a_bad_address() {
    let Some((_suite, t)) = crate::suite::rooted() else {
        return;
    };
    let o = t.run(&["exporter", "--listen", "localhost"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_has(&stderr(&o), "not an address:port");
}

/// Restores a huge page pool's size however the test ends.
struct Pool {
    file: PathBuf,
    was: String,
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.file, &self.was);
    }
}

fn sys_u64(p: &str) -> f64 {
    common::read(std::path::Path::new(p))
        .parse::<u64>()
        .unwrap() as f64
}

/// A served socket's counters, its cold starts' histogram and its refusals, and the huge
/// page pools, as a running `serve` and sysfs have them.
#[test]
fn sockets_and_huge_pages_match_serve_and_sysfs() {
    let _suite = crate::suite::shared();
    use crate::common::serve::{status, wait_for, Scratch, Serve};
    use bulkhead_testkit::free_port;
    if !prerequisites() {
        return;
    }
    let s = Scratch::new("metrics");
    let (web, broken) = (s.name("web"), s.name("broken"));
    let (port, backend, port2, backend2) = (free_port(), free_port(), free_port(), free_port());
    std::fs::create_dir_all(s.dir.join("www")).unwrap();
    std::fs::write(s.dir.join("www/index.html"), "hello\n").unwrap();
    let plan = s.write(
        "plan.toml",
        &format!(
            r#"
[socket.{web}]
listen = ["127.0.0.1:{port}"]
backend = "127.0.0.1:{backend}"
[socket.{web}.target]
command = ["/bin/busybox", "httpd", "-f", "-p", "127.0.0.1:{backend}", "-h", "{dir}/www"]

[socket.{broken}]
listen = ["127.0.0.1:{port2}"]
backend = "127.0.0.1:{backend2}"
[socket.{broken}.target]
command = ["/bin/false"]
"#,
            dir = s.dir.display()
        ),
    );
    let _serve = Serve::start(&plan, s.dir.join("serve.log"));
    for _ in 0..3 {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        assert!(out.contains("hello"), "{out}");
    }
    // The broken target exits at once: the client is closed, and counted as refused.
    let mut c = TcpStream::connect(("127.0.0.1", port2)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = c.read_to_end(&mut Vec::new());
    wait_for("the status files", || {
        status(&web)["connections_total"] == 3
            && status(&web)["connections_active"] == 0
            && status(&broken)["connections_refused"] == 1
    });
    // Two more pages in the 2 MiB pool than the machine had, put back at the end.
    let file = PathBuf::from("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
    let pool = Pool {
        was: common::read(&file),
        file: file.clone(),
    };
    let want = pool.was.trim().parse::<u64>().unwrap() + 2;
    std::fs::write(&file, want.to_string()).unwrap();

    let o = common::serve::bulkhead()
        .args(["status", "--format", "prometheus"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    promtool(&text);
    let m = parse(&text);
    let st = status(&web);
    let w = |name: &str| format!("{name}{{socket=\"{web}\"}}");
    assert_eq!(sample(&m, &w("bulkhead_socket_connections_total")), 3.0);
    assert_eq!(sample(&m, &w("bulkhead_socket_connections")), 0.0);
    assert_eq!(sample(&m, &w("bulkhead_socket_cold_starts_total")), 1.0);
    assert_eq!(
        sample(&m, &w("bulkhead_socket_received_bytes_total")),
        st["bytes_in"].as_f64().unwrap()
    );
    assert_eq!(
        sample(&m, &w("bulkhead_socket_sent_bytes_total")),
        st["bytes_out"].as_f64().unwrap()
    );
    assert!(st["bytes_out"].as_u64().unwrap() > 0);
    assert_eq!(
        sample(
            &m,
            &format!("bulkhead_socket_state{{socket=\"{web}\",state=\"ready\"}}")
        ),
        1.0
    );
    // The cold start's histogram: one start, its time within the bucket its bound says.
    assert_eq!(
        sample(&m, &w("bulkhead_socket_start_duration_seconds_count")),
        1.0
    );
    let took = sample(&m, &w("bulkhead_socket_start_duration_seconds_sum"));
    let ms = st["last_start_ms"].as_f64().unwrap();
    assert!((took * 1e3 - ms).abs() < 1e-6, "{took} s vs {ms} ms");
    let mut last = 0.0;
    for (series, n) in m.iter().filter(|(k, _)| {
        k.starts_with(&format!(
            "bulkhead_socket_start_duration_seconds_bucket{{socket=\"{web}\""
        ))
    }) {
        let le: f64 = series
            .split("le=\"")
            .nth(1)
            .unwrap()
            .trim_end_matches("\"}")
            .replace("+Inf", "inf")
            .parse()
            .unwrap();
        assert_eq!(*n, if took <= le { 1.0 } else { 0.0 }, "{series}");
        last = f64::max(last, *n);
    }
    assert_eq!(last, 1.0);
    let b = |name: &str| format!("{name}{{socket=\"{broken}\"}}");
    assert_eq!(
        sample(
            &m,
            &format!(
                "bulkhead_socket_connections_refused_total{{socket=\"{broken}\",reason=\"target_unavailable\"}}"
            )
        ),
        1.0
    );
    assert!(sample(&m, &b("bulkhead_socket_failed_starts_total")) >= 1.0);
    assert_eq!(sample(&m, &b("bulkhead_socket_cold_starts_total")), 0.0);

    // Huge pages: what sysfs says, per size and per node.
    let dir = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    for (family, f) in [
        ("bulkhead_hugepages_pool_pages", "nr_hugepages"),
        ("bulkhead_hugepages_free_pages", "free_hugepages"),
        ("bulkhead_hugepages_reserved_pages", "resv_hugepages"),
        ("bulkhead_hugepages_surplus_pages", "surplus_hugepages"),
    ] {
        assert_eq!(
            sample(&m, &format!("{family}{{size=\"2Mi\"}}")),
            sys_u64(&format!("{dir}/{f}")),
            "{family}"
        );
    }
    assert_eq!(
        sample(&m, "bulkhead_hugepages_pool_pages{size=\"2Mi\"}"),
        want as f64
    );
    let node0 = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages";
    if std::path::Path::new(node0).exists() {
        assert_eq!(
            sample(
                &m,
                "bulkhead_hugepages_node_pool_pages{size=\"2Mi\",node=\"0\"}"
            ),
            sys_u64(node0)
        );
    }
    drop(pool);
}

/// Every query of the Grafana dashboard is valid PromQL: `promtool check rules` parses them
/// as recording rules, with Grafana's variables replaced as Grafana would.
#[test]
fn dashboard_queries_parse_as_promql() {
    let _suite = crate::suite::shared();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/grafana/bulkhead.json"
    );
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .expect("the dashboard parses");
    fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => m.iter().for_each(|(k, x)| match x {
                serde_json::Value::String(s) if k == "expr" => out.push(s.clone()),
                _ => exprs(x, out),
            }),
            serde_json::Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
            _ => {}
        }
    }
    let mut qs = Vec::new();
    exprs(&d, &mut qs);
    assert!(qs.len() > 20);
    let rules: Vec<serde_json::Value> = qs
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let q = q
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*")
                .replace("$slice", ".*")
                .replace("$socket", ".*");
            serde_json::json!({"record": format!("dashboard:query{i}"), "expr": q})
        })
        .collect();
    let file = std::env::temp_dir().join(format!("bulkhead-dashboard-{}.yml", std::process::id()));
    // JSON is YAML.
    let text = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&file, text.to_string()).unwrap();
    let o = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output();
    let _ = std::fs::remove_file(&file);
    let Ok(o) = o else {
        missing("promtool check rules: no promtool (Debian package prometheus)");
        return;
    };
    assert!(o.status.success(), "promtool: {}{}", stdout(&o), stderr(&o));
    assert_has(&stdout(&o), &format!("{} rules found", qs.len()));
}
