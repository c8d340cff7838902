#!/usr/bin/env bash
# fs3's metadata speed against libfuse's passthrough_ll over the same disk, in one run: create,
# stat, rename, readdir (with a stat of each entry, as `ls -la`) and unlink of empty files, by one
# worker and by several workers (processes) spread over two mounts of each; and `ls -la` of one
# directory of 5,000 files after its cached entries expired. fs3 runs on this machine with one
# replica (deploy/fs3-local.sh), and every fs3 metadata change is on disk before it is answered
# (passthrough_ll's are not: ext4 syncs them later), so sync latency bounds fs3's single-worker
# figure.
#
#   fs3/bench/meta-bench.sh [--files 2000] [--workers 8] [--ls-files 5000] [--dir /var/tmp]
#                           [--engine rocksdb|etcd|both]
#
# --engine: fs3-meta's store. rocksdb (the default): one fs3-meta, its namespace in RocksDB.
# etcd: the highly available fs3 (FS3_HA=1: three etcd members and two fs3-meta servers on this
# machine, the mounts spreading calls over both); both: the two in one run, side by side.
#
# Needs root (mounts with allow_other), gcc, a built tree (build/). Measure on a quiet machine:
# under CPU load passthrough_ll slows more than fs3, which flatters fs3's ratios.
# `ls -la` is timed on passthrough_ll twice: as mounted for the other phases (without extended
# attributes: it answers their calls ENOSYS, after which the kernel never asks again) and with `-o
# xattr` (extended attributes, as fs3 has them: `ls -la` asks two per entry, security.selinux and
# system.posix_acl_access, each a FUSE round trip).
# Last line: meta bench: 1 worker create+stat+unlink X% of passthrough_ll, N workers on two
#            mounts Y%, ls -la of 5000 files Z x passthrough_ll's time (W x with xattrs)
# (with etcd, a line per engine; with both, then: meta bench etcd vs rocksdb: 1 worker A%, N
# workers B% of rocksdb's create+stat+unlink)
set -euo pipefail
cd "$(dirname "$0")/../.."
files=2000
workers=8
ls_files=5000
base=/var/tmp
engine=rocksdb
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) engine=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --ls-files) ls_files=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    -h|--help) sed -n "2,26p" "$0"; exit 0 ;;
    *) echo "meta-bench: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
say() { echo "meta-bench: $*" >&2; }
case "$engine" in
  rocksdb) engines=(fs3) ;;
  etcd) engines=(fs3e) ;;
  both) engines=(fs3 fs3e) ;;
  *) say "--engine is rocksdb, etcd or both"; exit 64 ;;
esac
# shellcheck source=fs3/bench/lib.sh
source fs3/bench/lib.sh
bench_prereqs gcc pkg-config fusermount3
[ -x build/fs3/fs3-fuse ] || { say "build the tree first (cmake --build build)"; exit 1; }

work=$(mktemp -d "$base/meta-bench.XXXXXX")
pids=()
cleanup() {
  for m in "$work"/pt-mnt1 "$work"/pt-mnt2 "$work"/ptx-mnt "$work"/fs3-mnt2 "$work"/fs3e-mnt2; do
    fusermount3 -u "$m" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  deploy/fs3-local.sh stop "$work/fs3" >/dev/null 2>&1 || true
  deploy/fs3-local.sh stop "$work/fs3e" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# Two passthrough_ll mounts of one source folder (Debian's libfuse3-dev example).
build_passthrough
for i in 1 2; do
  mount_passthrough "$work/pt-src" "$work/pt-mnt$i" "$work/passthrough$i.log"
  pids+=($!)
done
mount_passthrough "$work/ptx-src" "$work/ptx-mnt" "$work/passthrough-xattr.log" xattr
pids+=($!)

# fs3 with one replica, its data on the same disk, and a second fs3-fuse mount of it (fs3e: the
# same on etcd, two fs3-meta servers).
for fs in "${engines[@]}"; do
  ha=0
  [ "$fs" = fs3e ] && ha=1
  FS3_HA=$ha FS3_REPLICATION=1 FS3_DATA="$work/$fs-data" FS3_MOUNT="$work/$fs-mnt1" \
    deploy/fs3-local.sh start "$work/$fs" 2>/dev/null
  mkdir -p "$work/$fs-mnt2"
  build/fs3/fs3-fuse "$work/$fs-mnt2" --config "$work/$fs/fuse.toml" \
    --set metrics.listen=127.0.0.1:0 >"$work/$fs-fuse2.log" 2>&1 &
  pids+=($!)
  wait_mount "$work/$fs-mnt2"
done

# One phase = every worker does its share at once; the rate is all operations over the time from
# the common start to the last worker's end.
cat >"$work/driver.py" <<'PY'
import json, multiprocessing as mp, os, sys, time

def worker(root, n, barrier, out, idx):
    d = os.path.join(root, f"w{idx}")
    os.mkdir(d)
    times = {}
    def phase(name, fn):
        barrier.wait()
        start = time.monotonic()
        fn()
        times[name] = (start, time.monotonic())
    def create():
        for i in range(n):
            os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    def stat():
        for i in range(n):
            os.stat(f"{d}/f{i}")
    def rename():
        for i in range(n):
            os.rename(f"{d}/f{i}", f"{d}/g{i}")
    def readdir():
        with os.scandir(d) as it:
            for e in it:
                e.stat(follow_symlinks=False)
    def unlink():
        for i in range(n):
            os.unlink(f"{d}/g{i}")
    for name, fn in (("create", create), ("stat", stat), ("rename", rename),
                     ("readdir", readdir), ("unlink", unlink)):
        phase(name, fn)
    os.rmdir(d)
    out.put((idx, times))

def run(mounts, workers, n):
    barrier = mp.Barrier(workers)
    out = mp.Queue()
    procs = [mp.Process(target=worker, args=(mounts[i % len(mounts)], n, barrier, out, i))
             for i in range(workers)]
    for p in procs: p.start()
    results = [out.get() for _ in procs]
    for p in procs: p.join()
    rates = {}
    for name in ("create", "stat", "rename", "readdir", "unlink"):
        start = min(t[name][0] for _, t in results)
        end = max(t[name][1] for _, t in results)
        rates[name] = workers * n / (end - start)
    spans = {k: workers * n / v for k, v in rates.items()}
    css = spans["create"] + spans["stat"] + spans["unlink"]
    rates["create+stat+unlink"] = 3 * workers * n / css
    return rates

if __name__ == "__main__":
    mounts, workers, n = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(run(mounts, workers, n)))
