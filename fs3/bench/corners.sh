#!/usr/bin/env bash
# fs3 in tight corners, tried as a new user would (issue 52): an fs3-local cluster (one replica)
# whose one storage target is a small ext4 on a loop device. It prints, with ext4's own figure
# beside fs3's where there is one:
#   - holes: what four 4 KiB writes into empty chunks, and one byte at 100 MiB, take on the
#     target's disk, and the st_blocks the mount reports (ext4: the same pattern on the same disk);
#   - a full target: 32 MiB files with dd conv=fsync until ENOSPC, rm of them all, the target's
#     disk 10 s and 60 s later, then a new 4 MiB write; filled again to the last 4 KiB, a 6-byte
#     write whose close is refused, and the file it leaves;
#   - a second and third mount from the cluster's unchanged fuse.toml;
#   - the errno of stat and create on a mount (retry window 3 s) with fs3-meta killed.
#
#   fs3/bench/corners.sh [--size-mib 200] [--dir /var/tmp]     # FF_BUILD_DIR: default build
#
# Needs root (loop device, mounts), mkfs.ext4, a built tree. Takes about three minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
size=200
base=/var/tmp
while [ $# -gt 0 ]; do
  case "$1" in
    --size-mib) size=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "corners: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
say() { echo "corners: $*" >&2; }
build=$(realpath "${FF_BUILD_DIR:-build}")
[ -x "$build/fs3/fs3-fuse" ] || { say "build the tree first (cmake --build build)"; exit 1; }
[ "$(id -u)" -eq 0 ] || { say "run as root (loop device, mounts)"; exit 1; }
command -v mkfs.ext4 >/dev/null || { say "mkfs.ext4 is missing (e2fsprogs)"; exit 1; }

w=$(mktemp -d "$base/corners.XXXXXX")
target=$w/data/storage1
cleanup() {
  for m in "$w/m2" "$w/m3"; do fusermount3 -u "$m" 2>/dev/null; done
  FF_BUILD_DIR=$build deploy/fs3-local.sh stop "$w/fs3" >/dev/null 2>&1
  umount -l "$target" 2>/dev/null
  rm -rf "$w"
}
trap cleanup EXIT
truncate -s "${size}M" "$w/disk.img"
mkfs.ext4 -q -F -b 4096 "$w/disk.img"  # the block size ext4 takes on any disk over 512 MiB
mkdir -p "$target"
mount -o loop "$w/disk.img" "$target" || { say "cannot mount a loop device here"; exit 1; }
FF_BUILD_DIR=$build FS3_REPLICATION=1 FS3_DATA="$w/data" FS3_MOUNT="$w/mnt" \
  deploy/fs3-local.sh start "$w/fs3" 2>/dev/null || { say "fs3-local did not start"; exit 1; }
# shellcheck disable=SC1091
source "$w/fs3/env"
m=$w/mnt
used() { df -B1 --output=used "$target" | tail -1 | tr -d ' '; }
echo "target: ${size} MiB ext4; $(used) bytes used after start ($(du -sB1 "$target/meta" | cut -f1) by its database)"

/usr/bin/python3 - "$m" "$target/chunks" "$target" <<'PY'
import os, sys, time
m, chunks, disk = sys.argv[1:]
def on_disk():
    return sum(os.stat(os.path.join(chunks, f)).st_blocks * 512 for f in os.listdir(chunks))
