# shellcheck shell=bash
# Every 20 s: processes with their wait channel, the kernel stacks of tasks in D state, the
# helper slices' io.max and freeze state, dirty memory: to find where a stuck run waits.
while sleep 20; do
  { echo "=== $(date +%T)"; ps -eo pid,stat,pcpu,wchan:28,args --sort=-pcpu | head -14 | cut -c1-180
    for p in /proc/[0-9]*; do
      s=$(awk '{print $3}' "$p/stat" 2>/dev/null); [ "$s" = D ] || continue
      echo "--- D ${p#/proc/} $(cat "$p/comm") $(cat "$p/cgroup" 2>/dev/null)"; head -14 "$p/stack" 2>/dev/null
    done
    find /sys/fs/cgroup -path '*bulkhead*' \( -name io.max -o -name cgroup.freeze \) 2>/dev/null | while read -r f; do
      v=$(cat "$f"); [ -n "$v" ] && [ "$v" != 0 ] && echo "$f: $v"; done
    grep -E "^(Dirty|Writeback):" /proc/meminfo; } >> mon.log 2>&1
done
