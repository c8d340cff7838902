#!/usr/bin/env bash
# The README's first command: installs dependencies, builds, starts the local one-machine cluster
# (deploy/local-cluster.sh: hai-server and four hai-agents as nodes) and runs the demo training
# job through the hai CLI: a 2-node data-parallel job over HFReduce that a higher-priority
# 4-node job preempts; it checkpoints, waits, resumes from its checkpoint and finishes.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build.configure.log 2>&1 ||
  { cat build.configure.log; exit 1; }
sed -n '/fireflyer .* configuration/,/^-- $/p' build.configure.log
cmake --build build -j "${FF_JOBS:-$(nproc)}"

dir=$(mktemp -d /tmp/fireflyer-demo.XXXXXX)
rmdir "$dir"
trap 'bash deploy/local-cluster.sh stop "$dir" >/dev/null 2>&1 || true' EXIT
bash deploy/local-cluster.sh start "$dir"
# shellcheck disable=SC1091
source "$dir/env"
hai=build/platform/hai
train=$(pwd)/build/platform/hai-demo-train

state() { "$hai" show "$1" --json | sed -E 's/.*"state":"([A-Z]+)".*/\1/'; }
wait_state() {  # JOB STATE
  for _ in $(seq 600); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.1; done
  echo "demo: job $1 did not reach $2" >&2; "$hai" show "$1" >&2; return 1
}

run() { echo "\$ $*"; "$@"; }

echo "== the cluster =="
run "$hai" nodes --tree
echo "== a researcher submits a 2-node training job at low priority =="
run "$hai" submit --name train --nodes 2 --gpus-per-node 2 --priority 1 -- "$train" 40 0.1
wait_state 1 RUNNING
sleep 1
echo "== an urgent job needs all four nodes: the training job is suspended to make room =="
run "$hai" submit --name urgent --nodes 4 --gpus-per-node 2 --priority 5 --may-span-zones -- "$train" 10 0.05
wait_state 1 SUSPENDED
run "$hai" ls
wait_state 2 SUCCEEDED
echo "== the training job resumes from its checkpoint and finishes =="
run "$hai" logs 1 -f
wait_state 1 SUCCEEDED
run "$hai" show 1
run "$hai" ls -a
if [ -d "$dir/fs3-mnt" ]; then
  echo "== its checkpoints are on fs3 (mounted at $dir/fs3-mnt) =="
  run find "$dir/fs3-mnt/checkpoints" -type f
  run build/fs3/fs3 fsck --meta "$(sed -E 's/.*"rpc":"([^"]+)".*/\1/' "$dir/fs3/meta.ready")"
fi
