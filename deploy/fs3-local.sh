#!/usr/bin/env bash
# A one-machine fs3 (fs3-mgmtd, storage services, fs3-meta and a FUSE mount under one folder):
# start, stop, down, status, kill and restart one service. The entry point of ffdeploy.fs3_local
# (deploy/ffdeploy/fs3_local.py, which says how to use it; installed, the console script
# ff-fs3-local); the daemons are started by ffdeploy.daemons.
#   deploy/fs3-local.sh start [DIR] | stop [DIR] | down [DIR] | status [DIR] | kill|restart NAME [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/deploy${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m ffdeploy.fs3_local "$@"
