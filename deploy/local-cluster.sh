#!/usr/bin/env bash
# The whole stack on this machine, from one config (deploy/config/local-cluster.conf), with all
# its state under one folder:
#   fs3: fs3-mgmtd, fs3-meta, FS3_STORAGE_SERVICES fs3-storage services in chains of
#        FS3_REPLICATION, and (as root, with /dev/fuse) the fs3-fuse mount at DIR/fs3-mnt;
#   HAI-Platform: hai-server and one hai-agent and one hai-health per node of CLUSTER_TOML (each
#        node has its own HFReduce node id, so a multi-node job crosses HFReduce's network path);
#   Prometheus (Debian's `prometheus`) scraping every daemon's /metrics, with deploy/prometheus's
#        alert rules loaded.
# Jobs see the stack's Python side (haiscale, hai_job, fs3client) and FS3_META / FS3_MGMTD /
# FS3_MOUNT without extra steps.
#
#   deploy/local-cluster.sh up [DIR] [--config FILE] [--netlab NAME]
#                                                     # default DIR: /tmp/fireflyer-local
#   source DIR/env                                    # HAI_SERVER, HAI_TOKEN (user "researcher"),
#                                                     # FS3_*, PROMETHEUS_URL; DIR/admin.env: admin
#   deploy/local-cluster.sh status [DIR]              # every service and its health
#   deploy/local-cluster.sh down [DIR] [--purge]      # stops everything (jobs too), unmounts;
#                                                     # --purge also removes DIR
# --netlab NAME: on the network lab of that name (deploy/netlab.py up CLUSTER_TOML --name NAME,
# with the config's CLUSTER_TOML): every node's hai-agent and hai-health in its own host, hai-server,
# Prometheus, fs3-mgmtd, fs3-meta and fs3-fuse in the first node's, the fs3-storage services in
# the other nodes' hosts, each bound to its host's address, so that every byte of HFReduce and fs3
# crosses the emulated switches. The hosts have no route to this machine's own network: DIR/env
# then defines `hai` and `fs3` as commands that run in the first node's host.
# `start` and `stop` are `up` and `down --purge`. `down` works on a crashed or half-started
# cluster too: it acts on whatever pid files and mounts it finds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cmd=${1:-}
shift || true
dir=/tmp/fireflyer-local
config=deploy/config/local-cluster.conf
purge=0
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config=$2; shift 2 ;;
    --purge) purge=1; shift ;;
    --netlab) export NETLAB=$2; shift 2 ;;
    -*) echo "local-cluster: unknown option $1" >&2; exit 64 ;;
    *) dir=$1; shift ;;
  esac
