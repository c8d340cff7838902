#!/usr/bin/env bash
# Formats every C++ file of the project with the root .clang-format.
#   deploy/format.sh           rewrite files in place
#   deploy/format.sh --check   list files that differ and exit 1 (CTest runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format.sh: clang-format is not installed" >&2; exit 1; }
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cc' '*.h' '*.cu' 2>/dev/null ||
                     find . -path ./build -prune -o \( -name '*.cc' -o -name '*.h' \) -print)
[ ${#files[@]} -gt 0 ] || exit 0
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format.sh: these files are not clang-formatted (run deploy/format.sh): ${bad[*]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
