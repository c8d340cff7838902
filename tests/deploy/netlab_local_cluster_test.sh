#!/usr/bin/env bash
# The local cluster on the network lab: `deploy/local-cluster.sh up DIR --netlab NAME` on a lab of
# deploy/config/cluster-local.toml (two zones of one leaf of two hosts). What users rely on:
#   - every service runs in its host and binds the host's address: hai-agent and hai-health on each
#     node, fs3-storage on the other nodes, the rest on the first; `status` finds them all running
#     and Prometheus scraping every one, and every node up and healthy;
#   - `source DIR/env` gives `hai` and `fs3` commands that reach the cluster from this machine;
#   - a job across both zones: its ranks rendezvous and allreduce at their hosts' addresses and
#     write to the fs3 mount, so its bytes cross the zone links (counted by the lab), and what
#     they wrote reads back whole here;
#   - `down --purge` stops everything and the lab's teardown leaves no namespace.
# Root only (namespaces, FUSE). Usage: tests/deploy/netlab_local_cluster_test.sh BUILD_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build=$(cd "${1:?usage: netlab_local_cluster_test.sh BUILD_DIR}" && pwd)
# shellcheck source=tests/deploy/labtest.sh
source "$root/tests/deploy/labtest.sh"
lab_test nlc "network namespaces, FUSE"
tmp=$(mktemp -d)
dir="$tmp/cluster"
cleanup() {
  FF_BUILD_DIR="$build" bash "$root/deploy/local-cluster.sh" down "$dir" --purge >/dev/null 2>&1 || true
  lab down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -d "$dir" ] && tail -n 5 "$dir"/*.log >&2 2>/dev/null; exit 1; }

lab up "$root/deploy/config/cluster-local.toml" --scale 0.001 >/dev/null
FF_BUILD_DIR="$build" bash "$root/deploy/local-cluster.sh" up "$dir" --netlab "$name" 2>"$tmp/up.log" ||
  fail "local-cluster up on the lab: $(tail -n 20 "$tmp/up.log")"
echo "== up on the lab"

# Every service is bound to its host's lab address.
declare -A want=([hai-server]=A-leaf-n00 [agent-A-leaf-n00]=A-leaf-n00 [agent-B-leaf-n01]=B-leaf-n01
  [health-B-leaf-n00]=B-leaf-n00 [fs3/mgmtd]=A-leaf-n00 [fs3/meta]=A-leaf-n00
  [fs3/storage1]=A-leaf-n01 [fs3/storage2]=B-leaf-n00 [fs3/storage3]=B-leaf-n01)
for svc in "${!want[@]}"; do
  a=$(lab hosts | awk -v n="${want[$svc]}" '$1 == n { print $2 }')
  grep -q "\"$a:" "$dir/$svc.ready" || fail "$svc is not at ${want[$svc]}'s address $a: $(cat "$dir/$svc.ready")"
done

FF_BUILD_DIR="$build" bash "$root/deploy/local-cluster.sh" status "$dir" >"$tmp/status" ||
  fail "status: $(cat "$tmp/status")"
grep -q DEAD "$tmp/status" && fail "a service is dead: $(cat "$tmp/status")"
[ "$(grep -cE '^  (hai|fs3)-[a-z]+ +[a-zA-Z0-9-]+ +up' "$tmp/status")" -eq 16 ] ||
  fail "Prometheus does not scrape all 16 services: $(cat "$tmp/status")"

# shellcheck disable=SC1091
source "$dir/env"
for _ in $(seq 100); do
  [ "$(hai nodes --json | grep -o '"state":"NODE_UP"' | wc -l)" -eq 4 ] && break
  sleep 0.2
done
[ "$(hai nodes --json | grep -o '"state":"NODE_UP"' | wc -l)" -eq 4 ] || fail "nodes: $(hai nodes)"
fs3 nodes >/dev/null || fail "the fs3 command does not reach fs3-mgmtd"

# A job on all four nodes, across the zones: allreduces, then each rank writes 4 MiB to fs3.
before=$(lab status | awk '/^zone A - core/ { print $(NF - 1) }')
job=$(hai submit --json --nodes 4 --gpus-per-node 1 --may-span-zones --env HFREDUCE_TRANSPORT=tcp -- \
  "$build/hfreduce/hfreduce-loop --bytes 1M --steps 5 --warmup 1 && head -c 4194304 /dev/urandom | tee \$FS3_MOUNT/rank-\$RANK | sha256sum > $tmp/sum-\$RANK" |
  sed -E 's/.*"id":"([0-9]+)".*/\1/')
for _ in $(seq 300); do
  state=$(hai show "$job" --json | sed -E 's/.*"state":"([A-Z]+)".*/\1/')
  case "$state" in SUCCEEDED | FAILED | STOPPED) break ;; esac
  sleep 0.2
done
[ "$state" = SUCCEEDED ] || fail "the job is $state: $(hai show "$job"; hai logs "$job" --rank 0)"
hai logs "$job" --rank 0 >"$tmp/rank0"
grep -q '"world":4' "$tmp/rank0" || fail "rank 0 printed no result: $(cat "$tmp/rank0")"
master=$(lab hosts | awk '$1 == "A-leaf-n00" { print $2 }')
grep -q "listening on $master:" "$tmp/rank0" || fail "rank 0 did not serve at its host's address: $(cat "$tmp/rank0")"
after=$(lab status | awk '/^zone A - core/ { print $(NF - 1) }')
crossed=$((after - before))
# Each rank of zone A sends its share of the allreduces and its fs3 writes (3 replicas across the
# zones) out through zone A's link: well over 4 MiB.
[ "$crossed" -gt 4000000 ] || fail "only $crossed bytes crossed zone A's link"
for r in 0 1 2 3; do
  [ "$(sha256sum <"$dir/fs3-mnt/rank-$r")" = "$(cat "$tmp/sum-$r")" ] ||
    fail "rank $r's file does not read back as written"
done
echo "== a job across the zones: $crossed bytes through zone A's link; its files read back whole"

FF_BUILD_DIR="$build" bash "$root/deploy/local-cluster.sh" down "$dir" --purge 2>/dev/null
[ ! -e "$dir" ] || fail "down --purge left $dir"
lab down >/dev/null
if ip netns list | grep -q "^$name-"; then fail "namespaces left: $(ip netns list)"; fi
echo PASS
