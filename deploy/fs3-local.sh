#!/usr/bin/env bash
# A one-machine fs3: fs3-mgmtd, N fs3-storage services (one target each), fs3-meta and an
# fs3-fuse mount, with their state under one folder.
#
#   deploy/fs3-local.sh start [DIR]   # default DIR: /tmp/fs3-local; needs build/; mounts DIR/mnt
#   deploy/fs3-local.sh stop [DIR]    # unmounts, stops everything and removes DIR
#   deploy/fs3-local.sh down [DIR]    # unmounts and stops everything, keeps DIR (logs, data)
#   deploy/fs3-local.sh status [DIR]  # each service: running or DEAD, and its addresses
#   deploy/fs3-local.sh kill NAME [DIR]     # kill -9 one service: mgmtd, meta, storageN or fuse
#   deploy/fs3-local.sh restart NAME [DIR]  # stop it (if it runs) and start it again from its
#                                           # config, at the same addresses, under a live mount
#
# Environment: FS3_REPLICATION (default 1), FS3_STORAGE_SERVICES (default: the replication),
# FS3_CHUNK_SIZE (default 4194304), FS3_DATA (default DIR/data: where chunks and RocksDB live),
# FS3_MOUNT (default DIR/mnt), FF_BUILD_DIR (default build). On the network lab (NETLAB=NAME, see
# deploy/lib.sh): fs3-mgmtd, fs3-meta and fs3-fuse run in FS3_HEAD_NODE's host and the storage
# services in FS3_STORAGE_NODES' hosts (a space-separated list, used in turn), each bound to its
# host's address; the mount is this machine's as always.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
dir=${2:-/tmp/fs3-local}
bin=${FF_BUILD_DIR:-build}/fs3
replication=${FS3_REPLICATION:-1}
services=${FS3_STORAGE_SERVICES:-$replication}
chunk=${FS3_CHUNK_SIZE:-4194304}
data=${FS3_DATA:-$dir/data}
mnt=${FS3_MOUNT:-$dir/mnt}

say() { echo "fs3-local: $*" >&2; }

# shellcheck source=deploy/lib.sh
source deploy/lib.sh

