#!/bin/bash
# Host side, beside `scripts/vmhost run --gdb SOCKET --out OUT ...`: when the guest's heartbeat
# (OUT/hb, or OUT/kallsyms before the first beat) is 45 s old, read its vCPUs through the
# gdbstub twice, 30 s apart, into OUT/stacks.txt. The guest is left to vmhost's --timeout.
out=$1; sock=$2
stacks=$(cd "$(dirname "$0")/../../../.." && pwd)/scripts/vmhost.d/stacks
while sleep 5; do
  [ -e "$out/kallsyms" ] || continue
  [ -S "$sock" ] || exit 0 # QEMU removes its socket when it exits
  hb=$out/hb; [ -e "$hb" ] || hb=$out/kallsyms
  age=$(( $(date +%s) - $(stat -c %Y "$hb") ))
  if [ "$age" -ge 45 ]; then
    echo "hb stale ${age}s at $(date +%T)" >> "$out/stacks.txt"
    python3 "$stacks" "$sock" "$out/kallsyms" --samples 6 --interval 2 >> "$out/stacks.txt" 2>&1
    sleep 30
    python3 "$stacks" "$sock" "$out/kallsyms" --samples 4 --interval 2 >> "$out/stacks.txt" 2>&1
    exit 0
  fi
done
