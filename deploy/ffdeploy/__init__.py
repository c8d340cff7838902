"""ffdeploy: the stack's deployment tooling as one importable package.

- ``ffdeploy.daemons``: the one way Python starts a process of the stack (each daemon's config as
  data, started with --config and --ready-file, waited for, stopped, restarted).
- ``ffdeploy.fs3_local`` (``ff-fs3-local``, deploy/fs3-local.sh): fs3 on one machine.
- ``ffdeploy.local_cluster`` (``ff-local-cluster``, deploy/local-cluster.sh): the whole stack on
  one machine.
- ``ffdeploy.netlab`` (``ff-netlab``, deploy/netlab.py): an emulated fat-tree network.
- ``ffdeploy.netlab_cluster``: the stack's daemons on that network.

In the source tree, deploy/ is on the path of the project's venv (fireflyer.pth, written when
build/ is configured) and of every test (tests/pytest.ini, CTest's PYTHONPATH); elsewhere,
``pip install --no-build-isolation deploy/`` installs it with its console scripts.
"""

import json
import os
import subprocess


def read_cluster(cluster_toml, hai_sim):
    """A cluster.toml as hai-server reads it: the scheduler's own reading of the file (`hai-sim
    topology --json`: zones, their leaves with `count` and `node_names` applied, every node's
    name, the links' Gbit/s), the only reader of the format. ValueError with hai-sim's message
    when the file is not a topology; FileNotFoundError when hai-sim is not built."""
    if not os.access(hai_sim, os.X_OK):
        raise FileNotFoundError(f"{hai_sim} is missing: build first (it reads cluster.toml)")
    r = subprocess.run([hai_sim, "topology", "--cluster", cluster_toml, "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise ValueError(r.stderr.strip() or f"hai-sim topology could not read {cluster_toml}")
    return json.loads(r.stdout)


def default_hai_sim():
    """hai-sim of the build the tools use: $FF_BUILD_DIR (default build/ in the source tree)."""
    build = os.environ.get("FF_BUILD_DIR", "build")
    return os.path.join(build if os.path.isabs(build) else os.path.join(source_root(), build),
                        "scheduler", "hai-sim")


def source_root():
    """The source tree the tools work in: $FF_SOURCE_DIR when set, else the tree this package
    lies in (deploy/ffdeploy/../..), else the current directory (an installed package run from
    a checkout)."""
    if os.environ.get("FF_SOURCE_DIR"):
        return os.path.abspath(os.environ["FF_SOURCE_DIR"])
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isdir(os.path.join(here, "deploy", "config")):
        return here
    return os.getcwd()
