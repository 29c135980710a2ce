# shellcheck shell=bash disable=SC2086 # $R: the options, split into words on purpose
# Issue 26, guard builds against each other in one v2 guest boot: guarded only, Redis under the
# O_DIRECT hog at 80%, with vmhost's TCG pin. Run in the out dir, with guest-disks.sh copied
# beside it; the builds are /mnt/target/ab/BUILD/bulkhead (and bulkhead-bench).
#   bash ab-guarded.sh ROUNDS DURATION BUILD...     e.g. 3 30s new7 new9 new7 new9
# Writes N-BUILD.txt (.json, .err), logs/N-BUILD-guard-*.jsonl (the guard's actions), times.txt.
# shellcheck source=guest-disks.sh
source ./guest-disks.sh
rounds=$1 duration=$2
shift 2
mkdir -p logs
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80 --duration $duration --warmup 2s --repeat $rounds --connections 8"
n=0
for b in "$@"; do
  n=$((n + 1))
  ( while sleep 1; do for f in /run/bulkhead/bench/*/guard-*.jsonl; do [ -f "$f" ] && cp "$f" "logs/$n-$b-${f##*/}"; done; done ) & cp=$!
  s=$(date +%s)
  timeout -k 30 900 /mnt/target/ab/$b/bulkhead bench isolation $R --hog io --setups guarded \
    --calibration 5s --keys 50000 --json $n-$b.json > $n-$b.txt 2> $n-$b.err
  echo "$n-$b rc=$? in $(( $(date +%s) - s )) s" >> times.txt
  kill $cp
done
