# Shell helpers shared by deploy/local-cluster.sh and deploy/fs3-local.sh (sourced; they set
# `dir`, the state folder, and `say`).

wait_ready() {  # FILE NAME: waits up to 20 s for a daemon's ready file; shows its log if not
  for _ in $(seq 400); do [ -s "$1" ] && return 0; sleep 0.05; done
  say "$2 did not start; its log:"; cat "$dir/$2.log" >&2; return 1
}

json_field() {  # FILE KEY: a string field of a one-line JSON file (a ready file)
  sed -E "s/.*\"$2\":\"([^\"]+)\".*/\1/" "$1"
}

# Writes the ports a daemon bound (port 0 in its config) into its config, so that a restart from
# the same config comes back at the same addresses (clients, scrape targets).
pin_ports() {  # CONFIG READY
  [ -e "$1" ] || return 0
  local rpc metrics http
  rpc=$(grep -o '"rpc":"[^"]*"' "$2" | cut -d'"' -f4 || true)
  metrics=$(grep -o '"metrics":"[^"]*"' "$2" | cut -d'"' -f4 || true)
  http=$(grep -o '"http":"[^"]*"' "$2" | cut -d'"' -f4 || true)
  awk -v rpc="$rpc" -v metrics="$metrics" -v http="$http" '
    /^\[/ { section = $0 }
    /^listen = "[^"]*:0"$/ && section == "[server]" && rpc != "" { print "listen = \"" rpc "\""; next }
    /^listen = "[^"]*:0"$/ && section == "[metrics]" && metrics != "" { print "listen = \"" metrics "\""; next }
    /^listen = "[^"]*:0"$/ && section == "[web]" && http != "" { print "listen = \"" http "\""; next }
    { print }' "$1" >"$1.tmp" && mv "$1.tmp" "$1"
}

# The network lab (deploy/netlab.py). With NETLAB set to a lab's name, each service runs in its
# node's host of that lab and binds the host's address, so that its traffic crosses the emulated
# switches; without, everything runs here on 127.0.0.1.
#   at_node NODE   sets the array `at` to the prefix that runs a command in NODE's host: nsenter
#                  into its network namespace only (mounts stay shared: a FUSE mount made there is
#                  every host's, and the hosts see this machine's files)
#   node_addr NODE prints NODE's address in the lab (127.0.0.1 without one)
#   at_head NODE   sets `head_at` and `head_addr` likewise, for the node of the head services
at_node() {
  at=()
  [ -n "${NETLAB:-}" ] || return 0
  if [ ! -e "/run/netns/$NETLAB-$1" ]; then
    say "the network lab '$NETLAB' has no host $1 (deploy/netlab.py up CLUSTER_TOML --name $NETLAB)"
    return 1
  fi
  at=(nsenter "--net=/run/netns/$NETLAB-$1")
}

node_addr() {
  if [ -z "${NETLAB:-}" ]; then
    echo 127.0.0.1
    return 0
  fi
  python3 -c '
import json, sys
hosts = json.load(open(f"/run/netlab/{sys.argv[1]}.json"))["hosts"]
print(next(h["address"] for h in hosts if h["node"] == sys.argv[2]))' "$NETLAB" "$1" 2>/dev/null || {
    say "the network lab '$NETLAB' has no host $1 (deploy/netlab.py up CLUSTER_TOML --name $NETLAB)"
    return 1
  }
}

at_head() {
  head_addr=$(node_addr "$1")
  at_node "$1"
  head_at=("${at[@]}")
}
