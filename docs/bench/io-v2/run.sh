# shellcheck shell=bash disable=SC2086 # $R: the options every run shares, split into words on purpose
# Final run F (one VM, scripts/vmhost --cgroup v2): Redis on a virtio disk of its own (vdb, ext4
# with its journal, scheduler none), backup-other on vdc. Each bench has a hard time limit so a
# stuck scenario cannot eat the others; mon.sh records where a stuck run waits.
source ./guest-disks.sh
bash mon.sh & mon=$!
t() { local lim=$1 s; shift; s=$(date +%s); timeout -k 30 "$lim" "$@"; echo "rc=$? in $(( $(date +%s) - s )) s: ${*:1:8}" >> times.txt; }
R="--data-dir /mnt/db --other-dir /mnt/other --loads 80,closed --duration 8s --warmup 2s --repeat 3 --connections 8"
t 480 bulkhead bench isolation $R --hog io --setups free,plan,guarded --calibration 5s \
  --keys 50000 --json redis-io.json --chart redis-io.png > redis-io.txt 2> redis-io.err
t 600 bulkhead bench isolation $R --hog backup,backup-other --setups free,plan --keys 50000 \
  --json redis-backup.json > redis-backup.txt 2> redis-backup.err
t 300 bulkhead -c iocost.toml bench isolation $R --hog io --setups free,plan --keys 50000 \
  --json iocost.json > iocost.txt 2> iocost.err
t 540 bulkhead bench isolation $R --db postgres --pg-scale 5 --hog backup --setups free,plan,guarded \
  --calibration 5s --json pg.json --chart pg.png > pg.txt 2> pg.err
kill $mon
cat times.txt
# The short bench of `vmhost test` (scripts/vmhost.d/bench), as CI runs it in the v2 guest.
VMHOST_OUT=$PWD timeout -k 10 300 bash vmbench.sh > vmbench.log 2>&1; echo "vmbench rc=$?" >> times.txt
