"""A real fs3 on loopback for Python tests: fs3-mgmtd, N fs3-storage services (one target each,
chains of `replication`), fs3-meta; no FUSE mount (the native client needs none).

The binaries come from $FF_BUILD_DIR/fs3 (CTest sets it). Every daemon is stopped when the context
ends, also on failure.
"""

import json
import os
import signal
import subprocess
import time


class Fs3Cluster:
    def __init__(self, directory, storage=3, replication=3, chunk_size=1 << 20):
        build = os.environ.get("FF_BUILD_DIR")
        if not build:
            raise RuntimeError("FF_BUILD_DIR (the CMake build directory) is not set")
        self.bin = os.path.join(build, "fs3")
        self.dir = directory
        self.storage = storage
        self.replication = replication
        self.chunk_size = chunk_size
        self.procs = {}
        self.mgmtd = self.meta = None

    def _file(self, name):
        return os.path.join(self.dir, name)

    def _start(self, name, binary, config):
        with open(self._file(name + ".toml"), "w") as f:
            f.write(config)
        ready = self._file(name + ".ready")
        log = open(self._file(name + ".log"), "w")
        p = subprocess.Popen([os.path.join(self.bin, binary), "--config", self._file(name + ".toml"),
                              "--ready-file", ready], stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = p
        deadline = time.time() + 30
        while time.time() < deadline:
            if os.path.exists(ready) and os.path.getsize(ready) > 0:
                with open(ready) as f:
                    return json.load(f)
            if p.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{name} did not start: {open(self._file(name + '.log')).read()}")

    def __enter__(self):
        common = '[server]\nlisten = "127.0.0.1:0"\n[metrics]\nlisten = "127.0.0.1:0"\n'
        self.mgmtd = self._start("mgmtd", "fs3-mgmtd", common + (
            f'[mgmtd]\ndata_dir = "{self._file("mgmtd-data")}"\nlease_ms = 3000\n'
            'restart_grace_ms = 5000\n'))["rpc"]
        for i in range(1, self.storage + 1):
            self._start(f"storage{i}", "fs3-storage", common + (
                f'[storage]\nnode = "storage-{i}"\nmgmtd = "{self.mgmtd}"\n'
                f'  [[storage.targets]]\n  id = {100 + i}\n  path = "{self._file(f"st{i}")}"\n'))
        fs3 = os.path.join(self.bin, "fs3")
        deadline = time.time() + 20
        while time.time() < deadline:
            out = subprocess.run([fs3, "--mgmtd", self.mgmtd, "nodes", "--json"],
                                 capture_output=True, text=True).stdout
            if out.count('"up"') >= self.storage:
                break
            time.sleep(0.1)
        subprocess.run([fs3, "--mgmtd", self.mgmtd, "init", "--chunk-size", str(self.chunk_size),
                        "--replication", str(self.replication)], check=True, capture_output=True)
        self.meta = self._start("meta", "fs3-meta", common + (
            f'[meta]\ndata_dir = "{self._file("meta-data")}"\nchunk_size = {self.chunk_size}\n'
            f'mgmtd = "{self.mgmtd}"\n'))["rpc"]
        return self

    def __exit__(self, *exc):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
