#!/usr/bin/env bash
# The whole test suite, as CI runs it: set-up, format, lints, unit and integration tests.
# Needs root (tests create real cgroups under unique names and remove them).
set -euo pipefail
cd "$(dirname "$0")"
if [ "$(id -u)" != 0 ]; then
  echo "test.sh: run as root (the tests create and remove real cgroups)" >&2
  exit 1
fi
scripts/setup
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -q -- -D warnings
cargo test --locked --workspace 2>&1 | tee /tmp/bulkhead-test.log
# A skipped prerequisite outside CI is said; in CI it fails the test itself.
if grep -q "^SKIPPED:" /tmp/bulkhead-test.log; then
  echo "test.sh: some tests were skipped (see SKIPPED lines above)" >&2
fi
