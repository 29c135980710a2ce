#!/usr/bin/env bash
# The whole test suite, as CI runs it (docs/TESTING.md, "Two lanes"), in two lanes:
#   check   unprivileged and fast: format, clippy, unit and property tests, rustdoc, the ring
#           and layer checks, shellcheck, the MSRV build. Needs no root, changes nothing on the
#           machine; run it before every commit.
#   system  as root: set-up, every test that needs root (real cgroups, sandboxes, systemd, the
#           API server, Redis), then the host suite in a throw-away VM with pure cgroup v2
#           under systemd (the layout most users have; scripts/vmhost), and a pure v2 node
#           there: containerd + runc + the NRI plugin + a CRI pod (scripts/k8s/v2-node).
#
#   ./test.sh                  set-up, the check lane, then the system lane (CI: .ci/run)
#   ./test.sh check            the check lane alone, as any user (scripts/setup installs its tools)
#   ./test.sh system           set-up and the system lane alone
#   ./test.sh [system] --all-hosts   the host suite in every guest: v2, hybrid, v1, each with
#                                    systemd and without
# Each lane prints its wall time at the end ("check lane: 3m12s").
set -euo pipefail
cd "$(dirname "$0")"

# Every test target of the workspace is in exactly one lane (the check lane checks it).
# Pure: no root, no service, nothing outside the process and a temporary directory.
check_tests=(--test props_units --test props_plan --test props_backends --test props_proxy
  # bulkhead-agent: the reconcile pass against a mock API server
  --test reconcile)
# Root, real services or both.
system_tests=(
  # bulkhead-agent: `bulkhead agent ...` execs the agent
  --test agent_exec
  # bulkhead-agent: the NRI plugin's process, its readiness over HTTP
  --test nri_ready
  # bulkhead-agent: a pod's stall read from its real cgroup (PSI of busy loops)
  --test pod_psi
  # bulkhead-cgroups: the backends' fixtures on real cgroupfs
  --test fixtures
  # bulkhead-agent: a real etcd + kube-apiserver (it grows a huge page pool, which the CLI's
  # huge page tests check unchanged: not beside them)
  --test agent
  # bulkhead-bench: the load generator against a real redis-server, bench isolation in miniature
  --test loadgen --test isolation
)
# The CLI's system suite, the longest.
suite_tests=(
  # bulkhead-cli: the binary against real cgroups, sandboxes, systemd, socket activation: one
  # binary, a module per area (escape::, hosts::, spawn::, boot::, ...)
  --test system
)
# Its tests run two per CPU: most of their time they wait (on daemons, sandboxes, timeouts;
# the suite used 1.4 of 2 CPUs with libtest's one per CPU), and a test waiting its turn in the
# suite's admission (tests/system/main.rs `suite`) holds a libtest thread, idle, meanwhile.
suite_threads=$((2 * $(nproc)))

# Root too, run beside suite_tests (after the others, which include the timing-sensitive
# isolation bench): they wait on daemons most of their time and touch nothing the suite
# checks.
# bulkhead-agent: a real kubelet node (etcd, kube-apiserver, scheduler, containerd, kubelet)
beside_tests=(--test node)

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
}

lane=all
modes=("v2")
for arg in "$@"; do
  case $arg in
    check | system) lane=$arg ;;
    --all-hosts) modes=("v2" "hybrid" "v1" "v2 --no-systemd" "hybrid --no-systemd" "v1 --no-systemd") ;;
    -h | --help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

