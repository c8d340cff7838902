#!/usr/bin/env bash
# The local one-machine cluster: hai-server and four hai-agents acting as the nodes of
# deploy/config/cluster-local.toml, with their state under one folder. As root (with /dev/fuse),
# fs3 runs beside them (deploy/fs3-local.sh, mounted at DIR/fs3-mnt) and jobs' checkpoints go
# there (FF_LOCAL_FS3=0: a plain folder instead).
#
#   deploy/local-cluster.sh start [DIR]   # default DIR: /tmp/fireflyer-local; needs build/
#   source DIR/env                        # HAI_SERVER and HAI_TOKEN of the user "researcher"
#   deploy/local-cluster.sh status [DIR]
#   deploy/local-cluster.sh stop [DIR]    # stops everything, jobs included, and removes DIR
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cmd=${1:-}
dir=${2:-/tmp/fireflyer-local}
bin=${FF_BUILD_DIR:-build}
nodes=(A-leaf-n00 A-leaf-n01 B-leaf-n00 B-leaf-n01)

say() { echo "local-cluster: $*" >&2; }

# shellcheck source=deploy/lib.sh
source deploy/lib.sh

stop() {
  [ -d "$dir" ] || { say "nothing runs in $dir"; return 0; }
  for pidfile in "$dir"/*.pid; do
    [ -e "$pidfile" ] || continue
    kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 0.3
  # Jobs run in their own process groups (they outlive agents on purpose): end them too.
  for tasks in "$dir"/agent-*/tasks.json; do
    [ -e "$tasks" ] || continue
    for pid in $(grep -oE '"pid":[0-9]+' "$tasks" | cut -d: -f2); do
      kill -KILL -- "-$pid" 2>/dev/null || true
    done
  done
  for pidfile in "$dir"/*.pid; do
    [ -e "$pidfile" ] || continue
    kill -KILL "$(cat "$pidfile")" 2>/dev/null || true
  done
  [ -d "$dir/fs3" ] && bash deploy/fs3-local.sh stop "$dir/fs3" >/dev/null 2>&1
  rm -rf "$dir"
  say "stopped; removed $dir"
}

case "$cmd" in
  start)
    for b in hai-server hai-agent hai hai-demo-train; do
      [ -x "$bin/platform/$b" ] || { say "$bin/platform/$b is missing: build first"; exit 1; }
    done
    [ -e "$dir/server.pid" ] && { say "already running in $dir (stop it first)"; exit 1; }
    mkdir -p "$dir"
    checkpoints="$dir/checkpoints"
    if [ "${FF_LOCAL_FS3:-1}" != 0 ] && [ "$(id -u)" -eq 0 ] && [ -w /dev/fuse ] &&
      [ -x "$bin/fs3/fs3-fuse" ]; then
      FS3_MOUNT="$dir/fs3-mnt" bash deploy/fs3-local.sh start "$dir/fs3"
      checkpoints="$dir/fs3-mnt/checkpoints"
      mkdir -p "$checkpoints"
    fi
    cat >"$dir/hai-server.toml" <<TOML
[server]
listen = "127.0.0.1:0"
[metrics]
listen = "127.0.0.1:0"
[hai]
data_dir = "$dir/server"
cluster = "$root/deploy/config/cluster-local.toml"
agent_token_file = "$dir/agent.token"
checkpoint_root = "$checkpoints"
heartbeat_timeout_ms = 5000
heartbeat_interval_ms = 250
schedule_interval_ms = 250
suspend_grace_ms = 10000
TOML
    "$bin/platform/hai-server" --config "$dir/hai-server.toml" --ready-file "$dir/server.ready" \
      >"$dir/hai-server.log" 2>&1 &
    echo $! >"$dir/server.pid"
    wait_ready "$dir/server.ready" hai-server
    server=$(json_field "$dir/server.ready" rpc)
    for node in "${nodes[@]}"; do
      "$bin/platform/hai-agent" --node "$node" --set "agent.server=$server" \
        --set "agent.token_file=$dir/agent.token" --set "agent.state_dir=$dir/agent-$node" \
        --set agent.gpus=2 --set metrics.enabled=false --ready-file "$dir/agent-$node.ready" \
        >"$dir/agent-$node.log" 2>&1 &
      echo $! >"$dir/agent-$node.pid"
    done
    for node in "${nodes[@]}"; do wait_ready "$dir/agent-$node.ready" "agent-$node"; done
    admin=$(cat "$dir/server/admin.token")
    token=$(HAI_SERVER=$server HAI_TOKEN=$admin "$bin/platform/hai" admin user add researcher --json |
      json_field /dev/stdin token)
    printf 'export HAI_SERVER=%s\nexport HAI_TOKEN=%s\n' "$server" "$token" >"$dir/env"
    printf 'export HAI_SERVER=%s\nexport HAI_TOKEN=%s\n' "$server" "$admin" >"$dir/admin.env"
    chmod 600 "$dir/env" "$dir/admin.env"
    say "checkpoints in $checkpoints"
    say "hai-server at $server ($(json_field "$dir/server.ready" metrics)/metrics), agents: ${nodes[*]}"
    say "as the user 'researcher': source $dir/env; as admin: source $dir/admin.env"
    ;;
  status)
    [ -s "$dir/env" ] || { say "not running in $dir"; exit 1; }
    # shellcheck disable=SC1091
    source "$dir/admin.env"
    "$bin/platform/hai" nodes --tree
    "$bin/platform/hai" ls --all-users
    ;;
  stop) stop ;;
  *) echo "usage: deploy/local-cluster.sh start|status|stop [DIR]" >&2; exit 64 ;;
esac
