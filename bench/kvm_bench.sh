#!/usr/bin/env bash
# bench/kvm_bench.sh: KVM backend figures as JSON lines, measured under the nested harness
# (tests/kvm: an L1 QEMU/TCG guest with kvm-amd). TCG-nested figures are NOT bare-metal
# figures: every guest instruction that exits, and the L1 kernel itself, run under TCG.
# docs/kvm.md says how to measure on a host with real KVM.
#
#   bench/kvm_bench.sh            (AIRLOCK_BIN=<build>/bin, default build/bin: Release)
#   AIRLOCK_KVM_BENCH_RUNS=N      boots and restores per figure (default 3)
#   AIRLOCK_KVM_BENCH_CREATES=N   sandboxes created through airlock-vmm --backend kvm for the
#                                 create p50/p99 (default 20)
# Scenarios: bench (the VMM alone: boot, snapshot, restore, RSS), agent (the real agent:
# boot and restore to /health), benchvmm (airlock-vmm --backend kvm: first sandbox of a
# template, create -> ready p50/p99 by restore, VMM and supervisor memory, POST /snapshot).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export AIRLOCK_SOURCE_DIR=$top
export AIRLOCK_BIN=${AIRLOCK_BIN:-$top/build/bin}
export AIRLOCK_KVM_RELEASE_BIN=${AIRLOCK_KVM_RELEASE_BIN:-$top/build/bin/airlock-vmm-kvm}
out=$(mktemp /tmp/al-kvm-bench-$$.XXXXXX)
trap 'rm -f "$out"' EXIT
echo '{"bench":"kvm","metric":"note","value":0,"unit":"","note":"TCG-nested (QEMU TCG L1 with kvm-amd, L2 airlock guest): not bare-metal figures; memory figures (RSS) do not depend on the nesting"}'
# The payload-based figures (boot, snapshot, restore, memory), then the real agent's
# (boot to agent healthy, restore to agent healthy) from the agent scenario.
for scenario in bench agent benchvmm; do
  "$top/tests/kvm/nested.sh" "$scenario" > "$out" 2>&1 || { cat "$out" >&2; exit 1; }
  sed -n 's/^bench-json: //p' "$out" | sort -u
done