PY

ls_time() {  # DIR -> seconds of `ls -la` of DIR/big (median of three, cached entries expired)
  /usr/bin/python3 - "$1" "$ls_files" <<'PY'
import os, subprocess, sys, time
d, n = os.path.join(sys.argv[1], "big"), int(sys.argv[2])
os.mkdir(d)
for i in range(n):
    os.close(os.open(f"{d}/file-{i:05d}", os.O_CREAT | os.O_WRONLY, 0o644))
runs = []
for _ in range(3):
    time.sleep(1.2)  # past the 1 s entry and attribute timeouts of both
    start = time.monotonic()
    subprocess.run(["ls", "-la", d], stdout=subprocess.DEVNULL, check=True)
    runs.append(time.monotonic() - start)
print(f"{sorted(runs)[1]:.3f}")
PY
}

# The machine's load beside the ratios (passthrough_ll slows more than fs3 under load).
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A one many ls
for fs in pt "${engines[@]}"; do
  one[$fs]=$(/usr/bin/python3 "$work/driver.py" "$work/$fs-mnt1" 1 "$files")
  many[$fs]=$(/usr/bin/python3 "$work/driver.py" "$work/$fs-mnt1,$work/$fs-mnt2" "$workers" \
    "$((files / workers > 0 ? files / workers : 1))")
  ls[$fs]=$(ls_time "$work/$fs-mnt1")
done
ls[ptx]=$(ls_time "$work/ptx-mnt")

report() {  # FS NAME: the table and the last line of one engine against passthrough_ll
  /usr/bin/python3 - "${one[pt]}" "${one[$1]}" "${many[pt]}" "${many[$1]}" "${ls[pt]}" \
    "${ls[$1]}" "$workers" "$ls_files" "$2" "${ls[ptx]}" <<'PY'
import json, sys
one_pt, one_fs3, many_pt, many_fs3 = (json.loads(a) for a in sys.argv[1:5])
ls_pt, ls_fs3, workers, ls_files = float(sys.argv[5]), float(sys.argv[6]), sys.argv[7], sys.argv[8]
name, ls_ptx = sys.argv[9], float(sys.argv[10])
col = "fs3" if name == "rocksdb" else "fs3 etcd"
print(f"{'operations per second':<24} {'passthrough_ll':>15} {col:>9} {'ratio':>6}"
      f" | {workers + ' workers, 2 mounts':>20} {col:>9} {'ratio':>6}")
for op in ("create", "stat", "rename", "readdir", "unlink", "create+stat+unlink"):
    print(f"{op:<24} {one_pt[op]:>15.0f} {one_fs3[op]:>9.0f} {100 * one_fs3[op] / one_pt[op]:>5.0f}%"
          f" | {many_pt[op]:>20.0f} {many_fs3[op]:>9.0f} {100 * many_fs3[op] / many_pt[op]:>5.0f}%")
print(f"ls -la of {ls_files} files: passthrough_ll {ls_pt:.3f} s ({ls_ptx:.3f} s with xattrs), "
      f"{col} {ls_fs3:.3f} s ({ls_fs3 / ls_pt:.1f}x; {ls_fs3 / ls_ptx:.1f}x with xattrs)")
key = "create+stat+unlink"
print(f"meta bench{'' if name == 'rocksdb' else ' ' + name}: 1 worker {key} "
      f"{100 * one_fs3[key] / one_pt[key]:.0f}% of passthrough_ll, "
      f"{workers} workers on two mounts {100 * many_fs3[key] / many_pt[key]:.0f}%, "
      f"ls -la of {ls_files} files {ls_fs3 / ls_pt:.1f} x passthrough_ll's time "
      f"({ls_fs3 / ls_ptx:.1f} x with xattrs)")
PY
}
echo "load average before the runs: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
for fs in "${engines[@]}"; do
  report "$fs" "$([ "$fs" = fs3 ] && echo rocksdb || echo etcd)"
done
if [ "$engine" = both ]; then
  /usr/bin/python3 - "${one[fs3]}" "${one[fs3e]}" "${many[fs3]}" "${many[fs3e]}" "$workers" <<'PY'
import json, sys
one_r, one_e, many_r, many_e = (json.loads(a) for a in sys.argv[1:5])
key = "create+stat+unlink"
print(f"meta bench etcd vs rocksdb: 1 worker {100 * one_e[key] / one_r[key]:.0f}%, "
      f"{sys.argv[5]} workers {100 * many_e[key] / many_r[key]:.0f}% of rocksdb's {key}")
PY
fi
