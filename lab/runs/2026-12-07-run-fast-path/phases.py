#!/usr/bin/env python3
# The phase driver of lab/runs/2026-12-07-run-fast-path: spawn a command 300 times (posix_spawn),
# read the "XT LABEL NANOS" lines it prints on stderr with XT set (an instrumented build;
# the instrumentation is not in the tree) and print the median time between marks.
import os, time, subprocess, statistics, sys
argv = sys.argv[1:]
env = dict(os.environ, XT="1")
rows = []
for i in range(300):
    r, w = os.pipe()
    t0 = time.time_ns()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, w, 2)])
    os.close(w)
    _, st = os.waitpid(pid, 0)
    t_end = time.time_ns()
    out = os.read(r, 65536).decode(); os.close(r)
    marks = [("spawn", t0)] + [(l.split()[1], int(l.split()[2])) for l in out.splitlines() if l.startswith("XT ")] + [("reaped", t_end)]
    rows.append(marks)
names = [m[0] for m in rows[0]]
print("phase (from the previous mark)  median us")
for k in range(1, len(names)):
    d = [ (r[k][1]-r[k-1][1])/1000 for r in rows if len(r)==len(names)]
    print(f"{names[k-1]:>9} -> {names[k]:<9} {statistics.median(d):8.1f}")