# The system lane needs root (real cgroups, mounts, namespaces): another user gets it through
# sudo where sudo exists (minimal Debian hosts often have none: then run it as root).
if [ "$lane" != check ] && [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then exec sudo -E "$PWD/$(basename "$0")" "$@"; fi
  echo "$(basename "$0"): the system lane needs root (no sudo here: su -c '$0 $*', or log in as root; './test.sh check' needs none)" >&2
  exit 1
fi

log_dir=$(mktemp -d)
: >"$log_dir/tests.log"
trap 'rm -rf "$log_dir"' EXIT
lane_times=()
skipped=()

# Prints a duration in seconds as 3m12s.
span() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# Runs one step of a lane, saying its name and time: step NAME COMMAND ARGS...
step() {
  local name=$1 t0=$SECONDS
  shift
  echo "== $name"
  "$@"
  echo "== $name: $(span $((SECONDS - t0)))"
}

# A tool the check lane needs: missing, it fails the run in CI and is a SKIPPED step elsewhere.
have() {
  if command -v "$1" >/dev/null; then return 0; fi
  if [ "${CI:-}" = true ]; then
    echo "test.sh: $1 is missing (scripts/setup installs it)" >&2
    exit 1
  fi
  echo "SKIPPED: $2 ($1 is missing; scripts/setup installs it)"
  skipped+=("$2")
  return 1
}

# Runs cargo test with the arguments and adds up its results (a SKIPPED prerequisite is said).
cargo_test() {
  local log
  log=$(mktemp -p "$log_dir")
  local rc=0
  cargo test --locked "$@" 2>&1 | tee "$log" || rc=$?
  if grep -q "^SKIPPED:" "$log"; then
    echo "test.sh: some tests were skipped (see SKIPPED lines above)" >&2
  fi
  cat "$log" >>"$log_dir/tests.log"
  return "$rc"
}

# Every shell script of the repository: *.sh and the scripts under scripts/, dist/ and lab/
# with a shell #!; not lab/runs/ (the scripts a past run used, kept as its record).
shell_scripts() {
  find . -path ./target -prune -o -path ./.git -prune -o -path ./lab/runs -prune \
    -o -name '*.sh' -type f -print | sed 's|^\./||'
  find .ci scripts dist lab -path lab/runs -prune -o -type f -print | while read -r f; do
    if head -n1 "$f" | grep -Eq '^#!.*\b(ba)?sh\b'; then echo "$f"; fi
  done
}

# lab/ab on two "builds" whose command prints the same metric: every paired ratio is 1.0, and
# a missing metric fails.
lab_ab_self_test() {
  local out
  out=$(lab/ab --rounds 4 --json --metric a.1 /bin/sh /bin/sh -- -c 'echo "{\"a\": [1, 2.5]}"')
  python3 -c 'import json, sys; d = json.loads(sys.argv[1]); r = d["ratios"]["metric"]
assert d["builds"]["A"]["metric"]["median"] == 2.5 and r["median"] == 1.0 and r["within_noise"], d' "$out"
  if lab/ab --rounds 2 --metric a.9 /bin/sh /bin/sh -- -c 'echo "{}"' 2>/dev/null; then
    echo "lab/ab: a missing metric did not fail" >&2
    return 1
  fi
}

# cargo doc with every rustdoc warning an error. The CLI's binary is named bulkhead like the
# library, so it is documented on its own: in one run their pages would collide.
rustdoc_all() {
  RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps -q -p bulkhead-cli
  RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps -q --workspace --exclude bulkhead-cli
}

check_lane() {
  local t0=$SECONDS
  step "format" cargo fmt --all -- --check
  step "clippy" cargo clippy --locked --workspace --all-targets -q -- -D warnings
  step "manifests" scripts/check-manifests
  step "lanes cover every test target" scripts/check-lanes "${check_tests[@]}" -- "${system_tests[@]}" "${suite_tests[@]}" "${beside_tests[@]}"
  step "unit and property tests" cargo_test --workspace --lib --bins "${check_tests[@]}"
  # Once more with every CPU kept busy and 3,000 idle processes beside them: no test may
  # depend on a quiet machine (issue 38). Built already; the counts are not added twice.
  step "unit and property tests, busy host" scripts/under-load --idle 3000 -- \
    cargo test --locked -q --workspace --lib --bins "${check_tests[@]}"
  step "rustdoc" rustdoc_all
  step "module rings" sh -c 'scripts/check-rings --self-test && scripts/check-rings'
  # ---- layer check (issue 27): scripts/check-architecture checks docs/ARCHITECTURE.md's
  # import table against the code; it runs here once it exists. ----
  if [ -x scripts/check-architecture ]; then step "layers" scripts/check-architecture; fi
  step "lab/ab pairs and summarises" lab_ab_self_test
  if have cargo-deny "licences, bans and sources (cargo deny)"; then
    step "licences, bans and sources" cargo deny --locked --log-level error check licenses bans sources
  fi
  if have shellcheck shellcheck; then
    local scripts
    mapfile -t scripts < <(shell_scripts | sort -u)
    step "shellcheck (${#scripts[@]} scripts)" shellcheck -x -P SCRIPTDIR "${scripts[@]}"
  fi
  local v
  v=$(scripts/msrv)
  if have rustup "MSRV $v build"; then
    step "MSRV $v build" cargo "+$v" check --locked --workspace --all-targets -q
  fi
  lane_times+=("check lane: $(span $((SECONDS - t0)))")
  echo "${lane_times[-1]}"
}

# The executables of the test targets named by `--test NAME` arguments, built as part of the
# workspace (the same features as the lane's build, so nothing is built again).
test_exes() {
  cargo test --locked --workspace "$@" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])'
}

