# shellcheck shell=bash disable=SC2086
# Issue 26: the guard's I/O keep (keep.rs) in the v2 guest: Redis under the O_DIRECT hog, as docs/bench/io-v2/run.sh's first bench.
# shellcheck source=../guest-disks.sh # (copied beside it into the out dir)
source ./guest-disks.sh
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80,closed --duration 8s --warmup 2s --repeat 3 --connections 8"
s=$(date +%s)
timeout -k 30 600 bulkhead bench isolation $R --hog io --setups free,plan,guarded --calibration 5s \
  --keys 50000 --json redis-io.json > redis-io.txt 2> redis-io.err
echo "rc=$? in $(( $(date +%s) - s )) s" >> times.txt
