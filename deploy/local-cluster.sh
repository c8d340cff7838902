#!/usr/bin/env bash
# The whole stack on this machine (fs3 with its mount, hai-server, a hai-agent and hai-health per
# node, hai-web, Prometheus) from deploy/config/local-cluster.toml, its state under one folder.
# The entry point of ffdeploy.local_cluster (deploy/ffdeploy/local_cluster.py, which says how to
# use it; installed, the console script ff-local-cluster); the daemons are started by
# ffdeploy.daemons.
#   deploy/local-cluster.sh up [DIR] [--config FILE] [--netlab NAME] | status [DIR] | down [DIR] [--purge]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/deploy${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m ffdeploy.local_cluster "$@"
