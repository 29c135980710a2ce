# shellcheck shell=bash disable=SC2086 # $C: the options, split into words on purpose
# Issue 26, the hybrid closed loop: the build before issue 26 (old, e2efae7) and the tree (new),
# A-B-A-B on this host, Redis under the O_DIRECT hog on the bench's BFQ loop device without a
# journal (the old build's only mode), closed loop only.
C="--hog io --loads closed --setups free,static,guarded --duration 10s --warmup 3s --repeat 3"
n=0
for b in old new old new; do
  n=$((n + 1))
  extra=
  [ "$b" = new ] && extra="--io-scheduler bfq --no-journal"
  s=$(date +%s)
  /work/target-main/ab/$b/bulkhead bench isolation $C $extra --json $n-$b.json > $n-$b.txt 2> $n-$b.err
  echo "$n-$b rc=$? in $(( $(date +%s) - s )) s" >> times.txt
done
