#!/usr/bin/env bash
# Installs every Debian package that building, testing and running the local cluster need, then
# the project's Python environment (.venv/ at the root, pinned by deploy/requirements.txt: torch,
# numpy, pytest). Idempotent: when everything is installed it only checks, in about a second.
# Runs as root, or through sudo (for apt-get). Exit status 0 when all is installed.
#
# Environment: FF_PYTHON (the interpreter the venv is made from; default python3),
# FF_TORCH_INDEX_URL (an extra pip index, e.g. for a CUDA variant of torch), FF_NO_VENV=1 (skip
# the Python environment; the build then leaves the PyTorch integration out).
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build ccache pkg-config git clang-format
  # RPC, storage, filesystem, RDMA
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libfuse3-dev fuse3 libibverbs-dev libssl-dev
  # metrics, logging, config, CLI, JSON
  prometheus-cpp-dev libspdlog-dev libfmt-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  # tests and benchmarks (Gloo and OpenMPI are hfreduce-bench's peers)
  libgtest-dev libgmock-dev googletest libbenchmark-dev libgloo-dev libopenmpi-dev openmpi-bin
  # fs3/bench/fuse-bench.sh (fs3-fuse against libfuse's passthrough_ll)
  fio
  # tests/deploy/netlab_test.sh (DSCP marks checked on the wire)
  tcpdump
  # the local cluster's Prometheus server and promtool (alert rules and their tests)
  prometheus
  # deploy/ansible (the playbook for real nodes) and its test against a debootstrap root
  ansible debootstrap
  # fs3/model/check.sh (the chain protocol's Promela model); tests/fuzz/run.sh (libFuzzer)
  spin clang libclang-rt-14-dev
  # the Python environment (.venv) and the haiscale extension's headers
  python3-venv python3-dev
  # hai-web (the cluster's web view): its HTTP server; its browser test drives chromium
  libcpp-httplib-dev chromium chromium-driver
  # the highly available control plane's store (etcd's v3 API over gRPC) and its CLI
  etcd-server etcd-client
)

say() { echo "install-deps: $*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# The project's virtual environment: made once, and re-installed only when the pins change.
python_env() {
  [ "${FF_NO_VENV:-0}" = 1 ] && { say "FF_NO_VENV=1: no Python environment"; return 0; }
  local root venv req stamp python want
  root="$(cd "$(dirname "$0")/.." && pwd)"
  venv="$root/.venv"
  req="$root/deploy/requirements.txt"
  stamp="$venv/.requirements.sha256"
  want="$(sha256sum "$req" | cut -d' ' -f1)${FF_TORCH_INDEX_URL:+ $FF_TORCH_INDEX_URL}"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    say "Python environment $venv up to date"
    return 0
  fi
  python="${FF_PYTHON:-python3}"
  if [ ! -x "$venv/bin/python" ]; then
    say "making the Python environment $venv (from $($python -c 'import sys; print(sys.executable)'))"
    "$python" -m venv "$venv" || { say "$python -m venv failed (Debian: python3-venv)"; return 1; }
  fi
  say "installing deploy/requirements.txt into $venv"
  local log extra=()
  log=$(mktemp)
  [ -n "${FF_TORCH_INDEX_URL:-}" ] && extra=(--extra-index-url "$FF_TORCH_INDEX_URL")
  if ! "$venv/bin/python" -m pip install -q --no-input --disable-pip-version-check "${extra[@]}" \
        -r "$req" >"$log" 2>&1; then
    say "pip install failed: $(grep -E '^ERROR' "$log" | head -n 1 || tail -n 1 "$log")"
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
  echo "$want" >"$stamp"
  say "Python environment ready: $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)')"
}

if [ ${#missing[@]} -eq 0 ]; then
  say "all ${#PACKAGES[@]} packages already installed"
  python_env
  exit $?
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    say "need root (or sudo) to install: ${missing[*]}"
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive

# Package lists may be missing on a fresh machine (or too old to know a package): update once.
need_update=0
if ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then
  need_update=1
else
  for p in "${missing[@]}"; do
    if ! apt-cache show "$p" >/dev/null 2>&1; then need_update=1; break; fi
  done
fi
if [ "$need_update" -eq 1 ]; then
  say "apt-get update"
  if ! "${SUDO[@]}" apt-get update -qq >/dev/null; then
    say "apt-get update failed; check the apt sources and the network"
    exit 1
  fi
fi

for p in "${missing[@]}"; do
  candidate=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    say "package '$p' cannot be had from the configured apt sources (Debian 12 'bookworm' main is needed)"
    exit 1
  fi
done

say "installing ${missing[*]}"
log=$(mktemp)
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  say "apt-get install failed: $(grep -E '^E:' "$log" | head -n 1 || tail -n 1 "$log")"
  rm -f "$log"
  exit 1
fi
rm -f "$log"
say "installed ${#missing[@]} packages"
python_env
