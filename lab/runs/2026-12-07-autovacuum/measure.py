#!/usr/bin/env python3
"""pgbench beside autovacuum, with the autovacuum workers in the server's slice or placed in
db-helper by the guide's rule (docs/POSTGRESQL.md).

    measure.py BULKHEAD [--rounds 3] [--seconds 30] [--scale 10]

A throwaway PostgreSQL 15 cluster (initdb in a temporary directory, a socket of its own,
shared_buffers 64MB) with an eager autovacuum (naptime 1s, no cost delay, 1% scale factors),
its postmaster and tree moved into db-server, under a cgroup root of the script's own
(/bulkhead-av-PID, removed at the end). pgbench -N (simple update: dead rows all the time)
at 50% of its measured peak, -c 4 -j 2, per-transaction log for p99. Per round, in rotated
order: "server" (no rule: workers stay with the postmaster in db-server) and "placed"
(`bulkhead place` with the rule: workers in db-helper, CPUWeight=idle). Prints per run the
TPS, p50/p99 latency, vacuums of pgbench_accounts and its dead rows at the end, and the
medians of the rounds.
"""
import argparse, glob, json, os, pwd, shutil, signal, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from cgroot import make_root, remove_tree  # noqa: E402

BIN = "/usr/lib/postgresql/15/bin"
PLAN = """[slice.db]
[slice.db-server]
CPUWeight = 1000
[slice.db-helper]
CPUWeight = "idle"

[place.autovacuum]
slice = "db-helper"
user = "postgres"
cmdline = ["postgres: autovacuum worker*", "postgres: *: autovacuum worker*"]
"""


def as_pg(cmd, **kw):
    pw = pwd.getpwnam("postgres")
    def drop():
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    return subprocess.run(cmd, preexec_fn=drop, check=True, **kw)


def sql(d, port, q):
    return as_pg([f"{BIN}/psql", "-X", "-q", "-t", "-A", "-h", d, "-p", str(port), "-U", "postgres", "-d", "postgres", "-c", q],
                 capture_output=True, text=True).stdout.strip()


def pgbench(d, port, args, logdir=None):
    cmd = [f"{BIN}/pgbench", "-h", d, "-p", str(port), "-U", "postgres"] + args + ["postgres"]
    return as_pg(cmd, capture_output=True, text=True, cwd=logdir)


def tps_of(out):
    for line in out.splitlines():
        if line.startswith("tps ="):
            return float(line.split()[2])
    raise SystemExit("no tps in pgbench's output:\n" + out)


def latencies(logdir):
    lat = []
    for f in glob.glob(os.path.join(logdir, "pgbench_log.*")):
        for line in open(f):
            parts = line.split()
            lat.append(int(parts[2]) / 1000.0)  # us -> ms
        os.unlink(f)
    lat.sort()
    return lat


def accounts(d, port):
    v = sql(d, port, "select autovacuum_count, n_dead_tup from pg_stat_user_tables where relname = 'pgbench_accounts'")
    a, b = v.split("|")
    return int(a), int(b)


def run(exe, env, plan, d, port, setup, rate, seconds, logdir):
    placer = None
    if setup == "placed":
        placer = subprocess.Popen([exe, "-c", plan, "place", "--interval", "50ms", "-q"], env=env)
    before, _ = accounts(d, port)
    out = pgbench(d, port, ["-N", "-c", "4", "-j", "2", "-R", str(rate), "-T", str(seconds), "-l"], logdir).stdout
    after, dead = accounts(d, port)
    if placer:
        placer.send_signal(signal.SIGTERM)
        placer.wait()
        # Workers it left in db-helper go on there; the next run starts without them.
    lat = latencies(logdir)
    q = lambda f: round(lat[min(len(lat) - 1, int(f * len(lat)))], 2)
    return {"setup": setup, "tps": tps_of(out), "p50_ms": q(0.5), "p99_ms": q(0.99),
            "vacuums": after - before, "dead_rows_end": dead}


def main():
    a = argparse.ArgumentParser()
    a.add_argument("bulkhead")
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--seconds", type=int, default=30)
    a.add_argument("--scale", type=int, default=10)
    args = a.parse_args()
    name = f"bulkhead-av-{os.getpid()}"
    made = make_root(name)
    env = dict(os.environ, BULKHEAD_CGROUP_ROOT="/" + name)
    env.pop("BULKHEAD_CONFIG", None)
    tmp = tempfile.mkdtemp(prefix="bh-av-")
    pw = pwd.getpwnam("postgres")
    os.chown(tmp, pw.pw_uid, pw.pw_gid)
    os.chmod(tmp, 0o755)
    plan = os.path.join(tmp, "plan.toml")
    open(plan, "w").write(PLAN)
    data, port = os.path.join(tmp, "data"), 25000 + os.getpid() % 10000
    pm, rows = None, []
    try:
        subprocess.run([args.bulkhead, "-c", plan, "apply", "-q"], env=env, check=True)
        as_pg([f"{BIN}/initdb", "-D", data, "-A", "trust", "-U", "postgres"], capture_output=True)
        conf = ["-c", "shared_buffers=64MB", "-c", "autovacuum_naptime=1s", "-c", "autovacuum_vacuum_cost_delay=0",
                "-c", "autovacuum_vacuum_scale_factor=0.01", "-c", "autovacuum_analyze_scale_factor=0.01",
                "-c", "listen_addresses=", "-c", "fsync=off"]
        pm = subprocess.Popen([f"{BIN}/postgres", "-D", data, "-p", str(port), "-k", tmp] + conf,
                              preexec_fn=lambda: (os.setgid(pw.pw_gid), os.setuid(pw.pw_uid)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while subprocess.run([f"{BIN}/pg_isready", "-h", tmp, "-p", str(port)], capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise SystemExit("PostgreSQL did not start")
            time.sleep(0.2)
        subprocess.run([args.bulkhead, "-c", plan, "move", "--tree", "--slice", "db-server", str(pm.pid)], env=env, check=True,
                       capture_output=True)
        pgbench(tmp, port, ["-i", "-q", "-s", str(args.scale)])
        peak = tps_of(pgbench(tmp, port, ["-N", "-c", "4", "-j", "2", "-T", "10"]).stdout)
        rate = int(peak * 0.5)
        print(json.dumps({"peak_tps": peak, "rate": rate}), flush=True)
        setups = ["server", "placed"]
        for r in range(args.rounds):
            order = setups if r % 2 == 0 else setups[::-1]
            for s in order:
                row = dict(run(args.bulkhead, env, plan, tmp, port, s, rate, args.seconds, tmp), round=r + 1)
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        if pm:
            pm.send_signal(signal.SIGINT)
            pm.wait()
        subprocess.run([args.bulkhead, "-c", plan, "destroy", "--kill", "-q"], env=env)
        for d in made:
            remove_tree(d)
        shutil.rmtree(tmp, ignore_errors=True)
    for s in ("server", "placed"):
        mine = [x for x in rows if x["setup"] == s]
        med = lambda k: statistics.median(x[k] for x in mine)
        print(f"{s}: medians tps {med('tps')}, p50 {med('p50_ms')} ms, p99 {med('p99_ms')} ms, "
              f"vacuums of pgbench_accounts per run {med('vacuums')}, dead rows at the end {med('dead_rows_end')}")


if __name__ == "__main__":
    main()