def pattern(path):
    C = 4 << 20
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    for i, off in enumerate([0, 1 << 20, 2 << 20, int(3.9 * (1 << 20)) // 4096 * 4096]):
        os.pwrite(fd, os.urandom(4096), (10 + i) * C + off)
    os.fsync(fd); os.close(fd)
def one_byte(path):
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    os.pwrite(fd, b"z", 100 << 20); os.fsync(fd); os.close(fd)
print(f"{'holes':44}{'fs3 disk KiB':>14}{'fs3 st_blocks':>15}{'ext4 st_blocks':>16}")
for name, fn in (("four 4 KiB writes into empty 4 MiB chunks", pattern), ("one byte at 100 MiB", one_byte)):
    before = on_disk()
    fn(f"{m}/{name[:4]}")
    fn(f"{disk}/local-{name[:4]}")
    time.sleep(1.5)  # the kernel's cached attributes expire
    fs3_blocks = os.stat(f"{m}/{name[:4]}").st_blocks
    ext4_blocks = os.stat(f"{disk}/local-{name[:4]}").st_blocks
    print(f"{name:44}{(on_disk() - before) // 1024:14d}{fs3_blocks:15d}{ext4_blocks:16d}")
for name in ("four", "one "):
    os.unlink(f"{m}/{name}"); os.unlink(f"{disk}/local-{name}")
PY
sleep 3

n=0
while dd if=/dev/urandom of="$m/f$n" bs=1M count=32 conv=fsync status=none 2>"$w/dd.err"; do
  n=$((n + 1)); [ $n -gt 100 ] && break
done
echo "full target: $n files of 32 MiB written, then: $(tail -1 "$w/dd.err" | sed 's/.*: //'); $(du -sb "$m" | cut -f1) bytes of files; target $(used) bytes used"
rm -rf "$m"/f*
sleep 10; after10=$(used)
sleep 50; after60=$(used)
echo "after rm of them all: target $after10 bytes used 10 s later, $after60 60 s later, $(ls "$target/chunks" | wc -l) chunk files"
if dd if=/dev/urandom of="$m/new" bs=1M count=4 conv=fsync status=none 2>"$w/dd2.err"; then
  echo "then a new 4 MiB file: written"
else
  echo "then a new 4 MiB file: $(tail -1 "$w/dd2.err" | sed 's/.*: //')"
fi
rm -f "$m/new"
/usr/bin/python3 - "$m" <<'PY'
import os, sys, time
m = sys.argv[1]
i = 0
for size in (4 << 20, 4096):  # to the last 4 KiB
    try:
        while i < 200000:
            with open(f"{m}/p{i}", "wb") as f:
                f.write(os.urandom(size))
            i += 1
    except OSError:
        i += 1
try:
    fd = os.open(f"{m}/small", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"hello\n")
    os.close(fd)
    said = "closed"
except OSError as e:
    said = f"close: {e.strerror}"
time.sleep(1.5)
print(f"filled to the last 4 KiB, a 6-byte write: {said}; the file it leaves: "
      f"{os.stat(f'{m}/small').st_size} bytes, {open(f'{m}/small', 'rb').read()!r}")
for j in range(i):
    try:
        os.unlink(f"{m}/p{j}")
    except FileNotFoundError:
        pass
os.unlink(f"{m}/small")
PY

for extra in m2 m3; do
  mkdir -p "$w/$extra"
  args=()
  [ $extra = m2 ] && args=(--set fuse.retry_timeout_s=3)
  "$build/fs3/fs3-fuse" "$w/$extra" --config "$w/fs3/fuse.toml" "${args[@]}" >"$w/$extra.log" 2>&1 &
done
sleep 3
for extra in m2 m3; do
  if mountpoint -q "$w/$extra"; then
    echo "another mount from the cluster's fuse.toml ($extra): mounted"
  else
    echo "another mount from the cluster's fuse.toml ($extra): not mounted: $(tail -1 "$w/$extra.log")"
  fi
done
FF_BUILD_DIR=$build deploy/fs3-local.sh kill meta "$w/fs3" >/dev/null 2>&1
/usr/bin/python3 - "$w/m2" <<'PY'
import errno, os, sys
m = sys.argv[1]
if not os.path.ismount(m):
    sys.exit(0)
for what, fn in (("stat", lambda: os.stat(f"{m}/x")),
                 ("create", lambda: os.open(f"{m}/y", os.O_CREAT | os.O_WRONLY, 0o644))):
    try:
        fn()
        print(f"{what} with fs3-meta down past the mount's 3 s window: succeeded")
    except OSError as e:
        print(f"{what} with fs3-meta down past the mount's 3 s window: {errno.errorcode.get(e.errno)} ({e.strerror})")
PY
