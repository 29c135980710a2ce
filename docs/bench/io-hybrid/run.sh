#!/bin/bash
# shellcheck disable=SC2086 # $common holds several options on purpose
# Hybrid rerun for issue 26: today's build (8d2cb0a) and the build before issue 26 (e2efae7),
# same host, one after the other, the O_DIRECT hog on the bench's BFQ loop device (the old default).
set -x
NEW=/tmp/ci/target/release/bulkhead
OLD=/work/bin-old/bulkhead
common="--hog io --loads 80,closed --setups free,static,guarded --duration 10s --warmup 3s --repeat 3"
$NEW bench isolation $common --io-scheduler bfq --json /tmp/hyb/new.json > /tmp/hyb/new.txt 2>&1
$OLD bench isolation $common --json /tmp/hyb/old.json > /tmp/hyb/old.txt 2>&1
