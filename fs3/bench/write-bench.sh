#!/usr/bin/env bash
# fs3's sequential write speed against libfuse's passthrough_ll over the same disk: fio writes a
# file in 1 MiB pieces and fsyncs it at the end, on passthrough_ll, on fs3 with one replica and
# on fs3 with chains of three (three storage services, all on this disk: three times the bytes).
# Each run does the three back to back (in turns: each goes first in some run) and takes each fs3
# figure as a ratio of that run's passthrough_ll figure, so the ratio holds on a disk whose speed
# swings; the medians and the spread over the runs are printed, with how busy the CPUs were in
# each phase (what bounds it).
#
#   fs3/bench/write-bench.sh [--size-mib 1024] [--runs 3] [--dir /var/tmp]
#
# Needs root (mounts, drops the page cache before each phase), fio, gcc and a built tree.
# Last line: write bench: 1 MiB sequential writes, median of N runs: R1 X% (a-b%), R3 Y% (c-d%) of passthrough_ll
set -euo pipefail
cd "$(dirname "$0")/../.."
size_mib=1024
runs=3
base=/var/tmp
while [ $# -gt 0 ]; do
  case "$1" in
    --size-mib) size_mib=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "write-bench: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
say() { echo "write-bench: $*" >&2; }
# shellcheck source=fs3/bench/lib.sh
source fs3/bench/lib.sh
bench_prereqs fio gcc pkg-config fusermount3
[ "$runs" -ge 1 ] || { say "--runs must be at least 1"; exit 64; }

work=$(mktemp -d "$base/write-bench.XXXXXX")
pt_pid=""
cleanup() {
  fusermount3 -u "$work/pt-mnt" 2>/dev/null || true
  [ -n "$pt_pid" ] && kill "$pt_pid" 2>/dev/null || true
  for r in r1 r3; do deploy/fs3-local.sh stop "$work/$r" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

build_passthrough
mount_passthrough "$work/pt-src" "$work/pt-mnt" "$work/passthrough.log"
pt_pid=$!
FS3_REPLICATION=1 FS3_DATA="$work/r1-data" FS3_MOUNT="$work/r1-mnt" \
  deploy/fs3-local.sh start "$work/r1" 2>/dev/null
FS3_REPLICATION=3 FS3_DATA="$work/r3-data" FS3_MOUNT="$work/r3-mnt" \
  deploy/fs3-local.sh start "$work/r3" 2>/dev/null

write_run() {  # DIR -> "MiB/s cpu-busy-%"
  local before after
  drop_caches
  before=$(cpu_ticks)
  fio --name=w --directory="$1" --filename=bench.dat --rw=write --bs=1M --size="${size_mib}M" \
    --ioengine=psync --end_fsync=1 --output-format=json >"$work/fio.json"
  after=$(cpu_ticks)
  rm -f "$1/bench.dat"
  /usr/bin/python3 - "$work/fio.json" "$before" "$after" <<'PY'
import json, sys
bw = json.load(open(sys.argv[1]))["jobs"][0]["write"]["bw_bytes"] / 2**20
(b0, t0), (b1, t1) = (map(int, a.split()) for a in sys.argv[2:4])
print(f"{bw:.0f} {100 * (b1 - b0) / max(1, t1 - t0):.0f}")
PY
}

printf '%-5s %22s %22s %8s %22s %8s\n' run "passthrough_ll MiB/s" "fs3 R1 MiB/s" R1 "fs3 R3 MiB/s" R3
printf '%-5s %22s %22s %8s %22s %8s\n' "" "(CPU busy)" "(CPU busy)" "" "(CPU busy)" ""
r1s=() r3s=()
for run in $(seq "$runs"); do
  # The order turns with each run: a disk that slows after heavy writing (a cloud disk's burst
  # budget, the host's cache) does not always favour the same side.
  for k in $(seq 0 2); do
    case $(((run - 1 + k) % 3)) in
      0) read -r pt pt_cpu <<<"$(write_run "$work/pt-mnt")" ;;
      1) read -r r1 r1_cpu <<<"$(write_run "$work/r1-mnt")" ;;
      2) read -r r3 r3_cpu <<<"$(write_run "$work/r3-mnt")" ;;
    esac
  done
  r1s+=("$((100 * r1 / pt))") r3s+=("$((100 * r3 / pt))")
  printf '%-5s %14s (%3s%%) %14s (%3s%%) %7s%% %14s (%3s%%) %7s%%\n' "$run" "$pt" "$pt_cpu" \
    "$r1" "$r1_cpu" "${r1s[-1]}" "$r3" "$r3_cpu" "${r3s[-1]}"
done
summary() {  # RATIOS... -> "median% (min-max%)"
  /usr/bin/python3 -c 'import statistics, sys; v = sorted(map(int, sys.argv[1:]))
print(f"{statistics.median(v):.0f}% ({v[0]}-{v[-1]}%)")' "$@"
}
echo "CPU busy near 100%: the two cores bound the figure (fs3's daemons, fio and FUSE share them);" \
  "well below: the disk does (fs3 syncs each 4 MiB chunk with O_DIRECT; passthrough_ll's one fsync at the end)."
echo "write bench: 1 MiB sequential writes, median of $runs runs: R1 $(summary "${r1s[@]}")," \
  "R3 $(summary "${r3s[@]}") of passthrough_ll"