done
bin=${FF_BUILD_DIR:-build}
case "$bin" in /*) bin_abs=$bin ;; *) bin_abs=$root/$bin ;; esac

say() { echo "local-cluster: $*" >&2; }

# shellcheck source=deploy/lib.sh
source deploy/lib.sh
# shellcheck source=deploy/config/local-cluster.conf
source "$config"

# The node names of CLUSTER_TOML (zone leaves' names with -n00, -n01, ...).
node_names() {
  awk '/^[[:space:]]*name *=/ { gsub(/"/, "", $3); name = $3 }
       /^[[:space:]]*nodes *=/ { for (i = 0; i < $3; i++) printf "%s-n%02d\n", name, i }' \
    "$CLUSTER_TOML"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

prom_query() {  # PATH: GET from Prometheus' API, the JSON on stdout
  "${head_at[@]}" python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
    "$(cat "$dir/prometheus.url")$1"
}

start_daemon() {  # NAME ARGS...: runs ARGS with a ready file and a log, waits for it
  local name=$1; shift
  "$@" --ready-file "$dir/$name.ready" >"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
  wait_ready "$dir/$name.ready" "$name"
  pin_ports "$(config_of "$@")" "$dir/$name.ready"
}

head_addr=127.0.0.1  # the first node, where hai-server, Prometheus and fs3's head services run
head_at=()

config_of() {  # ARGS...: the file after --config
  while [ $# -gt 1 ]; do [ "$1" = "--config" ] && { echo "$2"; return; }; shift; done
}

down() {
  [ -d "$dir" ] || { say "nothing in $dir"; return 0; }
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
    rm -f "$pidfile"
  done
  [ -d "$dir/fs3" ] && bash deploy/fs3-local.sh down "$dir/fs3" >/dev/null 2>&1
  # A mount left by a crash (fs3-fuse killed) still answers ENOTCONN until unmounted.
  if grep -q " $dir/fs3-mnt " /proc/mounts 2>/dev/null; then
    fusermount3 -u "$dir/fs3-mnt" 2>/dev/null || umount -l "$dir/fs3-mnt" 2>/dev/null || true
  fi
  rm -f "$dir"/*.ready
  if [ "$purge" -eq 1 ]; then
    rm -rf "$dir"
    say "stopped; removed $dir"
  else
    say "stopped; logs and data kept in $dir (down --purge removes them)"
  fi
}

up() {
  for b in platform/hai-server platform/hai-agent platform/hai platform/hai-health platform/hai-web; do
    [ -x "$bin/$b" ] || { say "$bin/$b is missing: build first"; exit 1; }
  done
  if [ -e "$dir/server.pid" ] && kill -0 "$(cat "$dir/server.pid")" 2>/dev/null; then
    say "already running in $dir (down it first)"; exit 1
  fi
  if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    say "$dir holds an earlier cluster's state: 'down --purge' it, or choose another folder"
    exit 1
  fi
  local nodes
  mapfile -t nodes < <(node_names)
  at_head "${nodes[0]}"
  mkdir -p "$dir"
  [ -n "${NETLAB:-}" ] && printf '%s %s\n' "$NETLAB" "${nodes[0]}" >"$dir/netlab"
  trap 'say "start failed; stopping what started (logs kept in $dir)"; purge=0; down' ERR
  local python_path="$bin_abs/python:$root/platform/python"
  local fs3_env=()
  local checkpoints="$dir/checkpoints"

  # ---- fs3 -------------------------------------------------------------------------------------
  if [ "${FS3:-1}" != 0 ] && [ "$(id -u)" -eq 0 ] && [ -w /dev/fuse ] && [ -x "$bin/fs3/fs3-fuse" ]; then
    FS3_HEAD_NODE=${nodes[0]} FS3_STORAGE_NODES="${nodes[*]:1}" \
      FS3_MOUNT="$dir/fs3-mnt" FS3_REPLICATION=$FS3_REPLICATION \
      FS3_STORAGE_SERVICES=$FS3_STORAGE_SERVICES bash deploy/fs3-local.sh start "$dir/fs3"
    # shellcheck disable=SC1091
    source "$dir/fs3/env"
    fs3_env=(FS3_META="$FS3_META" FS3_MGMTD="$FS3_MGMTD" FS3_MOUNT="$FS3_MOUNT")
    checkpoints="$FS3_MOUNT/checkpoints"
    mkdir -p "$checkpoints"
  else
    say "fs3 is left out (it needs root, /dev/fuse and a build with fs3-fuse; FS3=0 skips it)"
  fi

  # ---- hai-server, agents, hai-health ----------------------------------------------------------
  cat >"$dir/hai-server.toml" <<TOML
[server]
listen = "$head_addr:0"
[metrics]
listen = "$head_addr:0"
[hai]
data_dir = "$dir/server"
cluster = "$root/$CLUSTER_TOML"
agent_token_file = "$dir/agent.token"
checkpoint_root = "$checkpoints"
heartbeat_timeout_ms = 5000
heartbeat_interval_ms = 250
schedule_interval_ms = 250
suspend_grace_ms = 20000
TOML
  start_daemon hai-server "${head_at[@]}" "$bin/platform/hai-server" --config "$dir/hai-server.toml"
  local server
  server=$(json_field "$dir/hai-server.ready" rpc)
  for node in "${nodes[@]}"; do
    local addr
    addr=$(node_addr "$node")
    at_node "$node"
    "${at[@]}" env PATH="$root/.venv/bin:$PATH" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" PYTHONPATH="$python_path${PYTHONPATH:+:$PYTHONPATH}" \
      "${fs3_env[@]}" "$bin/platform/hai-agent" --node "$node" --set "agent.server=$server" \
      --set "agent.token_file=$dir/agent.token" --set "agent.state_dir=$dir/agent-$node" \
      --set "agent.gpus=$GPUS_PER_NODE" --listen "$addr:0" --set "metrics.listen=$addr:0" \
      --ready-file "$dir/agent-$node.ready" >"$dir/agent-$node.log" 2>&1 &
    echo $! >"$dir/agent-$node.pid"
  done
  for node in "${nodes[@]}"; do wait_ready "$dir/agent-$node.ready" "agent-$node"; done
  for node in "${nodes[@]}"; do
    cat >"$dir/health-$node.toml" <<TOML
[metrics]
listen = "$(node_addr "$node"):0"
[health]
node = "$node"
server = "$server"
token_file = "$dir/agent.token"
interval_ms = $HEALTH_INTERVAL_MS
gpus = $HEALTH_EXPECT_GPUS
fs3_mount = "${FS3_MOUNT:-}"
disks = ["$dir"]
min_free_disk_mib = $HEALTH_MIN_FREE_DISK_MIB
validator_interval_s = $HEALTH_VALIDATOR_INTERVAL_S
TOML
    at_node "$node"
    start_daemon "health-$node" "${at[@]}" "$bin/platform/hai-health" --config "$dir/health-$node.toml"
  done
  local admin token
  admin=$(cat "$dir/server/admin.token")
  token=$(HAI_SERVER=$server HAI_TOKEN=$admin "${head_at[@]}" "$bin/platform/hai" admin user add researcher --json |
    json_field /dev/stdin token)

  # ---- hai-web: the read-only web view (log in with a user's token) -----------------------------
  {
    printf '[web]\nlisten = "%s:0"\nhai_server = "%s"\n' "$head_addr" "$server"
    [ ${#fs3_env[@]} -gt 0 ] && printf 'fs3_mgmtd = "%s"\n' "$FS3_MGMTD"
  } >"$dir/hai-web.toml"
  start_daemon hai-web "${head_at[@]}" "$bin/platform/hai-web" --config "$dir/hai-web.toml"
  local web_url
  web_url=$(json_field "$dir/hai-web.ready" url)

  # ---- Prometheus ------------------------------------------------------------------------------
  local prom_url=""
  if [ "${PROMETHEUS:-1}" != 0 ]; then
    command -v prometheus >/dev/null || { say "prometheus is not installed (deploy/install-deps.sh)"; exit 1; }
    {
      printf 'global:\n  scrape_interval: %s\n  evaluation_interval: %s\n' "$SCRAPE_INTERVAL" "$SCRAPE_INTERVAL"
      printf 'rule_files: ["%s/deploy/prometheus/alerts.yml"]\nscrape_configs:\n' "$root"
      scrape_job() {  # JOB READY-FILES...
        local job=$1; shift
        printf '  - job_name: %s\n    static_configs:\n' "$job"
        for f in "$@"; do
          [ -s "$f" ] || continue
          local m name
          m=$(json_field "$f" metrics)
          name=$(basename "$f" .ready)
          printf '      - targets: ["%s"]\n        labels: {service: "%s"}\n' "$m" "$name"
        done
      }
      scrape_job hai-server "$dir/hai-server.ready"
      scrape_job hai-agent "$dir"/agent-*.ready
      scrape_job hai-health "$dir"/health-*.ready
      if [ -d "$dir/fs3" ]; then
        scrape_job fs3-mgmtd "$dir/fs3/mgmtd.ready"
        scrape_job fs3-meta "$dir/fs3/meta.ready"
        scrape_job fs3-storage "$dir"/fs3/storage*.ready
        scrape_job fs3-fuse "$dir/fs3/fuse.ready"
      fi
    } >"$dir/prometheus.yml"
    local port
    port=$(free_port)
    prom_url="http://$head_addr:$port"
    echo "$prom_url" >"$dir/prometheus.url"
    "${head_at[@]}" prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/prometheus" \
      --web.listen-address="$head_addr:$port" >"$dir/prometheus.log" 2>&1 &
    echo $! >"$dir/prometheus.pid"
    local targets up=0
    targets=$(grep -c 'targets:' "$dir/prometheus.yml")
    for _ in $(seq 300); do
      up=$(prom_query /api/v1/targets 2>/dev/null | grep -o '"health":"up"' | wc -l || true)
      [ "$up" -ge "$targets" ] && break
      sleep 0.1
    done
    [ "$up" -ge "$targets" ] || { say "Prometheus sees $up of $targets targets up; its log:"; tail "$dir/prometheus.log" >&2; false; }
  fi

  {
    printf 'export HAI_SERVER=%s\nexport HAI_TOKEN=%s\nexport HAI_WEB_URL=%s\n' "$server" "$token" "$web_url"
    for kv in "${fs3_env[@]}"; do printf 'export %s\n' "$kv"; done
    [ -n "$prom_url" ] && printf 'export PROMETHEUS_URL=%s\n' "$prom_url"
    printf 'export PATH=%s:$PATH\n' "$bin_abs/platform:$bin_abs/fs3"
    if [ -n "${NETLAB:-}" ]; then
      # The CLIs reach the cluster from the first node's host.
      printf 'export NETLAB=%s\n' "$NETLAB"
      for tool in platform/hai fs3/fs3; do
        printf '%s() { %s "%s" "$@"; }\n' "$(basename "$tool")" "${head_at[*]}" "$bin_abs/$tool"
      done
    fi
  } >"$dir/env"
  sed "s/^export HAI_TOKEN=.*/export HAI_TOKEN=$admin/" "$dir/env" >"$dir/admin.env"
  chmod 600 "$dir/env" "$dir/admin.env"
  trap - ERR
  say "up in $dir${NETLAB:+ (on the network lab $NETLAB)}:"
  say "  nodes:       ${nodes[*]} (each with hai-agent and hai-health)"
  say "  hai-server:  $server; as the user 'researcher': source $dir/env (admin: $dir/admin.env)"
  say "  web view:    $web_url (log in with \$HAI_TOKEN from $dir/env)"
  if [ ${#fs3_env[@]} -gt 0 ]; then
    say "  fs3:         mounted at $FS3_MOUNT ($FS3_STORAGE_SERVICES storage services, chains of $FS3_REPLICATION); meta $FS3_META, mgmtd $FS3_MGMTD"
  fi
  say "  checkpoints: $checkpoints"
  [ -n "$prom_url" ] && say "  Prometheus:  $prom_url (targets: $prom_url/targets, alerts: $prom_url/alerts)"
  return 0
}

status() {
  [ -d "$dir" ] || { say "nothing in $dir"; exit 1; }
  if [ -s "$dir/netlab" ]; then
    read -r NETLAB head <"$dir/netlab"
    at_head "$head"
  fi
  local bad=0
  printf '%-24s %-8s %s\n' SERVICE STATE ENDPOINTS
  for pidfile in "$dir"/*.pid "$dir"/fs3/*.pid; do
    [ -e "$pidfile" ] || continue
    local name state ready
    name=$(basename "$pidfile" .pid)
    ready="${pidfile%.pid}.ready"
    if kill -0 "$(cat "$pidfile")" 2>/dev/null; then state=running; else state=DEAD; bad=1; fi
    printf '%-24s %-8s %s\n' "$name" "$state" "$(cat "$ready" 2>/dev/null || true)"
  done
  if [ -s "$dir/prometheus.url" ] && [ -e "$dir/prometheus.pid" ]; then
    echo "== Prometheus $(cat "$dir/prometheus.url"): scrape targets and alerts =="
    prom_query /api/v1/targets | python3 -c '
import json, sys
for t in json.load(sys.stdin)["data"]["activeTargets"]:
    lb = t["labels"]
    print("  %-12s %-22s %-5s %s" % (lb["job"], lb.get("service", ""), t["health"], t["lastError"]))'
    prom_query /api/v1/alerts | python3 -c '
import json, sys
alerts = json.load(sys.stdin)["data"]["alerts"]
print("  alerts: " + (", ".join(a["labels"]["alertname"] + " (" + a["state"] + ")" for a in alerts) or "none"))'
  fi
  if [ -s "$dir/admin.env" ]; then
    echo "== hai nodes =="
    # shellcheck disable=SC1091
    (source "$dir/admin.env" && hai nodes)
  fi
  return $bad
}

case "$cmd" in
  up) up ;;
  start) up ;;
  status) status ;;
  down) down ;;
  stop) purge=1; down ;;
  *) echo "usage: deploy/local-cluster.sh up|status|down [DIR] [--config FILE] [--purge]" >&2; exit 64 ;;
esac
