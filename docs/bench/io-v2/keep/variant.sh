# shellcheck shell=bash disable=SC2086
# Issue 26, a variant of the guard's I/O keep tried in the v2 guest (not kept): IO_KEEP 0.35
# and a 1 s window (build "new2"); Redis under the O_DIRECT hog as docs/bench/io-v2/run.sh.
# shellcheck source=../guest-disks.sh # (copied beside it into the out dir)
source ./guest-disks.sh
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80,closed --duration 8s --warmup 2s --repeat 3 --connections 8"
# shellcheck disable=SC2043 # one build here; the loop is ab.sh's
for b in new2; do
  s=$(date +%s)
  timeout -k 30 600 /mnt/target/ab/$b/bulkhead bench isolation $R --hog io --setups guarded \
    --calibration 5s --keys 50000 --json $b.json > $b.txt 2> $b.err
  echo "$b rc=$? in $(( $(date +%s) - s )) s" >> times.txt
done
