#!/usr/bin/env bash
# The README's first command: installs dependencies, builds, starts the whole stack on this
# machine (deploy/local-cluster.sh: fs3 with chains of three, hai-server, four nodes each with a
# hai-agent and a hai-health, Prometheus), writes a token dataset into fs3, and submits through
# `hai` a 2-node x 2-rank HaiScale training job of the repo's GPT over HFReduce, reading its data
# from fs3 (fs3client) and checkpointing to the fs3 mount. A higher-priority job preempts it; it
# checkpoints, waits, resumes from its checkpoint and finishes. The cluster stays up afterwards
# (DEMO_KEEP=0 takes it down) so that `hai ls`, `hai logs` and Prometheus can be looked at.
#
# Environment: DEMO_DIR (default /tmp/fireflyer-demo; an earlier demo there is purged first),
# DEMO_STEPS (default 300), FF_JOBS (build jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash deploy/install-deps.sh
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build.configure.log 2>&1 ||
  { cat build.configure.log; exit 1; }
sed -n '/fireflyer .* configuration/,/^-- $/p' build.configure.log
# Only what the demo runs (the local-cluster target: the daemons, the CLIs, the Python extensions),
# not the tests: deploy/test.sh builds everything.
cmake --build build -j "${FF_JOBS:-$(nproc)}" --target local-cluster

dir=${DEMO_DIR:-/tmp/fireflyer-demo}
steps=${DEMO_STEPS:-300}
bash deploy/local-cluster.sh down "$dir" --purge >/dev/null 2>&1 || true
if [ "${DEMO_KEEP:-1}" = 0 ]; then
  trap 'bash deploy/local-cluster.sh down "$dir" --purge >/dev/null 2>&1 || true' EXIT
fi
bash deploy/local-cluster.sh up "$dir"
# shellcheck disable=SC1091
source "$dir/env"
[ -n "${FS3_MOUNT:-}" ] || { echo "demo: needs fs3 (run as root, with /dev/fuse)" >&2; exit 1; }
hai=build/platform/hai
py=$root/.venv/bin/python

state() { "$hai" show "$1" --json | sed -E 's/.*"state":"([A-Z]+)".*/\1/'; }
wait_state() {  # JOB STATE [SECONDS]
  for _ in $(seq $(( ${3:-120} * 10 ))); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.1; done
  echo "demo: job $1 did not reach $2" >&2; "$hai" show "$1" >&2; "$hai" logs "$1" >&2 || true; return 1
}
run() { echo "\$ $*"; "$@"; }

echo "== the cluster =="
run "$hai" nodes --tree
echo "== a token dataset into fs3 (this repository's text, one token per byte) =="
"$py" - <<'PY'
import glob, numpy as np, fs3client
from fs3client.data import write_tokens
text = b"".join(open(p, "rb").read() for p in sorted(glob.glob("**/*.md", recursive=True))
                if not p.startswith(("build", ".venv")))
fs = fs3client.FileSystem.from_env()
fs.makedirs("/datasets")
f = write_tokens(fs, "/datasets/corpus.u16", np.frombuffer(text, np.uint8), dtype="uint16")
print(f"/datasets/corpus.u16: {f.size // 2} tokens ({f.size} bytes) on fs3")
PY

echo "== a researcher submits a 2-node x 2-rank GPT training job at low priority =="
train="$py $root/haiscale/examples/train_gpt.py --fs3-data /datasets/corpus.u16 --vocab 256"
train+=" --seq-len 64 --batch 16 --steps $steps --save-every 25 --log-every 25 --lr 3e-3"
train+=" --loss-csv $dir/loss.csv --loss-plot $dir/loss.svg"
run "$hai" submit --name gpt --nodes 2 --gpus-per-node 2 --procs-per-node 2 --priority 1 -- "$train"
wait_state 1 RUNNING
for _ in $(seq 600); do "$hai" logs 1 2>/dev/null | grep -q "step    50" && break; sleep 0.2; done
run "$hai" logs 1 --rank 0
echo "== an urgent job needs all four nodes: the training job checkpoints and is suspended =="
run "$hai" submit --name urgent --nodes 4 --gpus-per-node 2 --priority 5 --may-span-zones -- \
  "$root/build/platform/hai-demo-train" 60 0.05
for _ in $(seq 1200); do "$hai" show 1 --json | grep -q '"end_reason":"suspended"' && break; sleep 0.1; done
run "$hai" ls
wait_state 2 SUCCEEDED
echo "== the training job resumes from its checkpoint on fs3 and finishes =="
wait_state 1 SUCCEEDED 600
run "$hai" logs 1 --rank 0
run "$hai" show 1
run "$hai" metrics 1 --points 12
run find "$FS3_MOUNT/checkpoints/researcher/1" -maxdepth 2
run build/fs3/fs3 fsck --meta "$FS3_META"
first=$(sed -n 2p "$dir/loss.csv" | cut -d, -f2)
last=$(tail -n 1 "$dir/loss.csv" | cut -d, -f2)
echo
echo "demo: job 1 trained $steps steps over HFReduce on 2 nodes x 2 ranks, preempted and resumed:"
echo "demo:   loss $first -> $last (curve: $dir/loss.svg, $dir/loss.csv)"
echo "demo: look around:  source $dir/env; hai ls -a; hai logs 1; hai metrics 1; hai nodes --health"
echo "demo:   web view:   $HAI_WEB_URL (log in with the token in \$HAI_TOKEN: source $dir/env; echo \$HAI_TOKEN)"
echo "demo:   Prometheus: $PROMETHEUS_URL (targets, alerts);  fs3: $FS3_MOUNT"
echo "demo:   stop it:    deploy/local-cluster.sh down $dir --purge"
