# shellcheck shell=bash
# Runs at SCHED_FIFO 99 (above the guard's 1): every 5 s a line of what runs on the console; when
# the watched file has not grown for 60 s, the kernel's backtraces of all CPUs (sysrq l), the
# blocked tasks (w) and the real-time tasks' state, on the console (serial, not the 9p share).
f=$1; last=0; same=0
dmesg -n 7
echo 1 > /proc/sys/kernel/sysrq
while sleep 5; do
  n=$(stat -c %s "$f" 2>/dev/null || echo 0)
  if [ "$n" = "$last" ]; then same=$((same + 5)); else same=0; last=$n; fi
  echo "watch: $(date +%T) $f=$n still=${same}s load=$(cut -d' ' -f1-4 /proc/loadavg) $(ps -eo pid,cls,rtprio,stat,pcpu,wchan:20,comm --sort=-pcpu | sed -n 2,5p | tr -s ' ' | tr '\n' '|')" > /dev/console
  if [ "$same" -ge 60 ] && [ "$same" -lt 70 ]; then
    echo "watch: STUCK, dumping" > /dev/console
    for p in $(ps -eo pid,cls --no-headers | awk '$2=="FF"||$2=="RR"{print $1}'); do
      echo "watch: RT $p $(cat "/proc/$p/comm") $(cat "/proc/$p/wchan") stat=$(cut -d' ' -f3,14,15 "/proc/$p/stat")" > /dev/console
      for t in "/proc/$p/task"/*; do echo "watch:  task ${t##*/} $(cut -d' ' -f3 "$t/stat") $(head -8 "$t/stack" | tr '\n' ' ')" > /dev/console; done
    done
    echo l > /proc/sysrq-trigger; sleep 2; echo w > /proc/sysrq-trigger
    find /sys/fs/cgroup -path '*bulkhead*' \( -name cpu.max -o -name cgroup.freeze -o -name cpu.idle -o -name io.max \) 2>/dev/null | while read -r c; do echo "watch: $c: $(tr '\n' ' ' < "$c")"; done > /dev/console
  fi
done
