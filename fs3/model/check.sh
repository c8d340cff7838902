#!/usr/bin/env bash
# Checks fs3's chain protocol model (fs3/model/chain.pml) with spin. See fs3/model/README.md.
#
#   fs3/model/check.sh            # the bounded run CI does (about 4 minutes)
#   fs3/model/check.sh --large    # the larger one (about 40 minutes)
#
# Three parts:
#   1. the checker is not vacuous: with a bug the model found put back (-DBUG_...), spin must
#      find a violation (breadth-first, so the counterexample is the shortest one);
#   2. a swarm of random simulations of the model as the code is now, over several sizes and
#      seeds: no assertion may fail;
#   3. a bitstate (supertrace) search of the model as the code is now, bounded in depth and time:
#      no assertion may fail; it prints the states it explored.
# Environment: FF_SPIN_WORK (scratch directory; default a temporary one).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
model="$here/chain.pml"
large=0
case "${1:-}" in
  --large) large=1 ;;
  "") ;;
  -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
  *) echo "check.sh: unknown argument '$1' (see --help)" >&2; exit 64 ;;
esac
for tool in spin gcc; do
  command -v "$tool" >/dev/null || { echo "check.sh: $tool is not installed (deploy/install-deps.sh)" >&2; exit 1; }
done
work="${FF_SPIN_WORK:-$(mktemp -d)}"
mkdir -p "$work"
[ -z "${FF_SPIN_WORK:-}" ] && trap 'rm -rf "$work"' EXIT
status=0

# pan DIR CFLAGS -- SPIN_DEFINES...: builds the verifier for the model with these -D's.
build_pan() {
  local dir="$1" cflags="$2"; shift 2
  mkdir -p "$dir"
  (cd "$dir" && spin -a "$@" "$model" >spin.log 2>&1 && gcc -O2 -w $cflags -o pan pan.c) ||
    { cat "$dir/spin.log" >&2; echo "check.sh: building the verifier in $dir failed" >&2; exit 1; }
}

echo "== 1. each bug the model found, put back, is found again =="
# name | search | spin defines | seconds | what it breaks. Search "bfs": breadth-first, so the
# counterexample is the shortest one; "bitstate:D": depth-first bitstate to depth D, for a bug
# found that way only (BUG_SUCCESSOR_FROM_STALE_ROUTING: about 600 steps deep, with writers that
# start once the crash happened, -DLATE_WRITERS, a search aid; part 3 runs the same search, to the
# same depth, on the model as the code is now: there it completes with no violation).
while IFS='|' read -r bug search defines seconds what; do
  [ -z "$bug" ] && continue
  dir="$work/bug-$bug"
  if [ "$search" = bfs ]; then
    # shellcheck disable=SC2086
    build_pan "$dir" "-DSAFETY -DBFS -DCOLLAPSE" -D"$bug" -DHIDDEN= $defines
    pan_args=(-w26)
  else
    # shellcheck disable=SC2086
    build_pan "$dir" "-DSAFETY -DBITSTATE" -D"$bug" $defines
    pan_args=(-m"${search#bitstate:}" -w30 -c1)
  fi
  start=$(date +%s)
  (cd "$dir" && timeout "$seconds" ./pan "${pan_args[@]}" >out.txt 2>&1) || true
  if grep -q "assertion violated" "$dir/out.txt"; then
    echo "  $bug: found in $(( $(date +%s) - start )) s: $(grep -o 'assertion violated.*' "$dir/out.txt" | head -1)"
  else
    echo "  $bug: NOT found in $seconds s ($what): the model no longer detects it" >&2
    tail -5 "$dir/out.txt" >&2
    status=1
  fi
