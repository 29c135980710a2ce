# shellcheck shell=bash
bulkhead bench isolation --hog io --io-scheduler bfq --no-journal --loads 80,closed --setups free,plan,guarded --duration 8s --warmup 2s --calibration 5s --repeat 2 --keys 50000 --connections 8 --json issue.json > issue.txt 2> issue.err &
b=$!
for _ in $(seq 1 40); do
  sleep 30
  kill -0 "$b" 2>/dev/null || break
  { echo "=== $(date +%T)"; ps -eo pid,stat,pcpu,wchan:28,args --sort=-pcpu | head -25;
    for p in $(pgrep -f "bench (hog|loadgen)|redis-server|bulkhead.*guard"); do echo "--- $p $(cat "/proc/$p/comm")"; head -12 "/proc/$p/stack" 2>/dev/null; done;
    cat /sys/block/loop*/inflight 2>/dev/null; grep -E "Dirty|Writeback:" /proc/meminfo; } >> ps.log 2>&1
done
wait "$b"; echo rc=$?
