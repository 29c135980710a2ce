#!/usr/bin/env python3
"""What one write of a PID to cgroup.procs costs: after the host has made no cgroup migration
for a while (a cron job, a backup script) and back to back (a benchmark's loop).

    attach.py [--rounds 20] [--idle 0.2]

Makes /bulkhead-attach-PID in every cgroup hierarchy (removed at the end), and for the cpu
(v1) and unified (v2) hierarchies moves a fresh `sleep` into it: ROUNDS times after IDLE
seconds without a migration, then ROUNDS times back to back. Prints the medians.
"""
import argparse, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from cgroot import hierarchies, make_root, remove_tree  # noqa: E402


def attach_us(procs):
    p = subprocess.Popen(["sleep", "30"])
    try:
        t0 = time.perf_counter()
        with open(procs, "w") as f:
            f.write(str(p.pid))
        return (time.perf_counter() - t0) * 1e6
    finally:
        p.kill()
        p.wait()


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--rounds", type=int, default=20)
    a.add_argument("--idle", type=float, default=0.2)
    args = a.parse_args()
    name = f"bulkhead-attach-{os.getpid()}"
    made = make_root(name)
    try:
        for h in hierarchies():
            procs = os.path.join(h, name, "cgroup.procs")
            if os.path.basename(h) not in ("cpu", "unified") and h != "/sys/fs/cgroup":
                continue
            idle = []
            for _ in range(args.rounds):
                time.sleep(args.idle)  # no migration for a while: the measured condition
                idle.append(attach_us(procs))
            burst = [attach_us(procs) for _ in range(args.rounds)]
            print(f"{h}: after {args.idle}s without a migration median {statistics.median(idle):.0f} us "
                  f"(min {min(idle):.0f}, max {max(idle):.0f}); back to back median {statistics.median(burst):.0f} us")
    finally:
        # The sleeps were killed and reaped: the directories are empty.
        for d in made:
            remove_tree(d)


if __name__ == "__main__":
    main()
