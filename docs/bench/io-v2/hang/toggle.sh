# shellcheck shell=bash
# Does flipping the kernel's __cfs_bandwidth_used static key hang a TCG guest? One cgroup's
# cpu.max goes between a quota and "max" as fast as a shell can write it (the key goes 0 -> 1
# -> 0 each time, and the kernel live-patches every site that tests it), beside O_DIRECT
# readers that schedule all the time and a pipe that wakes tasks. PIN=1 first makes another
# cgroup with a finite cpu.max, so the key never returns to 0 and nothing is patched.
cat /proc/kallsyms > /mnt/out/kallsyms
(while sleep 2; do date +%s > /mnt/out/hb; done) & hb=$!
chrt -f -p 99 $hb
r=/sys/fs/cgroup
grep -qw cpu $r/cgroup.subtree_control || echo +cpu > $r/cgroup.subtree_control
if [ "${PIN:-0}" = 1 ]; then mkdir -p $r/tcg-pin; echo "1000000 1000000" > $r/tcg-pin/cpu.max; fi
mkdir -p $r/flip
pids=()
for _ in 1 2; do (while :; do dd if=/dev/vdb of=/dev/null iflag=direct bs=4k count=20000 2>/dev/null; done) & pids+=($!); done
(yes | cat > /dev/null) & pids+=($!)
end=$(( $(date +%s) + ${SECS:-300} )); n=0
while [ "$(date +%s)" -lt "$end" ]; do
  for _ in $(seq 50); do echo "50000 100000" > $r/flip/cpu.max; echo max > $r/flip/cpu.max; done
  n=$((n + 50)); echo "$(date +%T) flips=$n" > /mnt/out/progress
done
echo "done flips=$n pin=${PIN:-0}" >> /mnt/out/times.txt
kill "${pids[@]}" $hb; pkill -P $$ 2>/dev/null
rmdir $r/flip
[ "${PIN:-0}" = 0 ] || rmdir $r/tcg-pin
