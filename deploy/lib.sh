# Shell helpers shared by deploy/local-cluster.sh and deploy/fs3-local.sh (sourced; they set
# `dir`, the state folder, and `say`).

wait_ready() {  # FILE NAME: waits up to 20 s for a daemon's ready file; shows its log if not
  for _ in $(seq 400); do [ -s "$1" ] && return 0; sleep 0.05; done
  say "$2 did not start; its log:"; cat "$dir/$2.log" >&2; return 1
}

json_field() {  # FILE KEY: a string field of a one-line JSON file (a ready file)
  sed -E "s/.*\"$2\":\"([^\"]+)\".*/\1/" "$1"
}