stop() {  # [keep]
  [ -d "$dir" ] || { say "nothing runs in $dir"; return 0; }
  if [ -e "$dir/mnt.path" ]; then
    fusermount3 -u "$(cat "$dir/mnt.path")" 2>/dev/null || umount -l "$(cat "$dir/mnt.path")" 2>/dev/null || true
  fi
  for pidfile in "$dir"/*.pid; do
    [ -e "$pidfile" ] || continue
    kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 0.5
  for pidfile in "$dir"/*.pid; do
    [ -e "$pidfile" ] || continue
    kill -KILL "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
  if [ "${1:-}" = keep ]; then
    say "stopped; state kept in $dir"
  else
    rm -rf "$dir"
    say "stopped; removed $dir"
  fi
}

start_daemon() {  # NAME BINARY ARGS...
  local name=$1; shift
  printf '%q ' "$@" >"$dir/$name.cmd"  # what `restart NAME` runs again
  rm -f "$dir/$name.ready"
  "$@" --ready-file "$dir/$name.ready" >>"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
  wait_ready "$dir/$name.ready" "$name"
  pin_ports "$dir/$name.toml" "$dir/$name.ready"
}

service_pid() {  # NAME: its pid when it runs
  local pid
  pid=$(cat "$dir/$1.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

check_service() {  # NAME: one that `start` made in $dir
  [ -n "$1" ] || { say "which service? (mgmtd, meta, storageN or fuse)"; exit 64; }
  [ -s "$dir/$1.cmd" ] || {
    say "no service '$1' in $dir; there are: $(cd "$dir" 2>/dev/null && ls -- *.cmd 2>/dev/null | sed 's/\.cmd$//' | tr '\n' ' ')"
    exit 1
  }
}

unmount_if_fuse() {  # NAME
  [ "$1" = fuse ] || return 0
  local m
  m=$(cat "$dir/mnt.path")
  # A killed fs3-fuse leaves a mount that answers ENOTCONN until unmounted.
  if grep -q " $m fuse" /proc/mounts; then
    fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  fi
}

kill_service() {  # NAME
  local pid
  if pid=$(service_pid "$1"); then
    kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    say "killed $1 (pid $pid)"
  else
    say "$1 was not running"
  fi
  rm -f "$dir/$1.ready"
}

restart_service() {  # NAME
  local pid
  if pid=$(service_pid "$1"); then
    unmount_if_fuse "$1"
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fi
  unmount_if_fuse "$1"
  local args
  eval "args=($(cat "$dir/$1.cmd"))"
  start_daemon "$1" "${args[@]}"
  say "restarted $1 (pid $(cat "$dir/$1.pid")): $(cat "$dir/$1.ready")"
}

status() {
  [ -d "$dir" ] || { say "nothing in $dir"; exit 1; }
  local bad=0 name state
  printf '%-10s %-8s %s\n' SERVICE STATE ENDPOINTS
  for cmdfile in "$dir"/*.cmd; do
    [ -e "$cmdfile" ] || continue
    name=$(basename "$cmdfile" .cmd)
    if service_pid "$name" >/dev/null; then state=running; else state=DEAD; bad=1; fi
    printf '%-10s %-8s %s\n' "$name" "$state" "$(cat "$dir/$name.ready" 2>/dev/null || true)"
  done
  return $bad
}

case "$cmd" in
  start)
    for b in fs3-mgmtd fs3-storage fs3-meta fs3-fuse fs3; do
      [ -x "$bin/$b" ] || { say "$bin/$b is missing: build first"; exit 1; }
    done
    [ -e "$dir/mgmtd.pid" ] && { say "already running in $dir (stop it first)"; exit 1; }
    storage_nodes=(local)  # without a lab, every "node" is this machine
    if [ -n "${NETLAB:-}" ]; then
      read -r -a storage_nodes <<<"${FS3_STORAGE_NODES:-}"
      [ -n "${FS3_HEAD_NODE:-}" ] && [ ${#storage_nodes[@]} -gt 0 ] ||
        { say "on the network lab, FS3_HEAD_NODE and FS3_STORAGE_NODES name its hosts"; exit 64; }
    fi
    at_head "${FS3_HEAD_NODE:-local}"
    mkdir -p "$dir" "$data" "$mnt"
    cat >"$dir/mgmtd.toml" <<TOML
[server]
listen = "$head_addr:0"
[metrics]
listen = "$head_addr:0"
[mgmtd]
data_dir = "$data/mgmtd"
lease_ms = 3000
restart_grace_ms = 5000
TOML
    start_daemon mgmtd "${head_at[@]}" "$bin/fs3-mgmtd" --config "$dir/mgmtd.toml"
    mgmtd=$(json_field "$dir/mgmtd.ready" rpc)
    for i in $(seq "$services"); do
      node=${storage_nodes[$(((i - 1) % ${#storage_nodes[@]}))]}
      addr=$(node_addr "$node")
      at_node "$node"
      cat >"$dir/storage$i.toml" <<TOML
[server]
listen = "$addr:0"
[metrics]
listen = "$addr:0"
[storage]
node = "storage-$i"
mgmtd = "$mgmtd"
  [[storage.targets]]
  id = $((100 + i))
  path = "$data/storage$i"
TOML
      start_daemon "storage$i" "${at[@]}" "$bin/fs3-storage" --config "$dir/storage$i.toml"
    done
    for _ in $(seq 100); do
      [ "$("${head_at[@]}" "$bin/fs3" --mgmtd "$mgmtd" nodes --json | grep -o '"up"' | wc -l)" -ge "$services" ] && break
      sleep 0.1
    done
    "${head_at[@]}" "$bin/fs3" --mgmtd "$mgmtd" init --chunk-size "$chunk" --replication "$replication" >/dev/null
    cat >"$dir/meta.toml" <<TOML
[server]
listen = "$head_addr:0"
[metrics]
listen = "$head_addr:0"
[meta]
data_dir = "$data/meta"
chunk_size = $chunk
mgmtd = "$mgmtd"
TOML
    start_daemon meta "${head_at[@]}" "$bin/fs3-meta" --config "$dir/meta.toml"
    meta=$(json_field "$dir/meta.ready" rpc)
    cat >"$dir/fuse.toml" <<TOML
[metrics]
listen = "$head_addr:0"
[fuse]
meta = "$meta"
mgmtd = "$mgmtd"
TOML
    echo "$mnt" >"$dir/mnt.path"
    start_daemon fuse "${head_at[@]}" "$bin/fs3-fuse" "$mnt" --config "$dir/fuse.toml"
    printf 'export FS3_MGMTD=%s\nexport FS3_META=%s\nexport FS3_MOUNT=%s\n' "$mgmtd" "$meta" "$mnt" \
      >"$dir/env"
    say "fs3 mounted at $mnt (mgmtd $mgmtd, meta $meta, replication $replication); source $dir/env"
    ;;
  stop) stop ;;
  down) stop keep ;;
  status) status ;;
  kill | restart)
    name=${2:-}
    dir=${3:-/tmp/fs3-local}
    check_service "$name"
    if [ "$cmd" = kill ]; then kill_service "$name"; else restart_service "$name"; fi
    ;;
  *) echo "usage: deploy/fs3-local.sh start|stop|down|status [DIR]; kill|restart NAME [DIR]" >&2; exit 64 ;;
esac
