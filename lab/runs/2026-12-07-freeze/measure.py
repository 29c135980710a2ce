#!/usr/bin/env python3
"""Issue 44 #3: a frozen target's next first byte against a cold start, side by side, as root:
    measure.py BULKHEAD [--rounds 30]
One `bulkhead serve` on a plan of two sockets, both a plain busybox httpd in the slice `frz`
under a cgroup root of this script's own (lab/cgroot.py):
  cold:   idle_timeout = "0"        (stopped after each request: every request is a cold start)
  frozen: idle_timeout = "100ms", on_idle = "freeze" (frozen when idle: each request thaws it)
Each round, in alternating order: wait until `cold` is idle and time one GET (connect to the
first byte of the answer); wait until `frozen` is frozen and time one GET; then one GET on the
thawed target at once (warm: the proxy's own floor). Medians and the ratios are printed. The
serve process is stopped by its PID, the slice and the root removed at the end."""
import argparse, json, os, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import cgroot  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def ttfb(port):
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
    first = s.recv(1)
    t = time.perf_counter() - t0
    while s.recv(65536):
        pass
    s.close()
    assert first == b"H", first
    return t * 1e3


def state(name):
    try:
        return json.load(open(f"/run/bulkhead/sockets/{name}.json"))
    except (OSError, ValueError):
        return {}


def wait(what, cond, limit=30):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > limit:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bulkhead")
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    tag = os.getpid()
    root = f"bulkhead-lab-freeze-{tag}"
    made = cgroot.make_root(root)
    d = tempfile.mkdtemp(prefix="bulkhead-lab-freeze-", dir="/var/tmp")
    www = os.path.join(d, "www")
    os.mkdir(www)
    open(os.path.join(www, "index.html"), "w").write("hello, world\n")
    p_cold, b_cold, p_frz, b_frz = (free_port() for _ in range(4))
    cold, frz = f"lab-cold-{tag}", f"lab-frozen-{tag}"
    httpd = lambda b: f'["/bin/busybox", "httpd", "-f", "-p", "127.0.0.1:{b}", "-h", "{www}"]'
    plan = f"""[slice.frz]
CPUWeight = 100
[socket.{cold}]
listen = ["127.0.0.1:{p_cold}"]
backend = "127.0.0.1:{b_cold}"
idle_timeout = "0"
[socket.{cold}.target]
command = {httpd(b_cold)}
slice = "frz"
[socket.{frz}]
listen = ["127.0.0.1:{p_frz}"]
backend = "127.0.0.1:{b_frz}"
idle_timeout = "100ms"
on_idle = "freeze"
[socket.{frz}.target]
command = {httpd(b_frz)}
slice = "frz"
"""
    pf = os.path.join(d, "plan.toml")
    open(pf, "w").write(plan)
    env = dict(os.environ, BULKHEAD_CGROUP_ROOT=f"/{root}")
    serve = None
    try:
        subprocess.run([a.bulkhead, "-c", pf, "apply", "-q"], env=env, check=True)
        log = open(os.path.join(d, "serve.log"), "w")
        serve = subprocess.Popen([a.bulkhead, "-c", pf, "serve"], env=env, stderr=log)
        wait("serve", lambda: state(cold).get("state") == "idle" and state(frz).get("state") == "idle")
        ttfb(p_frz)  # the frozen socket's one cold start
        out = {"cold": [], "thaw": [], "warm": []}
        seen = 0  # freezes counted so far: each thaw sample waits for a new one
        for i in range(a.rounds):
            for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                if which == 0:
                    wait("cold idle", lambda: state(cold).get("state") == "idle" and state(cold).get("target_pid") is None)
                    out["cold"].append(ttfb(p_cold))
                else:
                    wait("frozen", lambda: state(frz).get("state") == "frozen" and state(frz).get("freezes", 0) > seen)
                    seen = state(frz).get("freezes", 0)
                    out["thaw"].append(ttfb(p_frz))
                    out["warm"].append(ttfb(p_frz))
        st = state(frz)
        med = {k: statistics.median(v) for k, v in out.items()}
        print(f"rounds: {a.rounds}; frozen socket: {st.get('freezes')} freezes, {st.get('thaws')} thaws, "
              f"cold starts {st.get('cold_starts')}, last thaw {st.get('last_thaw_ms')} ms")
        for k in ("cold", "thaw", "warm"):
            v = sorted(out[k])
            print(f"{k:5} first byte: median {med[k]:.2f} ms (p10 {v[len(v)//10]:.2f}, p90 {v[len(v)*9//10]:.2f})")
        print(f"thaw / cold: {med['thaw'] / med['cold']:.3f}; thaw - warm: {med['thaw'] - med['warm']:.2f} ms")
        json.dump(out, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "samples.json"), "w"))
    finally:
        if serve is not None:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=60)
        subprocess.run([a.bulkhead, "-c", pf, "destroy", "-q"], env=env)
        for m in made:
            if os.path.isdir(m):
                cgroot.remove_tree(m)
        shutil.rmtree(d, ignore_errors=True)


main()
