# shellcheck shell=bash disable=SC2086
# The guest hang with a guarded scenario: the same run as ab9 (new in round 2 of io/80%/guarded hung),
# watched from SCHED_FIFO 99 with the kernel's backtraces on the serial console.
# shellcheck source=../../guest-disks.sh # (docs/bench/io-v2/guest-disks.sh, copied beside it into the out dir)
source ./guest-disks.sh
chrt -f 99 bash watch.sh /mnt/out/new.err & w=$!
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80 --duration 8s --warmup 2s --repeat 5 --connections 8"
for b in new new6; do
  cp /mnt/out/$b.err /mnt/out/prev-$b.err 2>/dev/null
  timeout -k 30 600 /mnt/target/ab/$b/bulkhead bench isolation $R --hog io --setups guarded \
    --calibration 5s --keys 50000 --json $b.json > $b.txt 2> $b.err
  echo "$b rc=$?" >> times.txt
done
kill $w
