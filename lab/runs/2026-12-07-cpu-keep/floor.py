#!/usr/bin/env python3
"""A helper's fixed job beside a server that keeps every CPU busy, by how it is scheduled.

    floor.py BULKHEAD [--rounds 3] [--seconds 30] [--job 2.0]

Applies plan.toml (beside this script) under a cgroup root of its own (/bulkhead-floor-PID in
every hierarchy, removed at the end), runs one CPU-bound loop per CPU in db-server (a polling
database), and a helper that must burn JOB CPU-seconds (a backup's compression, say). Per
round, in rotated order, each for SECONDS:
  alone     the server alone (its loop rate is the baseline)
  idle      the helper in db-helper (CPUWeight=idle), nothing else
  keep      the same with `bulkhead guard` running (cpu_keep 10%, keep_after 2s)
  w10       the helper in db-w10 (CPUWeight=10)
  w100      the helper in db-w100 (CPUWeight=100)
Prints one JSON line per run (the helper's finish time, or its CPU-seconds done by the end;
the server's rate against the same round's baseline; the guard's keep actions) and the
medians of the rounds.
"""
import argparse, json, os, signal, statistics, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from cgroot import make_root, remove_tree  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# Counts; every 2^17 turns notes (monotonic time, count); on SIGTERM writes them, one a line.
LOOP = r'''
import os, signal, sys, time
n, marks = 0, []
out = sys.argv[1]
def stop(*_):
    with open(out, "w") as f:
        f.writelines(f"{t} {c}\n" for t, c in marks + [(time.monotonic(), n)])
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    n += 1
    if not n & 0x1FFFF:
        marks.append((time.monotonic(), n))
'''


def count_at(marks, t):
    """A loop's count at time t, interpolated between its marks."""
    prev = (marks[0][0], 0)
    for m in marks:
        if m[0] >= t:
            span = m[0] - prev[0]
            return prev[1] + (m[1] - prev[1]) * ((t - prev[0]) / span if span > 0 else 1)
        prev = m
    return marks[-1][1]


def rate_between(outs, a, b):
    """The server's loops' summed rate between monotonic times a and b."""
    total = 0.0
    for o in outs:
        marks = [tuple(map(float, l.split())) for l in open(o) if l.strip()]
        total += count_at(marks, b) - count_at(marks, a)
    return total / (b - a)

# Burns JOB CPU-seconds; on SIGTERM (or done) writes "done_at cpu_seconds".
JOB = r'''
import os, signal, sys, time
job, out = float(sys.argv[1]), sys.argv[2]
t0 = time.monotonic()
def write(done):
    with open(out, "w") as f:
        f.write(f"{done if done is not None else ''} {time.process_time()}")
def stop(*_):
    write(None)
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
while time.process_time() < job:
    for _ in range(10000):
        pass
write(time.monotonic() - t0)
'''


def start_guard(exe, env, plan, log):
    """The guard, once it has calibrated (its --json status line says so)."""
    g = subprocess.Popen([exe, "-c", plan, "guard", "--log", log, "--recalibrate"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in g.stdout:
        if "baseline" in line:
            # Keep draining its output, so a full pipe never blocks it.
            threading.Thread(target=lambda: [None for _ in g.stdout], daemon=True).start()
            return g
    g.kill()
    raise SystemExit("the guard never calibrated")


def run(exe, env, plan, setup, seconds, job, tmp):
    outs = [os.path.join(tmp, f"loop{i}") for i in range(os.cpu_count())]
    loops = [subprocess.Popen([exe, "-c", plan, "run", "--slice", "db-server", "--", sys.executable, "-c", LOOP, o], env=env) for o in outs]
    guard, log = None, os.path.join(tmp, "guard.jsonl")
    if setup == "keep":
        guard = start_guard(exe, env, plan, log)
    slice_of = {"idle": "db-helper", "keep": "db-helper", "w10": "db-w10", "w100": "db-w100"}
    helper, hout = None, os.path.join(tmp, "helper")
    t0 = time.monotonic()
    if setup != "alone":
        helper = subprocess.Popen([exe, "-c", plan, "run", "--slice", slice_of[setup], "--", sys.executable, "-c", JOB, str(job), hout], env=env)
    end = t0 + seconds
    while time.monotonic() < end:
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    for p in loops:
        p.send_signal(signal.SIGTERM)
    for p in loops:
        p.wait()
    row = {"setup": setup, "seconds": round(elapsed, 1)}
    window = seconds
    if helper:
        if helper.poll() is None:
            helper.send_signal(signal.SIGTERM)
        helper.wait()
        done, cpu = open(hout).read().split(" ")
        row["helper_done_s"] = round(float(done), 1) if done else None
        row["helper_cpu_s"] = round(float(cpu), 2)
        window = float(done) if done else elapsed
    if guard:
        guard.send_signal(signal.SIGINT)
        guard.wait()
        acts = [json.loads(l) for l in open(log) if l.strip()] if os.path.exists(log) else []
        keeps = [a for a in acts if a.get("kind") == "keep"]
        row["keep_at_s"] = round(keeps[0]["t"], 1) if keeps else None
        row["actions"] = sorted({a.get("kind") for a in acts})
        os.unlink(log)
    # The server's rate while the helper worked (alone: the whole run).
    row["rate"] = rate_between(outs, t0, t0 + window)
    return row


def main():
    a = argparse.ArgumentParser()
    a.add_argument("bulkhead")
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--seconds", type=float, default=30)
    a.add_argument("--job", type=float, default=2.0)
    args = a.parse_args()
    plan = os.path.join(HERE, "plan.toml")
    name = f"bulkhead-floor-{os.getpid()}"
    made = make_root(name)
    env = dict(os.environ, BULKHEAD_CGROUP_ROOT="/" + name)
    env.pop("BULKHEAD_CONFIG", None)
    setups = ["alone", "idle", "keep", "w10", "w100"]
    rows = []
    try:
        subprocess.run([args.bulkhead, "-c", plan, "apply", "-q"], env=env, check=True)
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                order = setups[r % len(setups):] + setups[:r % len(setups)]
                runs = {s: run(args.bulkhead, env, plan, s, args.seconds, args.job, tmp) for s in order}
                base = runs["alone"]["rate"]
                for s in setups[1:]:
                    row = dict(runs[s], round=r + 1)
                    row["server_vs_alone"] = round(row["rate"] / base, 4)
                    # Against the idle helper's run (which takes almost nothing): the
                    # "alone" baseline is noisy on this VM (slow wake of idle vCPUs).
                    row["server_vs_idle"] = round(row.pop("rate") / runs["idle"]["rate"], 4)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        subprocess.run([args.bulkhead, "-c", plan, "destroy", "--kill", "-q"], env=env)
        for d in made:
            remove_tree(d)
    for s in setups[1:]:
        mine = [x for x in rows if x["setup"] == s]
        done = [x["helper_done_s"] for x in mine if x["helper_done_s"] is not None]
        print(f"{s}: job of {args.job} CPU-s done in {len(done)}/{len(mine)} rounds"
              f" (median {statistics.median(done) if done else '-'} s);"
              f" CPU-s by the end (median) {statistics.median(x['helper_cpu_s'] for x in mine)};"
              f" server while it worked {statistics.median(x['server_vs_alone'] for x in mine)} of alone,"
              f" {statistics.median(x['server_vs_idle'] for x in mine)} of the idle helper's run")


if __name__ == "__main__":
    main()
