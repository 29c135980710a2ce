# shellcheck shell=bash disable=SC2086
# Issue 26: the guard excuses the highest harm seen while its cuts were at their end (new9) against the tree before
# (new7), in one boot, A-B-A-B, guarded only, 30 s scenarios, Redis under the O_DIRECT hog at
# 80%, with the TCG pin.
# shellcheck source=../../guest-disks.sh # (docs/bench/io-v2/guest-disks.sh, copied beside it into the out dir)
source ./guest-disks.sh
mkdir -p logs
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80 --duration 30s --warmup 2s --repeat 3 --connections 8"
n=0
for b in new7 new9 new7 new9; do
  n=$((n + 1))
  ( while sleep 1; do for f in /run/bulkhead/bench/*/guard-*.jsonl; do [ -f "$f" ] && cp "$f" "logs/$n-$b-${f##*/}"; done; done ) & cp=$!
  s=$(date +%s)
  timeout -k 30 900 /mnt/target/ab/$b/bulkhead bench isolation $R --hog io --setups guarded \
    --calibration 5s --keys 50000 --json $n-$b.json > $n-$b.txt 2> $n-$b.err
  echo "$n-$b rc=$? in $(( $(date +%s) - s )) s" >> times.txt
  kill $cp
done
