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
  local rpc metrics
  rpc=$(grep -o '"rpc":"[^"]*"' "$2" | cut -d'"' -f4 || true)
  metrics=$(grep -o '"metrics":"[^"]*"' "$2" | cut -d'"' -f4 || true)
  awk -v rpc="$rpc" -v metrics="$metrics" '
    /^\[/ { section = $0 }
    /^listen = "127.0.0.1:0"$/ && section == "[server]" && rpc != "" { print "listen = \"" rpc "\""; next }
    /^listen = "127.0.0.1:0"$/ && section == "[metrics]" && metrics != "" { print "listen = \"" metrics "\""; next }
    { print }' "$1" >"$1.tmp" && mv "$1.tmp" "$1"
}
