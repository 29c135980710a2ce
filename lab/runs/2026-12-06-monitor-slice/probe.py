#!/usr/bin/env python3
"""An exporter's scrapes while the server keeps every CPU busy, by the slice it runs in.

    probe.py BULKHEAD [--rounds 3] [--seconds 20]

Applies the embedded default plan under a cgroup root of its own (/bulkhead-monprobe-PID in
every hierarchy, removed at the end), runs one CPU-bound loop per CPU in db-server (a polling
database), and a tiny HTTP exporter (about 5 ms of CPU per GET) in the slice under test; a
probe GETs it every 0.25 s for SECONDS with a 5 s timeout. Per round, in rotated order: the
server alone (its loop rate is the baseline), the exporter in db-helper (CPUWeight=idle, what
the plan gave it before issue 43) and in db-monitor (CPUWeight=100, CPUQuota=50%). Prints one
JSON line per run and a summary: probes answered within 1 s, p50/p90/max latency, and the
server's rate against the same round's baseline.
"""
import argparse, json, os, signal, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from cgroot import make_root, remove_tree  # noqa: E402

EXPORTER = r'''
import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        end = time.thread_time() + 0.005
        while time.thread_time() < end:
            pass
        body = b"up 1\n"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''

LOOP = r'''
import os, signal, sys, time
n = 0
out = sys.argv[1]
def stop(*_):
    with open(out, "w") as f:
        f.write(str(n))
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    n += 1
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(port, seconds):
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                c.settimeout(5)
                c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                while c.recv(4096):
                    pass
            lat.append(time.monotonic() - t0)
        except OSError:
            lat.append(float("inf"))
        time.sleep(max(0.0, 0.25 - (time.monotonic() - t0)))
    return lat


def start_exporter(exe, env, plan, setup):
    """The agent runs before the server gets busy, as a host's exporter does."""
    port = free_port()
    p = subprocess.Popen([exe, "-c", plan, "run", "--slice", setup, "--", sys.executable, "-c", EXPORTER, str(port)], env=env)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, port
        except OSError:
            if time.monotonic() > deadline:
                p.kill()
                raise SystemExit("the exporter never listened")
            time.sleep(0.05)


def run(exe, env, plan, setup, seconds, tmp):
    exporter, port = (None, None) if setup == "alone" else start_exporter(exe, env, plan, setup)
    outs = [os.path.join(tmp, f"loop{i}") for i in range(os.cpu_count())]
    loops = [subprocess.Popen([exe, "-c", plan, "run", "--slice", "db-server", "--", sys.executable, "-c", LOOP, o], env=env) for o in outs]
    t0 = time.monotonic()
    if exporter is None:
        time.sleep(seconds)  # the baseline: the server with nothing beside it, for as long
        lat = []
    else:
        lat = probe(port, seconds)
    elapsed = time.monotonic() - t0
    for p in loops:
        p.send_signal(signal.SIGTERM)
    for p in loops:
        p.wait()
    if exporter:
        exporter.kill()
        exporter.wait()
    total = sum(int(open(o).read() or 0) for o in outs)
    return {"setup": setup, "seconds": elapsed, "rate": total / elapsed, "latencies": lat}


def summary(r, base):
    lat = sorted(r["latencies"])
    ok = [x for x in lat if x <= 1.0]
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1000
    return {
        "setup": r["setup"],
        "probes": len(lat),
        "within_1s": len(ok),
        "p50_ms": round(q(0.5), 1),
        "p90_ms": round(q(0.9), 1),
        "max_ms": round(lat[-1] * 1000, 1) if lat[-1] != float("inf") else None,
        "server_rate_vs_alone": round(r["rate"] / base, 4),
    }


def main():
    a = argparse.ArgumentParser()
    a.add_argument("bulkhead")
    a.add_argument("plan")
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--seconds", type=float, default=20)
    args = a.parse_args()
    name = f"bulkhead-monprobe-{os.getpid()}"
    made = make_root(name)
    env = dict(os.environ, BULKHEAD_CGROUP_ROOT="/" + name)
    env.pop("BULKHEAD_CONFIG", None)
    rows = []
    try:
        subprocess.run([args.bulkhead, "-c", args.plan, "apply", "-q"], env=env, check=True)
        setups = ["alone", "db-helper", "db-monitor"]
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                order = setups[r % 3:] + setups[:r % 3]
                runs = {s: run(args.bulkhead, env, args.plan, s, args.seconds, tmp) for s in order}
                base = runs["alone"]["rate"]
                for s in ("db-helper", "db-monitor"):
                    row = dict(summary(runs[s], base), round=r + 1)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        subprocess.run([args.bulkhead, "-c", args.plan, "destroy", "--kill", "-q"], env=env)
        for d in made:
            remove_tree(d)
    for s in ("db-helper", "db-monitor"):
        mine = [x for x in rows if x["setup"] == s]
        med = lambda k: statistics.median(x[k] for x in mine if x[k] is not None) if any(x[k] is not None for x in mine) else None
        print(f"{s}: probes answered within 1 s {sum(x['within_1s'] for x in mine)}/{sum(x['probes'] for x in mine)}; "
              f"median of rounds: p50 {med('p50_ms')} ms, p90 {med('p90_ms')} ms, max {med('max_ms')} ms; "
              f"server rate {med('server_rate_vs_alone')} of alone")


if __name__ == "__main__":
    main()
