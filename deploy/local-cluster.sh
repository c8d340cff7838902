#!/usr/bin/env bash
# The whole stack on this machine (fs3 with its mount, hai-server, a hai-agent and hai-health per
# node, hai-web, Prometheus) from deploy/config/local-cluster.conf, its state under one folder.
# The entry point of deploy/local_cluster.py, which says how to use it; the daemons are started by
# deploy/daemons.py.
#   deploy/local-cluster.sh up [DIR] [--config FILE] [--netlab NAME] | status [DIR] | down [DIR] [--purge]
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 deploy/local_cluster.py "$@"
