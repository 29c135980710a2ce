# shellcheck shell=bash disable=SC2086
# Issue 26: boot 5 again (new6 = the tree), with vmhost's TCG pin (scripts/vmhost.d/tcg-pin) on.
cat /sys/devices/system/clocksource/clocksource0/current_clocksource /sys/devices/system/clocksource/clocksource0/available_clocksource > clocksource.txt; dmesg | grep -iE "clocksource|tsc" >> clocksource.txt
ls -d /sys/fs/cgroup/vmhost-tcg-pin && cat /sys/fs/cgroup/vmhost-tcg-pin/cpu.max > pin.txt
# shellcheck source=../../guest-disks.sh # (docs/bench/io-v2/guest-disks.sh, copied beside it into the out dir)
source ./guest-disks.sh
bash mon.sh & mon=$!
B=/mnt/target/ab/new6/bulkhead
mkdir -p logs
( while sleep 1; do for f in /run/bulkhead/bench/*/guard-*.jsonl; do [ -f "$f" ] && cp "$f" "logs/$(date +%H)-${f##*/}"; done; done ) & cp=$!
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80,closed --duration 8s --warmup 2s --connections 8"
s=$(date +%s)
timeout -k 30 1200 $B bench isolation $R --repeat 5 --hog io --setups free,plan,guarded --calibration 5s \
  --keys 50000 --json redis-io.json > redis-io.txt 2> redis-io.err
echo "redis-io rc=$? in $(( $(date +%s) - s )) s" >> times.txt
s=$(date +%s)
timeout -k 30 1200 $B bench isolation $R --repeat 3 --db postgres --pg-scale 5 --hog backup \
  --setups free,plan,guarded --calibration 5s --json pg.json > pg.txt 2> pg.err
echo "pg rc=$? in $(( $(date +%s) - s )) s" >> times.txt
kill $cp $mon
