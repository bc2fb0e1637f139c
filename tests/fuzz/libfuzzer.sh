#!/usr/bin/env bash
# tests/fuzz/libfuzzer.sh: every libFuzzer target of an AIRLOCK_FUZZ=ON build, run for a
# bounded time each from its seed corpus (tests/fuzz/corpus/<target>/). New inputs go to a
# scratch directory (the committed corpus is not touched); a crash, leak, UBSan finding or
# timeout fails the run and its reproducer is kept under $AIRLOCK_FUZZ_ARTIFACTS.
#
#   libfuzzer.sh BUILD_DIR [SECONDS_PER_TARGET]      (default 4)
#
# The ctest fuzz_libfuzzer runs it on the build-fuzz/ tree tests/run makes. Without that
# tree it fails under CI (tests/run must build it) and skips elsewhere, saying so.
set -uo pipefail
build=${1:?usage: libfuzzer.sh BUILD_DIR [SECONDS]}
secs=${2:-4}
src=${AIRLOCK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
list=$build/fuzz-targets.txt
if [ ! -f "$list" ]; then
  if [ "${CI:-}" = true ]; then
    echo "libfuzzer: $list is missing: tests/run builds build-fuzz/ (AIRLOCK_FUZZ=ON) first" >&2
    exit 1
  fi
  echo "libfuzzer: no AIRLOCK_FUZZ=ON build at $build: SKIP (tests/run makes one)"
  exit 0
fi
art=${AIRLOCK_FUZZ_ARTIFACTS:-/tmp/airlock-fuzz-artifacts}
mkdir -p "$art"
scratch=$(mktemp -d /tmp/airlock-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
pass=0
fail=0
while read -r t; do
  [ -n "$t" ] || continue
  bin=$build/bin/$t
  if [ ! -x "$bin" ]; then
    echo "FAIL $t: $bin is not built"
    fail=$((fail + 1))
    continue
  fi
  mkdir -p "$scratch/$t"
  seeds=$src/tests/fuzz/corpus/$t
  [ -d "$seeds" ] || seeds=
  if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art/$t-" "$scratch/$t" ${seeds:+"$seeds"} >"$scratch/$t.log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$t.log")
    cov=$(grep -oE 'cov: [0-9]+' "$scratch/$t.log" | tail -1)
    echo "ok   $t: ${runs:-?} runs in ${secs} s, ${cov:-cov: ?}"
    pass=$((pass + 1))
  else
    echo "FAIL $t (reproducer under $art/$t-*):"
    grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$scratch/$t.log" | head -20 | sed 's/^/     /'
    fail=$((fail + 1))
  fi
done <"$list"
echo "libfuzzer: $pass targets passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" -gt 0 ]
