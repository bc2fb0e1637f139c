#!/usr/bin/env bash
# bench/jail_bench_smoke.sh: a short run of jail_bench (ctest label "bench") on a busybox
# template, so the benchmark keeps building and running. The figures that count come from
# a Release build on a quiet machine with a Debian template (see jail_bench.c's header).
set -euo pipefail
: "${AIRLOCK_BINARY_DIR:?run through ctest}"
[ "$(id -u)" = 0 ] || { echo "jail_bench_smoke: needs root" >&2; exit 1; }
T=$(mktemp -d /tmp/al-jailbench-smoke-$$.XXXX)
trap 'rm -rf "$T"' EXIT
bb=$(command -v busybox)
mkdir -p "$T/tpl/rootfs"/{bin,etc,proc,dev,sys,tmp,root,home/user,.airlock}
cp "$bb" "$T/tpl/rootfs/bin/busybox"
ln -s busybox "$T/tpl/rootfs/bin/sh"
printf 'root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n' > "$T/tpl/rootfs/etc/passwd"
chmod 0755 "$T" "$T/tpl"
echo '{"name":"busybox"}' > "$T/tpl/template.json"
out=$("$AIRLOCK_BINARY_DIR/bench/jail_bench" --template "$T/tpl" --samples 5 --density 10 --max-seconds 120)
echo "$out"
for m in create_healthy_p50_ms create_healthy_p99_ms idle_sandboxes_held memory_per_idle_sandbox_kib; do
  echo "$out" | grep -q "\"metric\":\"$m\"" || { echo "jail_bench_smoke: no $m" >&2; exit 1; }
done
echo "$out" | grep -q '"metric":"idle_sandboxes_held","value":10.000' ||
  { echo "jail_bench_smoke: did not hold 10 sandboxes" >&2; exit 1; }
