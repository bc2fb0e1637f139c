#!/usr/bin/env bash
# tests/build_current.sh: the fixture every test requires (ctest adds it to any selection):
# the build directory holds the build of the sources beside it. ctest does not build, and
# the scripts run from the source tree: after a merge without a rebuild, new test scripts
# would check old binaries and fail in ways that look like flakes (a status the old code
# answered, a mount it made). The build tool's own dry run says whether anything would be
# compiled or linked; then nothing runs until the build is redone.
set -euo pipefail
dir=${AIRLOCK_BINARY_DIR:?}
gen=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$dir/CMakeCache.txt")
case "$gen" in
  "Unix Makefiles") tool=(make -n -C "$dir") ;;
  Ninja) tool=(ninja -n -C "$dir") ;;
  *) echo "build_current: the $gen generator has no dry run known here: SKIP"; exit 0 ;;
esac
if ! out=$("${tool[@]}" 2>&1); then
  echo "build_current: '${tool[*]}' failed:" >&2
  printf '%s\n' "$out" | tail -20 | sed 's/^/    /' >&2
  exit 1
fi
steps=$(grep -oE '(Building|Linking) C[^"]*' <<<"$out" || true)
if [ -n "$steps" ]; then
  echo "build_current: $dir is older than the sources in ${AIRLOCK_SOURCE_DIR:-its source tree}:" \
    "$(wc -l <<<"$steps") build steps are pending, the tests would run old binaries; first:" >&2
  head -5 <<<"$steps" | sed 's/^/    /' >&2
  echo "  rebuild it (cmake --build $dir -j2), then run the tests again" >&2
  exit 1
fi
echo "build_current: $dir is up to date"
