"""What the network lab's tests share (netlab_marks_test, netlab_fault_test, netlab_platform_test):
the checks every one makes first, progress lines, failing with one line, and a lab of the test's
topology with the real daemons on it, torn down however the test ends.

    with labtest.lab("nlp", TOPOLOGY, queue_kb=1024) as (cluster, build, tmp, toml):
        ...                    # cluster: deploy/netlab_cluster.LabCluster; tmp: the test's folder
        print("PASS")
"""

import contextlib
import os
import shutil
import sys
import tempfile
import time

from ffdeploy import netlab_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

START = time.monotonic()


def say(msg):
    print(f"[{time.monotonic() - START:6.1f} s] {msg}", flush=True)


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def wait_for(what, check, timeout, every=0.2):
    """Polls check() until it returns something true, which it returns; fails naming `what` after
    `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            fail(f"{what}: not within {timeout} s")
        time.sleep(every)


@contextlib.contextmanager
def lab(prefix, topology, queue_kb, classes=False, needs=()):
    """Checks root, the command line (BUILD_DIR) and the programs in `needs`; writes TOPOLOGY (a
    cluster.toml's text) into a fresh folder and builds a lab of it named PREFIX + pid. Yields
    (cluster, build dir, the folder, the topology's path)."""
    script = os.path.basename(sys.argv[0])
    if os.geteuid() != 0:
        fail("needs root (network namespaces); CI runs it as root")
    if len(sys.argv) != 2:
        fail(f"usage: {script} BUILD_DIR")
    for program in needs:
        if shutil.which(program) is None:
            fail(f"{program} is not installed (deploy/install-deps.sh installs it)")
    build = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix=f"{prefix}-")
    try:
        toml = os.path.join(tmp, "topology.toml")
        with open(toml, "w") as f:
            f.write(topology)
        with netlab_cluster.lab_cluster(f"{prefix}{os.getpid()}"[:8], toml, build,
                                        queue_kb=queue_kb, classes=classes,
                                        work_root=tmp) as cluster:
            yield cluster, build, tmp, toml
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
