#!/usr/bin/env bash
# deploy/fs3-local.sh as users and tests drive it: start a 2-replica fs3 with its mount, then kill
# and restart each kind of service under the live mount (fs3-meta, a storage service, fs3-mgmtd,
# fs3-fuse itself). Each comes back at its old address, and everything written before and during
# reads back. Needs root and /dev/fuse (the mount), like the FUSE tests.
#   tests/deploy/fs3_local_test.sh BUILD_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:?usage: fs3_local_test.sh BUILD_DIR}" && pwd)"
if [ "$(id -u)" -ne 0 ] || [ ! -w /dev/fuse ]; then
  echo "FAIL: needs root and /dev/fuse (it mounts fs3); CI runs it as root" >&2
  exit 1
fi
cd "$root"
export FF_BUILD_DIR="$build"
dir=$(mktemp -d /tmp/fs3-local-test.XXXXXX)
fs3local() { bash deploy/fs3-local.sh "$@"; }
trap 'fs3local stop "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; for l in "$dir"/*.log; do echo "== $l" >&2; tail -n 20 "$l" >&2; done; exit 1; }
field() { sed -E "s/.*\"$2\":\"([^\"]+)\".*/\1/" "$dir/$1.ready"; }
wait_until() {  # SECONDS COMMAND...
  local until=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do [ $SECONDS -lt $until ] || return 1; sleep 0.2; done
}
all_up() { [ "$("$build/fs3/fs3" --mgmtd "$mgmtd" nodes --json | grep -o '"up"' | wc -l)" -ge 2 ]; }

FS3_REPLICATION=2 FS3_CHUNK_SIZE=262144 fs3local start "$dir"
mnt=$(cat "$dir/mnt.path")
mgmtd=$(field mgmtd rpc)
head -c 1000000 /dev/urandom >"$dir/blob"
cp "$dir/blob" "$mnt/before"
fs3local status "$dir" >"$dir/status.out" || fail "status says a service is down: $(cat "$dir/status.out")"
for s in mgmtd meta storage1 storage2 fuse; do
  grep -qE "^$s +running" "$dir/status.out" || fail "status does not list $s as running"
done

echo "== fs3-meta: kill -9, then restart at the same address under the mount"
meta=$(field meta rpc)
fs3local kill meta "$dir"
if fs3local status "$dir" >"$dir/status.out"; then fail "status exits 0 with fs3-meta dead"; fi
grep -qE "^meta +DEAD" "$dir/status.out" || fail "status does not show fs3-meta DEAD"
fs3local restart meta "$dir"
[ "$(field meta rpc)" = "$meta" ] || fail "fs3-meta came back at $(field meta rpc), not $meta"
start=$SECONDS
cmp "$dir/blob" "$mnt/before" || fail "a file written before the restart reads back wrong"
echo after-meta >"$mnt/after-meta" || fail "create after the fs3-meta restart"
echo "the mount went on $((SECONDS - start)) s after fs3-meta came back"

echo "== a storage service: kill -9, write on the other replica, restart; it resyncs"
fs3local kill storage1 "$dir"
cp "$dir/blob" "$mnt/during" || fail "write with one replica down"
fs3local restart storage1 "$dir"
wait_until 60 all_up || fail "storage1 did not come back up"
cmp "$dir/blob" "$mnt/during" || fail "the file written with a replica down reads back wrong"

echo "== fs3-mgmtd: restart at the same address"
fs3local restart mgmtd "$dir"
[ "$(field mgmtd rpc)" = "$mgmtd" ] || fail "fs3-mgmtd came back at another address"
wait_until 60 all_up || fail "the storage services did not re-register with fs3-mgmtd"
cp "$dir/blob" "$mnt/after-mgmtd" || fail "write after the fs3-mgmtd restart"

echo "== fs3-fuse: kill -9 leaves a dead mount; restart mounts again"
fs3local kill fuse "$dir"
if ls "$mnt" >/dev/null 2>&1; then fail "the mount answers with fs3-fuse dead"; fi
fs3local restart fuse "$dir"
for f in before during after-mgmtd; do
  cmp "$dir/blob" "$mnt/$f" || fail "$f reads back wrong after the fs3-fuse restart"
done
[ "$(cat "$mnt/after-meta")" = after-meta ] || fail "after-meta reads back wrong"
"$build/fs3/fs3" fsck --meta "$(field meta rpc)" >"$dir/fsck.out" 2>&1 || fail "fsck: $(cat "$dir/fsck.out")"

echo "== bad names change nothing"
if fs3local restart nosuch "$dir" 2>"$dir/err"; then fail "restart of an unknown service exits 0"; fi
grep -q "no service 'nosuch'" "$dir/err" || fail "unclear error: $(cat "$dir/err")"
grep -q "storage2" "$dir/err" || fail "the error does not list the services: $(cat "$dir/err")"
if fs3local kill "" "$dir" 2>/dev/null; then fail "kill without a name exits 0"; fi
fs3local status "$dir" >/dev/null || fail "a service is down at the end: $(fs3local status "$dir")"
echo "PASS: fs3-local restarts each service at its old address under a live mount"
