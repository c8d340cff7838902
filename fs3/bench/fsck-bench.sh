#!/usr/bin/env bash
# fs3 fsck beside live traffic: a namespace of FILES files (in directories of 100), each opened and
# closed OPENS times (what a training cluster's sessions leave behind), then the mount's metadata
# calls (create, stat, unlink of new files: none answered from the kernel's caches) timed without
# fsck and while `fs3 fsck` runs from the CLI, back to back, over the same namespace. The peer is
# the same calls without fsck, in the same run. fs3 runs on this machine (deploy/fs3-local.sh,
# one replica); fs3-meta's namespace check shares its two cores with the calls, so CPU bounds the
# figure while fsck runs.
#
#   fs3/bench/fsck-bench.sh [--files 10000] [--opens 10] [--ops 3000] [--dir /var/tmp]
#                           [--engine rocksdb|etcd]
#
# Needs root (the mount), a built tree (FF_BUILD_DIR, default build). Last line:
#   fsck bench: N files, M opens behind them, fsck K s from the CLI (R runs); create+stat+unlink
#   p99 X ms during fsck, Y ms without (Z x)
set -euo pipefail
cd "$(dirname "$0")/../.."
files=10000
opens=10
ops=3000
base=/var/tmp
engine=rocksdb
while [ $# -gt 0 ]; do
  case "$1" in
    --files) files=$2; shift 2 ;;
    --opens) opens=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    --engine) engine=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "fsck-bench: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
say() { echo "fsck-bench: $*" >&2; }
case "$engine" in
  rocksdb) ha=0 ;;
  etcd) ha=1 ;;
  *) say "--engine is rocksdb or etcd"; exit 64 ;;
esac
# shellcheck source=fs3/bench/lib.sh
source fs3/bench/lib.sh
bench_prereqs fusermount3
build=$(realpath "${FF_BUILD_DIR:-build}")
[ -x "$build/fs3/fs3-fuse" ] && [ -x "$build/fs3/fs3" ] || { say "build the tree first (cmake --build build)"; exit 1; }

work=$(mktemp -d "$base/fsck-bench.XXXXXX")
cleanup() {
  FF_BUILD_DIR=$build deploy/fs3-local.sh stop "$work/fs3" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

FF_BUILD_DIR=$build FS3_HA=$ha FS3_REPLICATION=1 FS3_DATA="$work/data" FS3_MOUNT="$work/mnt" \
  deploy/fs3-local.sh start "$work/fs3" 2>/dev/null
# shellcheck disable=SC1091
source "$work/fs3/env"

say "making $files files and $((files * opens)) opens of them"
/usr/bin/python3 - "$work/mnt/ns" "$files" "$opens" <<'PY'
import os, sys
root, files, opens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(files):
    d = f"{root}/d{i // 100}"
    if i % 100 == 0:
        os.makedirs(d)
    path = f"{d}/f{i % 100}"
    with open(path, "wb") as f:
        f.write(b"x")
    for _ in range(opens - 1):
        os.close(os.open(path, os.O_RDONLY))
PY

# Times `ops` rounds of create, stat, unlink of new files in the mount (each call reaches
# fs3-meta); with a command, runs it over and over meanwhile. Prints JSON: p50 and p99 of the
# calls in ms, and the command's runs and mean seconds.
cat >"$work/calls.py" <<'PY'
import json, os, subprocess, sys, time
d, ops, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
os.makedirs(d, exist_ok=True)
lat, runs, spent, proc, started = [], 0, 0.0, None, 0.0
failed = 0
for i in range(ops):
    if cmd and (proc is None or proc.poll() is not None):
        if proc is not None:
            failed += proc.returncode != 0
            runs += 1
            spent += time.monotonic() - started
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = f"{d}/n{i}"
    t = time.monotonic(); os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)); lat.append(time.monotonic() - t)
    t = time.monotonic(); os.stat(p); lat.append(time.monotonic() - t)
    t = time.monotonic(); os.unlink(p); lat.append(time.monotonic() - t)
if proc is not None:  # the run under way counts once it ends
    proc.wait()
    failed += proc.returncode != 0
    runs += 1
    spent += time.monotonic() - started
lat.sort()
q = lambda f: 1000 * lat[min(len(lat) - 1, int(f * len(lat)))]
print(json.dumps({"p50": q(0.5), "p99": q(0.99), "runs": runs, "failed": failed,
                  "mean_s": spent / runs if runs else 0}))
PY

say "calls without fsck"
base_json=$(/usr/bin/python3 "$work/calls.py" "$work/mnt/calls" "$ops")
say "calls while fs3 fsck runs, again and again"
fsck_json=$(/usr/bin/python3 "$work/calls.py" "$work/mnt/calls" "$ops" \
  "$build/fs3/fs3" fsck --meta "$FS3_META")
# One more check alone, from the CLI, for its own time and its verdict.
start=$(date +%s%N)
"$build/fs3/fs3" fsck --meta "$FS3_META" >"$work/fsck.out" 2>"$work/fsck.err" ||
  { say "fs3 fsck failed: $(tail -n 2 "$work/fsck.out" "$work/fsck.err")"; exit 1; }
alone=$(( ($(date +%s%N) - start) / 1000000 ))

/usr/bin/python3 - "$base_json" "$fsck_json" "$files" "$opens" "$alone" "$engine" "$(cat "$work/fsck.out")" <<'PY'
import json, sys
base, during = json.loads(sys.argv[1]), json.loads(sys.argv[2])
files, opens, alone, engine, verdict = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]) / 1000, sys.argv[6], sys.argv[7]
print(f"fs3 fsck beside live traffic ({engine} engine; {files} files, {files * opens} opens; the CLI said: {verdict.strip()})")
print(f"{'':34}{'p50 ms':>9}{'p99 ms':>9}{'fsck runs':>11}{'fsck s':>8}")
print(f"{'create/stat/unlink, no fsck':34}{base['p50']:9.2f}{base['p99']:9.2f}{'':>11}{'':>8}")
print(f"{'create/stat/unlink, fsck running':34}{during['p50']:9.2f}{during['p99']:9.2f}{during['runs']:11d}{during['mean_s']:8.1f}")
if during["failed"]:
    print(f"({during['failed']} of the fsck runs failed)")
print(f"fsck bench: {files} files, {files * opens} opens behind them, fsck {alone:.1f} s from the CLI "
      f"({during['runs']} runs); create+stat+unlink p99 {during['p99']:.2f} ms during fsck, "
      f"{base['p99']:.2f} ms without ({during['p99'] / base['p99']:.2f} x)")
PY
