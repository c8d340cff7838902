#!/usr/bin/env bash
# The fs3 FUSE mount against libfuse's passthrough_ll example over the same disk, in one run:
# sequential 1 MiB write and read, 4 KiB random read (fio), and metadata operations per second
# (create, stat, unlink of small files). fs3 runs on this machine with one replica
# (deploy/fs3-local.sh); passthrough_ll is built from the source Debian ships with libfuse3-dev.
#
#   fs3/bench/fuse-bench.sh [--size-mib 512] [--seconds 10] [--files 2000] [--dir /var/tmp]
#
# Needs root (mounts with allow_other, drops the page cache between phases so reads come from
# the filesystem, not the cache of the previous phase), fio, gcc, a built tree (build/).
# Last line: fs3 fuse vs passthrough: write R1 X%, read Y%, 4k randread Z%, metadata W%
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
size_mib=512
seconds=10
files=2000
base=/var/tmp
while [ $# -gt 0 ]; do
  case "$1" in
    --size-mib) size_mib=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "fuse-bench: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
say() { echo "fuse-bench: $*" >&2; }
# shellcheck source=fs3/bench/lib.sh
source fs3/bench/lib.sh
bench_prereqs fio gcc pkg-config fusermount3

work=$(mktemp -d "$base/fuse-bench.XXXXXX")
pt_pid=""
cleanup() {
  fusermount3 -u "$work/pt-mnt" 2>/dev/null || true
  [ -n "$pt_pid" ] && kill "$pt_pid" 2>/dev/null || true
  deploy/fs3-local.sh stop "$work/fs3" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

build_passthrough
mount_passthrough "$work/pt-src" "$work/pt-mnt" "$work/passthrough.log"
pt_pid=$!

# fs3 with one replica, its data on the same disk.
FS3_REPLICATION=1 FS3_DATA="$work/fs3-data" FS3_MOUNT="$work/fs3-mnt" \
  deploy/fs3-local.sh start "$work/fs3" 2>/dev/null

fio_run() {  # DIR NAME RW BS [extra...] -> prints MiB/s or IOPS
  local dir=$1 name=$2 rw=$3 bs=$4; shift 4
  fio --name="$name" --directory="$dir" --filename=bench.dat --rw="$rw" --bs="$bs" \
    --size="${size_mib}M" --ioengine=psync --output-format=json "$@" >"$work/$name.json"
  /usr/bin/python3 - "$work/$name.json" "$rw" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]
side = job["write"] if sys.argv[2] == "write" else job["read"]
if sys.argv[2] == "randread":
    print(f"{side['iops']:.0f}")
else:
    print(f"{side['bw_bytes'] / 2**20:.1f}")
PY
}

metadata_run() {  # DIR -> operations per second (create + stat + unlink of small files)
  /usr/bin/python3 - "$1" "$files" <<'PY'
import os, sys, time
d, n = os.path.join(sys.argv[1], "meta"), int(sys.argv[2])
os.mkdir(d)
start = time.monotonic()
for i in range(n):
    fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.close(fd)
for i in range(n):
    os.stat(f"{d}/f{i}")
for i in range(n):
    os.unlink(f"{d}/f{i}")
print(f"{3 * n / (time.monotonic() - start):.0f}")
PY
}

declare -A result
for fs in pt fs3; do
  dir="$work/$fs-mnt"
  drop_caches
  result[$fs.write]=$(fio_run "$dir" "$fs-write" write 1M --end_fsync=1)
  drop_caches
  result[$fs.read]=$(fio_run "$dir" "$fs-read" read 1M)
  drop_caches
  result[$fs.rand]=$(fio_run "$dir" "$fs-rand" randread 4k --time_based --runtime="$seconds" \
    --numjobs=4 --group_reporting)
  result[$fs.meta]=$(metadata_run "$dir")
done

pct() { /usr/bin/python3 -c "print(f'{100 * $1 / $2:.0f}')"; }
printf '%-28s %16s %16s %8s\n' "test (${size_mib} MiB file)" "passthrough_ll" "fs3-fuse R1" "ratio"
printf '%-28s %12s MiB/s %10s MiB/s %7s%%\n' "sequential write 1 MiB" "${result[pt.write]}" \
  "${result[fs3.write]}" "$(pct "${result[fs3.write]}" "${result[pt.write]}")"
printf '%-28s %12s MiB/s %10s MiB/s %7s%%\n' "sequential read 1 MiB" "${result[pt.read]}" \
  "${result[fs3.read]}" "$(pct "${result[fs3.read]}" "${result[pt.read]}")"
printf '%-28s %13s IOPS %11s IOPS %7s%%\n' "random read 4 KiB (4 jobs)" "${result[pt.rand]}" \
  "${result[fs3.rand]}" "$(pct "${result[fs3.rand]}" "${result[pt.rand]}")"
printf '%-28s %12s op/s %11s op/s %7s%%\n' "create+stat+unlink" "${result[pt.meta]}" \
  "${result[fs3.meta]}" "$(pct "${result[fs3.meta]}" "${result[pt.meta]}")"
echo "fs3 fuse vs passthrough: write R1 $(pct "${result[fs3.write]}" "${result[pt.write]}")%," \
  "read $(pct "${result[fs3.read]}" "${result[pt.read]}")%," \
  "4k randread $(pct "${result[fs3.rand]}" "${result[pt.rand]}")%," \
  "metadata $(pct "${result[fs3.meta]}" "${result[pt.meta]}")%"
