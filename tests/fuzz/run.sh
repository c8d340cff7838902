#!/usr/bin/env bash
# Fuzzes fireflyer's input parsers, request handlers and wire with libFuzzer (Clang), ASan and UBSan.
# See tests/fuzz/README.md.
#
#   tests/fuzz/run.sh                  # every target for 20 s (what CI runs)
#   tests/fuzz/run.sh --seconds 600    # the campaign: longer per target
#   tests/fuzz/run.sh --only trace     # one target
#
# Builds build-fuzz/ (CC=clang CXX=clang++ -DFF_FUZZ=ON) with the daemons no target links (for the
# thread-safety analysis), runs each target from its seed corpus
# (tests/fuzz/corpus/<target>, plus deploy/config for the TOML targets) and a scratch corpus,
# FF_JOBS targets at a time (default: the number of cores), and prints executions per target. A
# crash, hang (10 s), leak, sanitizer report or memory blow-up fails the run; the input is kept
# under build-fuzz/findings/<target>/ with the command that replays it. Fix the bug, then add the
# input to tests/fuzz/corpus/<target>/ as a regression case.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=20
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 64 ;;
  esac
done
command -v clang++ >/dev/null || { echo "run.sh: clang is not installed (deploy/install-deps.sh)" >&2; exit 1; }

targets=(config trace cluster meta mgmtd storage hai hfreduce)
[ -n "$only" ] && targets=("$only")
dir=build-fuzz
jobs="${FF_JOBS:-$(nproc)}"
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
mkdir -p "$dir"
CC=clang CXX=clang++ cmake -G Ninja -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFF_FUZZ=ON \
  -DFF_WITH_TORCH=OFF -DFF_WITH_CUDA=OFF -DFF_WITH_VERBS=OFF >"$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log"; echo "run.sh: cmake configure of $dir failed" >&2; exit 1; }
# The daemons no fuzz target links are built too: Clang's thread-safety analysis (-Wthread-safety,
# an error) checks the lock discipline of all of them (cmake/FFCompiler.cmake).
checked=()
[ -z "$only" ] && checked=(hai-agent hai-health hai-web fs3-fuse hfreduce-store)
cmake --build "$dir" -j "$jobs" --target "${targets[@]/#/fuzz_}" "${checked[@]}"

# The targets run $jobs at a time (each one is single-threaded), then report in order.
run_target() {  # run_target TARGET: writes its log and exit status under $dir
  local t="$1" seeds=("tests/fuzz/corpus/$1")
  case "$t" in config|cluster) seeds+=(deploy/config) ;; esac
  mkdir -p "$dir/corpus/$t" "$dir/findings/$t"
  set +e
  "$dir/tests/fuzz/fuzz_$t" "$dir/corpus/$t" "${seeds[@]}" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 -artifact_prefix="$dir/findings/$t/" \
    >"$dir/fuzz-$t.log" 2>&1
  echo $? >"$dir/fuzz-$t.rc"
}
running=0
for t in "${targets[@]}"; do
  rm -f "$dir/fuzz-$t.rc"
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

status=0
total=0
for t in "${targets[@]}"; do
  log="$dir/fuzz-$t.log"
  findings="$dir/findings/$t"
  rc=$(cat "$dir/fuzz-$t.rc" 2>/dev/null || echo 1)
  execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo 0)
  total=$((total + execs))
  if [ "$rc" -ne 0 ]; then
    status=1
    echo "  $t: FAILED after $execs executions (exit $rc):" >&2
    grep -E "ERROR|SUMMARY|==[0-9]+==|Test unit written" "$log" | head -8 >&2
    for f in "$findings"/*; do
      [ -e "$f" ] && echo "    replay: $dir/tests/fuzz/fuzz_$t $f" >&2
    done
  else
    printf '  %-8s %12d executions in %s s, no crash, hang or sanitizer report\n' "$t" "$execs" "$seconds"
  fi
done
echo "fuzz: $total executions in all, $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
