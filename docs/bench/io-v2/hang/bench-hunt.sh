# shellcheck shell=bash disable=SC2086
# Hunt the guest hang: many guarded rounds of io/80% with the kernel's symbols and a FIFO-99
# heartbeat on the 9p share, so the host can read the vCPUs with gdb when the heartbeat stops.
# shellcheck source=../guest-disks.sh # (docs/bench/io-v2/guest-disks.sh, copied beside it into the out dir)
source ./guest-disks.sh
cat /proc/kallsyms > /mnt/out/kallsyms
uname -a > /mnt/out/uname
(while sleep 2; do date +%s > /mnt/out/hb; done) & hb=$!
chrt -f -p 99 $hb
(while sleep 1; do cp /run/bulkhead/bench/*/guard-*.jsonl /mnt/out/ 2>/dev/null; done) & cpl=$!
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80 --duration 8s --warmup 2s --connections 8"
timeout -k 30 1700 /mnt/target/ab/new6/bulkhead bench isolation $R --repeat ${ROUNDS:-40} --hog io --setups guarded \
  --calibration 5s --keys 50000 --json new6.json > new6.txt 2> new6.err
echo "new6 rc=$?" >> times.txt
kill $hb $cpl