done <<'EOF'
BUG_LASTSRV_AFTER_ANY_PREDECESSOR|bfs|-DNT=2 -DNW=0 -DNR=0 -DMAXCRASH=0 -DMAXCV=4|600|P5, the chain's data is findable
BUG_SERVE_STALE_ROUTING|bfs|-DNT=2 -DNW=1 -DNR=1 -DMAXCRASH=0 -DMAXCV=4|600|P1/P2, reads after a pause
BUG_SUCCESSOR_FROM_STALE_ROUTING|bitstate:600|-DLATE_WRITERS -DNT=2 -DNW=1 -DNR=1 -DMAXCRASH=1 -DMAXCV=4|300|P4, a write the resync missed
EOF

echo "== 2. random simulations of the model as the code is now =="
seeds=$([ $large -eq 1 ] && echo 400 || echo 60)
runs=0
for defines in "-DNT=2 -DNW=1 -DNR=1 -DMAXCRASH=1 -DMAXCV=6" "-DNT=3 -DNW=2 -DNR=2 -DMAXCRASH=1 -DMAXCV=6" \
               "-DNT=3 -DNW=2 -DNR=2 -DMAXCRASH=2 -DMAXCV=8"; do
  failed=0
  for seed in $(seq 1 "$seeds"); do
    # shellcheck disable=SC2086
    out=$(spin $defines -u100000 -n"$seed" "$model" 2>&1 || true)
    runs=$((runs + 1))
    if grep -qE "assertion violated|Error" <<<"$out"; then
      echo "  $defines seed $seed: $(grep -E 'assertion violated|Error' <<<"$out" | head -1)" >&2
      echo "  replay: spin $defines -n$seed -p -g $model" >&2
      failed=1
      status=1
    fi
  done
  [ $failed -eq 0 ] && echo "  $defines: $seeds seeds, no violation"
done

echo "== 3. bitstate search of the model as the code is now =="
if [ $large -eq 1 ]; then
  searches=("-DLATE_WRITERS -DNT=2 -DNW=1 -DNR=1 -DMAXCRASH=1 -DMAXCV=4|600|600"
            "-DLATE_WRITERS -DNT=2 -DNW=1 -DNR=1 -DMAXCRASH=1 -DMAXCV=5|1000|900"
            "-DNT=2 -DNW=1 -DNR=1 -DMAXCRASH=1 -DMAXCV=5|1000|900" "-DNT=3 -DNW=2 -DNR=2 -DMAXCRASH=1 -DMAXCV=6|2000|1200")
else
  # The first completes (about 5e7 states, 100 s): the search that finds the stale-routing bug.
  searches=("-DLATE_WRITERS -DNT=2 -DNW=1 -DNR=1 -DMAXCRASH=1 -DMAXCV=4|600|400"
            "-DNT=2 -DNW=1 -DNR=1 -DMAXCRASH=1 -DMAXCV=5|400|60")
fi
for s in "${searches[@]}"; do
  IFS='|' read -r defines depth seconds <<<"$s"
  dir="$work/search-$(tr -dc 'A-Za-z0-9' <<<"$defines")"
  # shellcheck disable=SC2086
  build_pan "$dir" "-DSAFETY -DBITSTATE" $defines
  (cd "$dir" && timeout "$seconds" ./pan -m"$depth" -w30 -c1 >out.txt 2>&1) || true
  if grep -qE "assertion violated|errors: [1-9]" "$dir/out.txt"; then
    grep -E "assertion violated|errors:" "$dir/out.txt" >&2
    echo "  replay: cd $dir && ./pan -r" >&2
    status=1
  else
    if stored=$(grep -oE "^ *[0-9.e+]+ states, stored" "$dir/out.txt"); then
      echo "  $defines, depth <= $depth: complete, $(grep -oE '[0-9.e+]+' <<<"$stored" | head -1) states, no violation"
    else
      states=$(grep -oE "States= *[0-9.e+]+" "$dir/out.txt" | tail -1 | grep -oE "[0-9.e+]+$")
      echo "  $defines, depth <= $depth: stopped after $seconds s, ${states:-?} states, no violation"
    fi
  fi
done

echo "check.sh: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
