#!/usr/bin/env bash
# tests/format_check.sh: every C source and header in git is formatted by .clang-format.
# Prints the files that are not (and how to fix them); exits 1 if there is any.
set -uo pipefail
src=${AIRLOCK_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 1
command -v clang-format >/dev/null || { echo "format_check: clang-format is not installed (deploy/setup installs it)" >&2; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h')
else
  mapfile -t files < <(find . -path ./build\* -prune -o -path ./.deps -prune -o \( -name '*.c' -o -name '*.h' \) -print)
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format_check: ${#bad[@]} of ${#files[@]} files are not formatted; run:"
  printf '  clang-format -i %s\n' "${bad[@]}"
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
