# shellcheck shell=bash disable=SC2086
# Issue 26: the keep as shipped (new) against the keep with a learned CPU floor (new4).
# shellcheck source=../../guest-disks.sh # (docs/bench/io-v2/guest-disks.sh, copied beside it into the out dir)
source ./guest-disks.sh
bash mon.sh & mon=$!
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80,closed --duration 8s --warmup 2s --repeat 3 --connections 8"
for b in new4 new; do
  s=$(date +%s)
  timeout -k 30 900 /mnt/target/ab/$b/bulkhead bench isolation $R --hog io --setups guarded \
    --calibration 5s --keys 50000 --json $b.json > $b.txt 2> $b.err
  echo "$b rc=$? in $(( $(date +%s) - s )) s" >> times.txt
done
kill $mon
