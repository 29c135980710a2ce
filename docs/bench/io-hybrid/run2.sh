#!/bin/bash
# shellcheck disable=SC2086 # $common holds several options on purpose
# Hybrid rerun, part 2: today's build on the same scenario as the build before issue 26
# (ext4 without a journal on the bench's BFQ loop device, which was that build's only choice).
set -x
NEW=/tmp/ci/target/release/bulkhead
common="--hog io --loads 80,closed --setups free,static,guarded --duration 10s --warmup 3s --repeat 3"
$NEW bench isolation $common --io-scheduler bfq --no-journal --json /tmp/hyb/new-nojournal.json > /tmp/hyb/new-nojournal.txt 2>&1
