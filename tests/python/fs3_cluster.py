"""A real fs3 on loopback for Python tests: fs3-mgmtd, N fs3-storage services (one target each,
chains of `replication`), fs3-meta; no FUSE mount (the native client needs none).

The daemons are started by ffdeploy.daemons (the one way to start them); the binaries come from
$FF_BUILD_DIR/fs3 (CTest sets it). Every daemon is stopped when the context ends, also on failure.
"""

import os
import subprocess
import time

from ffdeploy.daemons import fs3_meta, fs3_mgmtd, fs3_storage, stop_all


class Fs3Cluster:
    def __init__(self, directory, storage=3, replication=3, chunk_size=1 << 20,
                 storage_options=None):
        """storage_options(i) -> more [storage] keys for storage service i (1..storage)."""
        self.storage_options = storage_options or (lambda i: {})
        build = os.environ.get("FF_BUILD_DIR")
        if not build:
            raise RuntimeError("FF_BUILD_DIR (the CMake build directory) is not set")
        self.bin = os.path.join(build, "fs3")
        self.dir = directory
        self.storage = storage
        self.replication = replication
        self.chunk_size = chunk_size
        self.daemons = []
        self.mgmtd = self.meta = None

    def _start(self, daemon):
        self.daemons.append(daemon)
        return daemon.start()

    def __enter__(self):
        try:
            self.mgmtd = self._start(fs3_mgmtd(self.bin, self.dir, lease_ms=3000,
                                               restart_grace_ms=5000)).rpc
            for i in range(1, self.storage + 1):
                self._start(fs3_storage(self.bin, self.dir, f"storage-{i}", self.mgmtd,
                                        [(100 + i, os.path.join(self.dir, f"st{i}"))],
                                        name=f"storage{i}", **self.storage_options(i)))
            fs3 = os.path.join(self.bin, "fs3")
            deadline = time.time() + 20
            while time.time() < deadline:
                out = subprocess.run([fs3, "--mgmtd", self.mgmtd, "nodes", "--json"],
                                     capture_output=True, text=True).stdout
                if out.count('"up"') >= self.storage:  # each storage service's state
                    break
                time.sleep(0.1)
            subprocess.run([fs3, "--mgmtd", self.mgmtd, "init", "--chunk-size", str(self.chunk_size),
                            "--replication", str(self.replication)], check=True, capture_output=True)
            self.meta = self._start(fs3_meta(self.bin, self.dir, self.mgmtd, self.chunk_size)).rpc
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        stop_all(self.daemons)
