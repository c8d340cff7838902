#!/usr/bin/env bash
# A one-machine fs3 (fs3-mgmtd, storage services, fs3-meta and a FUSE mount under one folder):
# start, stop, down, status, kill and restart one service. The entry point of deploy/fs3_local.py,
# which says how to use it; the daemons are started by deploy/daemons.py.
#   deploy/fs3-local.sh start [DIR] | stop [DIR] | down [DIR] | status [DIR] | kill|restart NAME [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 deploy/fs3_local.py "$@"
