# shellcheck shell=bash disable=SC2086
# Issue 26, the guard's I/O keep in the v2 guest: the build before it (old) and with it (new),
# one after the other in one boot; Redis under the O_DIRECT hog as docs/bench/io-v2/run.sh.
# shellcheck source=../guest-disks.sh # (copied beside it into the out dir)
source ./guest-disks.sh
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80,closed --duration 8s --warmup 2s --repeat 3 --connections 8"
for b in old new; do
  s=$(date +%s)
  timeout -k 30 600 /mnt/target/ab/$b/bulkhead bench isolation $R --hog io --setups guarded \
    --calibration 5s --keys 50000 --json $b.json > $b.txt 2> $b.err
  echo "$b rc=$? in $(( $(date +%s) - s )) s" >> times.txt
done
