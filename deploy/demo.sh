#!/usr/bin/env bash
# The README's first command: installs dependencies, builds, and runs what exists so far.
#
# Today that is the daemon skeleton every fireflyer service is built on: it starts ff-echod with
# deploy/config/ff-echod.toml, shows the endpoints it chose, scrapes its Prometheus metrics, and
# stops it with SIGTERM. (Later parts replace this with the local one-machine cluster and a
# training job.)
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build.configure.log 2>&1 ||
  { cat build.configure.log; exit 1; }
sed -n '/fireflyer .* configuration/,/^-- $/p' build.configure.log
cmake --build build -j "${FF_JOBS:-$(nproc)}"

run_dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$run_dir"' EXIT
echo "== starting ff-echod (config deploy/config/ff-echod.toml) =="
build/tests/ff-echod --config deploy/config/ff-echod.toml --ready-file "$run_dir/ready.json" \
  2>"$run_dir/ff-echod.log" &
pid=$!
for _ in $(seq 100); do [ -s "$run_dir/ready.json" ] && break; sleep 0.1; done
[ -s "$run_dir/ready.json" ] || { cat "$run_dir/ff-echod.log"; echo "demo: ff-echod did not start" >&2; exit 1; }
echo "endpoints: $(cat "$run_dir/ready.json")"

metrics=$(sed -E 's/.*"metrics":"([^"]+)".*/\1/' "$run_dir/ready.json")
echo "== GET http://$metrics/metrics (ff_* series) =="
exec 3<>"/dev/tcp/${metrics%:*}/${metrics##*:}"
printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$metrics" >&3
grep -E '^(ff_|process_start)' <&3 || true
exec 3<&-

echo "== stopping ff-echod with SIGTERM =="
kill -TERM "$pid"
wait "$pid" && echo "ff-echod exited cleanly (status 0)"
echo "== its log =="
cat "$run_dir/ff-echod.log"
