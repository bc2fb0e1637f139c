#!/usr/bin/env bash
# bench/cp_ab.sh: compare cp_bench configurations on a noisy machine, in JSON lines.
#
#   cp_ab.sh RUNS "OPTIONS A" "OPTIONS B" ...     e.g. cp_ab.sh 5 "-k 8" "-k 16"
#
# One run of cp_bench's c=50 phase varies by about 15% from the next on the 2-core
# development VM (and its CPU per creation by up to 30%), so a single run of each of two
# configurations says nothing. This runs every configuration in turn, RUNS rounds
# (A B A B ...: slow drifts of the machine hit both alike), and prints per configuration and
# figure of the create phases (create_c1_*, create_c50_*, with -W create_c1_cold_*) and of
# the references (vmm_direct_*, bwrap_true_*) the median, the smallest and the largest value:
#   {"bench":"cp_ab","config":"-k 8","metric":"create_c50_p95","median":...,"min":...,
#    "max":...,"runs":5}
# Each cp_bench run: -n 40 -N 150 -c 50 -i 20 -m 0 -r 10 (CP_AB_BASE replaces these) plus
# the configuration's options; runs hold /tmp/airlock-bench.lock, so other benchmarks wait.
# cp_bench needs root and makes its own network namespace (loopback only).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
runs=$1
shift
case $runs in '' | *[!0-9]* | 0) echo "cp_ab: RUNS must be a positive number" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
bench=${CP_AB_BENCH:-}
if [ -z "$bench" ]; then
  for c in "$here/cp_bench" "$here/../build/bench/cp_bench"; do
    [ -x "$c" ] && { bench=$c; break; }
  done
fi
[ -x "$bench" ] || { echo "cp_ab: cp_bench not found (build it, or set CP_AB_BENCH)" >&2; exit 1; }
base=${CP_AB_BASE:--n 40 -N 150 -c 50 -i 20 -m 0 -r 10}
out=$(mktemp -d /tmp/al-cp-ab-$$.XXXX)
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= runs; r++)); do
  i=0
  for o in "$@"; do
    # shellcheck disable=SC2086 # the options are words
    if ! flock /tmp/airlock-bench.lock "$bench" $base $o >"$out/run" 2>"$out/err"; then
      echo "cp_ab: cp_bench $base $o failed:" >&2
      tail -5 "$out/err" >&2
      exit 1
    fi
    grep -E '"metric":"(create_c|vmm_direct_|bwrap_true_)' "$out/run" >>"$out/$i" || true
    echo "cp_ab: round $r/$runs, [$o] done" >&2
    i=$((i + 1))
  done
done
i=0
for o in "$@"; do
  python3 - "$out/$i" "$o" <<'PY'
import collections, json, statistics, sys
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    j = json.loads(line)
    vals[j["metric"]].append(j["value"])
for metric, v in vals.items():
    print(json.dumps({"bench": "cp_ab", "config": sys.argv[2], "metric": metric,
                      "median": round(statistics.median(v), 3), "min": min(v), "max": max(v),
                      "runs": len(v)}))
PY
  i=$((i + 1))
done
