# shellcheck shell=bash disable=SC2086 # $C: the options, split into words on purpose
# Issue 26, the guard's I/O keep: the build before it (old) and with it (new), one after the other.
C="--hog io --loads 80,closed --setups guarded --duration 10s --warmup 3s --repeat 3 --io-scheduler bfq --no-journal"
for b in old new; do
  /work/target-main/ab/$b/bulkhead bench isolation $C --json $b.json > $b.txt 2> $b.err
  echo "$b rc=$?" >> times.txt
done
