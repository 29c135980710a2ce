#!/usr/bin/env bash
# The main demo on a fresh machine (run as root): build bulkhead, create the default
# database slices, show that a command run in the helper slice is confined, show status,
# then remove everything again.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup
cargo build --release --locked -q
B=target/release/bulkhead
trap '$B destroy --kill -q || true' EXIT
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
say bulkhead plan show;   $B plan show
say bulkhead apply;       $B apply
say bulkhead apply;       $B apply
say "bulkhead run --slice db-helper -- sh -c 'cat /proc/self/cgroup'"
$B run --slice db-helper -- sh -c 'cat /proc/self/cgroup'
say "two CPU hogs: one in db-helper (CPUWeight=10), one in db-server (CPUWeight=1000), pinned to CPU 0"
$B run --slice db-helper -- taskset -c 0 sh -c 'while :; do :; done' & H=$!
$B run --slice db-server -- taskset -c 0 sh -c 'while :; do :; done' & S=$!
sleep 2
say bulkhead status;      $B status --interval 2
kill $H $S; wait $H $S 2>/dev/null || true
say bulkhead destroy;     $B destroy
trap - EXIT
