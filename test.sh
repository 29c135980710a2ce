#!/usr/bin/env bash
# The whole test suite, as CI runs it: set-up, format, lints, unit and integration tests on
# this machine, then the host suite in a throw-away VM with pure cgroup v2 under systemd (the
# layout most users have; scripts/vmhost, docs/TESTING.md).
#   ./test.sh              this machine + the v2 guest
#   ./test.sh --all-hosts  this machine + every guest: v2, hybrid, v1, each with systemd and without
# Needs root (tests create real cgroups under unique names and remove them).
set -euo pipefail
cd "$(dirname "$0")"
modes=("v2")
case ${1:-} in
  "") ;;
  --all-hosts) modes=("v2" "hybrid" "v1" "v2 --no-systemd" "hybrid --no-systemd" "v1 --no-systemd") ;;
  *) echo "usage: ./test.sh [--all-hosts]" >&2; exit 2 ;;
esac
# Root is needed (real cgroups, mounts, namespaces): as root it runs as is; another user gets
# it through sudo where sudo exists (minimal Debian hosts often have none: then run it as root).
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then exec sudo -E "$PWD/$(basename "$0")" "$@"; fi
  echo "$(basename "$0"): run as root (there is no sudo here: su -c $0, or log in as root)" >&2
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
# The host suite in the guests (the test binary is already built; vmhost builds the image once).
hosts_failed=()
for m in "${modes[@]}"; do
  # shellcheck disable=SC2086 # "v2 --no-systemd" is two words on purpose
  if ! scripts/vmhost test --cgroup $m; then hosts_failed+=("$m"); fi
done
if [ ${#hosts_failed[@]} -gt 0 ]; then
  echo "test.sh: the host suite failed in: ${hosts_failed[*]}" >&2
  exit 1
fi
echo "host suite: passed in ${#modes[@]} guest(s): ${modes[*]}"
