#!/usr/bin/env python3
"""dump_reads.py POSTMASTER_PID -- COMMAND...: runs COMMAND (a pg_dump) and says how many
bytes the postmaster's children read while it ran (/proc/PID/io read_bytes, sampled every
50 ms), by kind: the dump's backend (a child that appeared during the run), the I/O workers
(`postgres: io worker N`), the rest."""
import subprocess, sys, time

post = int(sys.argv[1])
cmd = sys.argv[sys.argv.index("--") + 1:]


def children():
    try:
        kids = open(f"/proc/{post}/task/{post}/children").read().split()
    except OSError:
        return {}
    out = {}
    for k in kids:
        try:
            title = open(f"/proc/{k}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()
            io = dict(l.split(": ") for l in open(f"/proc/{k}/io").read().splitlines())
            out[int(k)] = (title, int(io["read_bytes"]))
        except (OSError, ValueError, KeyError):
            pass
    return out


before = children()
seen = {}
p = subprocess.Popen(cmd)
while p.poll() is None:
    for pid, (title, rb) in children().items():
        seen[pid] = (title, max(rb, seen.get(pid, ("", 0))[1]))
    time.sleep(0.05)
for pid, (title, rb) in children().items():
    seen[pid] = (title, max(rb, seen.get(pid, ("", 0))[1]))
kinds = {"backend": 0, "io workers": 0, "other": 0}
for pid, (title, rb) in seen.items():
    read = rb - before.get(pid, ("", 0))[1]
    if pid not in before:
        kinds["backend"] += read
    elif "io worker" in title:
        kinds["io workers"] += read
    else:
        kinds["other"] += read
total = sum(kinds.values()) or 1
print("dump reads: " + ", ".join(f"{k} {v / 2**20:.0f} MB ({100 * v / total:.0f}%)" for k, v in kinds.items()))
sys.exit(p.returncode)
