#!/usr/bin/env bash
# bench/kernel_bench.sh: the cost of a Python context (bench/kernel_bench.py), in the
# code-interpreter-v1 template's Python (tests/unit/vmm/guest/lib/run-py finds it).
#
#   bench/kernel_bench.sh [--ref REV] [--rounds N] [--execs N]
#
#   --ref REV   also measure the kernel of git revision REV (its vmm/guest/lib), interleaved
#               with the current one
# Jupyter's ipykernel is measured too when the template's Python has it (not installed in
# code-interpreter-v1: AIRLOCK_KERNEL_ROOTFS=<a root file system with python3-ipykernel>).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
work=$(mktemp -d /tmp/al-kernel-bench.$$.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$here/kernel_bench.py" "$top/tests/unit/vmm/guest/lib/test_kernel.py" "$work/"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ref)
      mkdir -p "$work/ref"
      for f in $(git -C "$top" ls-tree --name-only "$2" vmm/guest/lib/); do
        git -C "$top" show "$2:$f" > "$work/ref/$(basename "$f")"
      done
      args+=(--ref /tmp/test/ref); shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
chmod -R a+rX "$work"
"$top/tests/unit/vmm/guest/lib/run-py" "$work/kernel_bench.py" "${args[@]+"${args[@]}"}"
