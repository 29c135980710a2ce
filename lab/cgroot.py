"""A cgroup root of a lab script's own: /NAME in every cgroup hierarchy (cpuset's copied
from its parent), removed with everything under it at the end. For the scripts under
lab/runs that run a plan with BULKHEAD_CGROUP_ROOT=/NAME."""
import os


def hierarchies():
    out = []
    for line in open("/proc/self/mountinfo"):
        parts = line.split()
        fstype = parts[parts.index("-") + 1]
        if fstype in ("cgroup", "cgroup2") and "name=" not in line.split(" - ")[1]:
            out.append(parts[4])
    return out


def make_root(name):
    made = []
    for h in hierarchies():
        d = os.path.join(h, name)
        os.mkdir(d)
        made.append(d)
        if os.path.exists(os.path.join(h, "cpuset.cpus")):
            for f in ("cpuset.cpus", "cpuset.mems"):
                open(os.path.join(d, f), "w").write(open(os.path.join(h, f)).read())
    return made


def remove_tree(d):
    for sub in sorted((os.path.join(r, x) for r, ds, _ in os.walk(d) for x in ds), key=len, reverse=True):
        os.rmdir(sub)
    os.rmdir(d)
