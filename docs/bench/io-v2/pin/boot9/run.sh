# shellcheck shell=bash disable=SC2086
# Issue 26: boot 8's Redis run again with the guest keeping time by its TSC (vmhost --append
# tsc=reliable) instead of the emulated HPET, then the guarded setup over 30 s scenarios (the
# guard's not-the-cause backoff doubles from 2 s; an 8 s scenario with a fresh guard never
# leaves its first doublings).
cat /sys/devices/system/clocksource/clocksource0/current_clocksource /sys/devices/system/clocksource/clocksource0/available_clocksource > clocksource.txt
cat /sys/fs/cgroup/vmhost-tcg-pin/cpu.max > pin.txt
# shellcheck source=../../guest-disks.sh # (docs/bench/io-v2/guest-disks.sh, copied beside it into the out dir)
source ./guest-disks.sh
bash mon.sh & mon=$!
B=/mnt/target/ab/new6/bulkhead
mkdir -p logs
( while sleep 1; do for f in /run/bulkhead/bench/*/guard-*.jsonl; do [ -f "$f" ] && cp "$f" "logs/$(date +%H)-${f##*/}"; done; done ) & cp=$!
R="--data-dir /mnt/db --other-dir /mnt/other --duration 8s --warmup 2s --connections 8"
s=$(date +%s)
timeout -k 30 1200 $B bench isolation $R --loads 80,closed --repeat 5 --hog io --setups free,plan,guarded --calibration 5s \
  --keys 50000 --json redis-io.json > redis-io.txt 2> redis-io.err
echo "redis-io rc=$? in $(( $(date +%s) - s )) s" >> times.txt
s=$(date +%s)
R="--data-dir /mnt/db --other-dir /mnt/other --duration 30s --warmup 2s --connections 8"
timeout -k 30 1200 $B bench isolation $R --loads 80 --repeat 3 --hog io --setups plan,guarded --calibration 5s \
  --keys 50000 --json redis-io-30s.json > redis-io-30s.txt 2> redis-io-30s.err
echo "redis-io-30s rc=$? in $(( $(date +%s) - s )) s" >> times.txt
kill $cp $mon