# The system lane's tests as root: every target built once; system_tests; then beside_tests
# in the background, run as cargo would (from their package's directory; cargo would hold
# the build directory's lock while tests run, so they run without it), beside suite_tests in
# the foreground. Their output is shown when both are done.
root_tests() {
  cargo test --locked --workspace "${system_tests[@]}" "${suite_tests[@]}" "${beside_tests[@]}" --no-run -q
  cargo_test --workspace "${system_tests[@]}" || return
  local exes beside_log=$log_dir/beside.log beside_rc=0 rc=0 pid exe
  mapfile -t exes < <(test_exes "${beside_tests[@]}")
  if [ ${#exes[@]} -ne $((${#beside_tests[@]} / 2)) ]; then
    echo "test.sh: found ${#exes[@]} executables for ${beside_tests[*]}" >&2
    return 1
  fi
  (
    cd crates/bulkhead-agent || exit 1
    for exe in "${exes[@]}"; do
      echo "     Running $exe (beside ${suite_tests[*]})"
      "$exe" || exit 1
    done
  ) >"$beside_log" 2>&1 &
  pid=$!
  cargo_test --workspace "${suite_tests[@]}" -- --test-threads="$suite_threads" || rc=$?
  wait "$pid" || beside_rc=$?
  echo "== ${beside_tests[*]}, run beside the above:"
  cat "$beside_log"
  cat "$beside_log" >>"$log_dir/tests.log"
  [ "$rc" = 0 ] && [ "$beside_rc" = 0 ]
}

system_lane() {
  local t0=$SECONDS
  step "tests as root" root_tests
  # The host suite in the guests (the test binary is already built; vmhost builds the image once).
  local hosts_failed=() m
  # The kernel matrix (issue 38): after the suite, the v2 guest's kernel is made one without
  # BFQ, as most cloud kernels are, in the same boot (scripts/vmhost.d/no-bfq), and the I/O
  # and NRI-mapping checks run again: they pass there with findings, not failures.
  for m in "${modes[@]}"; do
    local again=()
    [ "$m" != v2 ] || again=(--no-bfq-too "hosts::io,hosts::nri")
    # shellcheck disable=SC2086 # "v2 --no-systemd" is two words on purpose
    if ! scripts/vmhost test --cgroup $m "${again[@]}"; then hosts_failed+=("$m"); fi
  done
  # A pure v2 node (issue 45 #1, the short form): containerd + runc + the NRI plugin + a pod
  # made through the CRI, in the v2 guest, with BFQ on its disk and then without, in one boot
  # (docs/TESTING.md).
  if ! scripts/k8s/v2-node; then hosts_failed+=("v2 node (containerd + NRI + a CRI pod)"); fi
  if [ ${#hosts_failed[@]} -gt 0 ]; then
    echo "test.sh: the host suite failed in: ${hosts_failed[*]}" >&2
    exit 1
  fi
  echo "host suite: passed in ${#modes[@]} guest(s): ${modes[*]}, v2 then without BFQ (hosts::io, hosts::nri); the v2 node with and without BFQ"
  lane_times+=("system lane: $(span $((SECONDS - t0)))")
  echo "${lane_times[-1]}"
}

start=$SECONDS
[ "$lane" = check ] || step "set-up" scripts/setup
[ "$lane" = system ] || check_lane
[ "$lane" = check ] || system_lane
# Both lanes' times together at the end of a whole run (each lane also says its own).
if [ ${#lane_times[@]} -gt 1 ]; then printf '%s\n' "${lane_times[@]}"; fi
echo "test.sh: $(span $((SECONDS - start))) in all"
if [ ${#skipped[@]} -gt 0 ]; then echo "test.sh: skipped: ${skipped[*]}"; fi
passed=$(awk '/^test result:/ {p += $4} END {print p+0}' "$log_dir/tests.log")
failed=$(awk '/^test result:/ {f += $6} END {print f+0}' "$log_dir/tests.log")
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
