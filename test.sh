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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --locked --workspace 2>&1 | tee "$log"
# A skipped prerequisite outside CI is said; in CI it fails the test itself.
if grep -q "^SKIPPED:" "$log"; then
  echo "test.sh: some tests were skipped (see SKIPPED lines above)" >&2
fi
passed=$(awk '/^test result:/ {p += $4} END {print p+0}' "$log")
failed=$(awk '/^test result:/ {f += $6} END {print f+0}' "$log")
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
