#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test through CTest,
# then builds the unit tests under AddressSanitizer and runs them again.
#
#   deploy/test.sh                      # everything (what CI runs)
#   deploy/test.sh --sanitizers ""      # skip the sanitizer pass
#   deploy/test.sh --sanitizers "address thread undefined"
#   deploy/test.sh --slow               # also the slow suites (long benchmarks, soak tests)
#   FF_FUZZ_SECONDS=600 deploy/test.sh  # a longer fuzzing run (default 20 s per target)
#
# Build trees: build/ (RelWithDebInfo), build-fuzz/ (Clang, libFuzzer) and build-<sanitizer>/.
# ccache is used when installed.
# Environment: FF_JOBS (parallel build and test jobs; default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitizers="address"
slow=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitizers) sanitizers="$2"; shift 2 ;;
    --slow) slow=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 64 ;;
  esac
done

jobs="${FF_JOBS:-$(nproc)}"
# Let ccache hit across clones in different directories (CI builds a fresh clone each time).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
start=$(date +%s)

bash deploy/install-deps.sh

configure() {  # configure BUILD_DIR [cmake args...]
  local dir="$1"; shift
  cmake -G Ninja -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; echo "test.sh: cmake configure of $dir failed" >&2; exit 1; }
  sed -n '/fireflyer .* configuration/,/^-- $/p' "$dir.configure.log"
}

mkdir -p build
# The PyTorch integration is required here (AUTO would quietly drop its tests without torch).
configure build -DFF_WITH_TORCH=ON
cmake --build build -j "$jobs"

label_args=(-LE slow)
[ "$slow" -eq 1 ] && label_args=()
status=0
echo "== tests (build/) =="
ctest --test-dir build -j "$jobs" --output-on-failure "${label_args[@]}" || status=1

echo "== fuzz targets, briefly (build-fuzz/; the campaign: tests/fuzz/run.sh --seconds 600) =="
tests/fuzz/run.sh --seconds "${FF_FUZZ_SECONDS:-20}" || status=1

for san in $sanitizers; do
  dir="build-$san"
  mkdir -p "$dir"
  echo "== unit tests under FF_SANITIZE=$san ($dir/) =="
  configure "$dir" -DFF_SANITIZE="$san" -DFF_PYTHON_PTH=OFF  # the venv keeps pointing at build/
  cmake --build "$dir" -j "$jobs" --target unit-tests
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure -L unit || status=1
done

# What a user does next: import the packages in the project's venv, from anywhere.
if ! (repo="$PWD" && cd / && "$repo/.venv/bin/python" -c "import haiscale._C, fs3client, hai_job") >/dev/null; then
  echo "test.sh: after the tests, the venv no longer imports haiscale, fs3client and hai_job" >&2
  status=1
fi

echo "test.sh: finished in $(( $(date +%s) - start )) s, $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
