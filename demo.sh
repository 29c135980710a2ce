#!/usr/bin/env bash
# The main demo on a fresh machine (run as root): install only what it runs, build the
# bulkhead binary, create the default database slices, show that a command run in the helper
# slice is confined, show status, start an ephemeral sandbox in the helper slice, serve a
# sandboxed web server on demand, then remove everything again.
set -euo pipefail
cd "$(dirname "$0")"
# Root is needed (real cgroups, mounts, namespaces): as root it runs as is; another user gets
# it through sudo where sudo exists (minimal Debian hosts often have none: then run it as root).
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then exec sudo -E "$PWD/$(basename "$0")" "$@"; fi
  echo "$(basename "$0"): run as root (there is no sudo here: su -c $0, or log in as root)" >&2
  exit 1
fi
# Only what the demo runs: a C linker and curl (Debian packages), a Rust toolchain (rustup,
# when cargo is missing or older than the workspace's rust-version), a static busybox for the
# sandbox's root. The test command (./test.sh) installs the rest (scripts/setup).
need=()
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v curl >/dev/null || need+=(curl ca-certificates)
ldd /bin/busybox 2>&1 | grep -q "not a dynamic" || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  echo "demo.sh: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
want=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml | head -1)
have=$(cargo --version 2>/dev/null | awk '{print $2}')
if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" != "$want" ]; then
  echo "demo.sh: installing Rust $want or newer with rustup (cargo: ${have:-none})"
  curl -sSf https://sh.rustup.rs | sh -s -- -y -q --profile minimal
  export PATH="$HOME/.cargo/bin:$PATH"
fi
echo "demo.sh: building bulkhead (release; the first build takes a few minutes)"
cargo build --release --locked -q -p bulkhead-cli --bin bulkhead
B=target/release/bulkhead
trap '$B destroy --kill -q || true' EXIT
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
say bulkhead plan show;   $B plan show
say bulkhead apply;       $B apply
say bulkhead apply;       $B apply
say "bulkhead run --slice db-helper -- sh -c 'cat /proc/self/cgroup'"
$B run --slice db-helper -- sh -c 'cat /proc/self/cgroup'
say "two CPU hogs: one in db-helper (CPUWeight=idle), one in db-server (CPUWeight=1000), pinned to CPU 0"
$B run --slice db-helper -- taskset -c 0 sh -c 'while :; do :; done' & H=$!
$B run --slice db-server -- taskset -c 0 sh -c 'while :; do :; done' & S=$!
sleep 2
say bulkhead status;      $B status --interval 2
kill $H $S; wait $H $S 2>/dev/null || true
# A sandbox: a throw-away copy of a tiny busybox root, in the helper slice.
ROOT=$(mktemp -d /var/tmp/bulkhead-demo-root.XXXXXX)
trap '$B destroy --kill -q || true; rm -rf "$ROOT"' EXIT
mkdir -p "$ROOT"/{bin,etc,proc,sys,dev,tmp}
cp /bin/busybox "$ROOT/bin/" && for a in sh ps ls cat hostname id ip rm echo; do ln -s busybox "$ROOT/bin/$a"; done
echo 'root:x:0:0:root:/root:/bin/sh' > "$ROOT/etc/passwd"
say "bulkhead spawn -D ROOT --ephemeral --slice db-helper -v -- sh -c 'ps; ip link; rm /bin/ls; cat /proc/self/cgroup'"
$B spawn -D "$ROOT" --ephemeral --slice db-helper --hostname demo -v -- sh -c 'hostname; ps; ip link; rm /bin/ls && echo "removed /bin/ls in the copy"; cat /proc/self/cgroup'
echo "the original root still has /bin/ls: $(ls "$ROOT/bin/ls")"
# Socket activation: busybox httpd in an ephemeral sandbox, started by the first request.
ln -s busybox "$ROOT/bin/httpd"; mkdir -p "$ROOT/www"
echo "hello from a sandbox started on demand" > "$ROOT/www/index.html"
cat > "$ROOT.toml" <<PLAN
[socket.web]
listen = ["127.0.0.1:18080"]
backend = "127.0.0.1:8000"
idle_timeout = "2s"
[socket.web.target]
rootfs = "$ROOT"
command = ["/bin/httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"]
slice = "db-helper"
PLAN
SV=
trap '$B destroy --kill -q || true; [ -n "$SV" ] && kill $SV 2>/dev/null; rm -rf "$ROOT" "$ROOT.toml"' EXIT
say "bulkhead serve -c web.toml &   # listens; nothing runs until the first connection"
$B -c "$ROOT.toml" serve & SV=$!
sleep 0.5
say "curl http://127.0.0.1:18080/   # twice: a cold start, then a warm request"
curl -s -w 'first byte after %{time_starttransfer}s\n' http://127.0.0.1:18080/
curl -s -w 'first byte after %{time_starttransfer}s\n' http://127.0.0.1:18080/
say bulkhead status;      $B status --interval 0.2 | tail -3
sleep 3
say "bulkhead status   # idle_timeout (2s) later: the target is stopped"
$B status --interval 0.2 | tail -3
kill $SV; wait $SV 2>/dev/null || true; SV=
rm -f "$ROOT.toml"
say bulkhead destroy;     $B destroy
rm -rf "$ROOT"
trap - EXIT
