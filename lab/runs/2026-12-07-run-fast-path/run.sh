#!/bin/sh
# One `bench run` (60 rounds, back to back) of the bulkhead binary $1; prints its JSON with
# the target's ratio added: run's overhead over plain / one extra exec's.
out=$(mktemp)
BULKHEAD_BIN=$1 ${BENCH:-target/release/bulkhead-bench} -q run --runs 60 --json "$out" > /dev/null 2>&1 || exit 1
python3 -c '
import json,sys
d=json.load(open(sys.argv[1])); r=d["results"]
d["run_over_exec"]=r[2]["overhead_ms"]/r[1]["overhead_ms"]
print(json.dumps(d))' "$out"
rm -f "$out"
