"""One way to start the stack's daemons from Python: each daemon's config as data (written as
TOML), started with --config and --ready-file, waited for until ready, stopped, killed, restarted.

    from daemons import Daemon, fs3_mgmtd, fs3_storage
    m = fs3_mgmtd(bin_dir, work_dir, lease_ms=3000).start()        # m.rpc: its "host:port"
    s = fs3_storage(bin_dir, work_dir, "storage-1", m.rpc, [(101, path)]).start()
    s.kill(); s.start()                                                 # a crash and a restart
    m.stop()

Every daemon writes <dir>/<name>.toml, .ready and .log; a daemon that exits before it is ready
raises with the tail of its log. Used by the Python and torch test harnesses
(tests/python/fs3_cluster.py, tests/torch/hai_cluster.py).
"""

import json
import os
import signal
import subprocess
import time


def _value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string is a JSON string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {type(v).__name__}: {v!r}")


def toml(config):
    """{section: {key: value, key: [ {table}, ... ]}} as TOML (one level of sections, whose
    lists of dicts become arrays of tables)."""
    out = []
    for section, keys in config.items():
        out.append(f"[{section}]")
        tables = []
        for k, v in keys.items():
            if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                tables.append((k, v))
            elif v is not None:
                out.append(f"{k} = {_value(v)}")
        for k, rows in tables:
            for row in rows:
                out.append(f"[[{section}.{k}]]")
                out.extend(f"{rk} = {_value(rv)}" for rk, rv in row.items())
        out.append("")
    return "\n".join(out)


class Daemon:
    """One daemon process of the stack (any of our binaries that takes --config and
    --ready-file)."""

    def __init__(self, binary, name, directory, config, args=(), env=None):
        self.binary = binary
        self.name = name
        self.dir = directory
        self.config = config
        self.args = list(args)
        self.env = env
        self.proc = None
        self.ready = None

    def path(self, suffix):
        return os.path.join(self.dir, f"{self.name}.{suffix}")

    @property
    def rpc(self):
        return self.ready["rpc"]

    def start(self, timeout=30):
        os.makedirs(self.dir, exist_ok=True)
        with open(self.path("toml"), "w") as f:
            f.write(toml(self.config))
        ready = self.path("ready")
        if os.path.exists(ready):
            os.remove(ready)
        env = None if self.env is None else {**os.environ, **self.env}
        with open(self.path("log"), "a") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--config", self.path("toml"), "--ready-file", ready, *self.args],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(ready) and os.path.getsize(ready) > 0:
                with open(ready) as f:
                    self.ready = json.load(f)
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{self.name} ({os.path.basename(self.binary)}) did not become ready:\n"
                           + self.log_tail())

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def terminate(self):
        """SIGTERM, without waiting (stop() waits)."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self):
        """SIGKILL (a crash); returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode

    def restart(self, timeout=30):
        self.stop()
        return self.start(timeout)

    def log_tail(self, chars=3000):
        try:
            with open(self.path("log")) as f:
                return f.read()[-chars:]
        except OSError:
            return ""


def stop_all(daemons, timeout=10):
    """Stops daemons together: all are signalled, then each is waited for."""
    for d in daemons:
        d.terminate()
    for d in daemons:
        d.stop(timeout)


def _common(listen, metrics):
    return {"server": {"listen": listen},
            "metrics": {"listen": "127.0.0.1:0"} if metrics else {"enabled": False}}


def fs3_mgmtd(bin_dir, directory, name="mgmtd", listen="127.0.0.1:0", metrics=True, **mgmtd):
    """fs3-mgmtd with its data in <directory>/<name>-data; `mgmtd` adds [mgmtd] keys."""
    config = _common(listen, metrics)
    config["mgmtd"] = {"data_dir": os.path.join(directory, f"{name}-data"), **mgmtd}
    return Daemon(os.path.join(bin_dir, "fs3-mgmtd"), name, directory, config)


def fs3_storage(bin_dir, directory, node, mgmtd, targets, name=None, listen="127.0.0.1:0",
                metrics=True, **storage):
    """fs3-storage `node` with `targets` [(id, path), ...]; `storage` adds [storage] keys."""
    config = _common(listen, metrics)
    config["storage"] = {"node": node, "mgmtd": mgmtd, **storage,
                         "targets": [{"id": i, "path": p} for i, p in targets]}
    return Daemon(os.path.join(bin_dir, "fs3-storage"), name or node, directory, config)


def fs3_meta(bin_dir, directory, mgmtd, chunk_size, name="meta", listen="127.0.0.1:0",
             metrics=True, **meta):
    """fs3-meta with its data in <directory>/<name>-data; `meta` adds [meta] keys."""
    config = _common(listen, metrics)
    config["meta"] = {"data_dir": os.path.join(directory, f"{name}-data"), "chunk_size": chunk_size,
                      "mgmtd": mgmtd, **meta}
    return Daemon(os.path.join(bin_dir, "fs3-meta"), name, directory, config)


def hai_server(bin_dir, directory, cluster, listen, name="server", metrics=False, **hai):
    """hai-server over `cluster` (a cluster.toml path), its data in <directory>/<name>, the
    agents' token in <directory>/agent.token; `hai` adds [hai] keys."""
    config = _common(listen, metrics)
    config["hai"] = {"data_dir": os.path.join(directory, name), "cluster": cluster,
                     "agent_token_file": os.path.join(directory, "agent.token"), **hai}
    return Daemon(os.path.join(bin_dir, "hai-server"), name, directory, config)


def hai_agent(bin_dir, directory, node, server, listen, name=None, metrics=False, **agent):
    """The hai-agent of `node`, its state in <directory>/<name>-state; `agent` adds [agent]
    keys."""
    name = name or f"agent-{node}"
    config = _common(listen, metrics)
    config["agent"] = {"node": node, "server": server,
                       "token_file": os.path.join(directory, "agent.token"),
                       "state_dir": os.path.join(directory, f"{name}-state"), **agent}
    return Daemon(os.path.join(bin_dir, "hai-agent"), name, directory, config)


def hai_web(bin_dir, directory, server, listen="127.0.0.1:0", fs3_mgmtd=None, name="web", **web):
    """hai-web, the read-only web view of hai-server `server` (and fs3-mgmtd `fs3_mgmtd`, when
    given); its address is ready["http"]; `web` adds [web] keys."""
    config = {"web": {"listen": listen, "hai_server": server, "fs3_mgmtd": fs3_mgmtd, **web}}
    return Daemon(os.path.join(bin_dir, "hai-web"), name, directory, config)
