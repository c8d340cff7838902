"""One way to start the stack's daemons from Python: each daemon's config as data (written as
TOML), started with --config and --ready-file, waited for until ready, stopped, killed, restarted.

    from ffdeploy.daemons import Daemon, fs3_mgmtd, fs3_storage
    m = fs3_mgmtd(bin_dir, work_dir, lease_ms=3000).start()        # m.rpc: its "host:port"
    s = fs3_storage(bin_dir, work_dir, "storage-1", m.rpc, [(101, path)]).start()
    s.kill(); s.start()                                                 # a crash and a restart
    m.stop()

Every daemon writes <dir>/<name>.toml, .ready, .log, .pid and .daemon.json; a daemon that exits
before it is ready raises with the tail of its log; the ports it bound are written back into its
config, so a restart comes back at the same addresses; Daemon.load gives it back to another
process. Used by the local cluster and the one-machine fs3 (ffdeploy.local_cluster,
ffdeploy.fs3_local), the network lab (ffdeploy.netlab_cluster, where each daemon runs `inside`
its host's namespace), the Python and torch test harnesses (tests/python/fs3_cluster.py,
tests/torch/hai_cluster.py, tests/torch/test_ft.py's hfreduce-store) and the benches
(haiscale/bench/ft_bench.py): the only way Python starts a process of the stack.
"""

import json
import os
import signal
import subprocess
import time
import urllib.request

# The [tls] section every daemon of ours started from this process gets, unless its config has
# one: {"ca_file": ..., "cert_file": ..., "key_file": ...} (common/tls.h), or None (plain). The
# local cluster sets it when it runs TLS; a restart from disk keeps it (it is in the config).
TLS = None


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


# Where each section's listen address is reported in a ready file: after the first start, the
# config is rewritten with the ports a daemon bound (port 0 in its config), so that a restart
# comes back at the same addresses (clients, mounts and scrape targets keep working).
_READY_KEYS = {"server": "rpc", "metrics": "metrics", "web": "http", "store": "rpc"}


class Daemon:
    """One daemon process of the stack (any of our binaries that takes --config and
    --ready-file). Its files: <dir>/<name>.toml (config), .log, .ready, .pid, and .daemon.json
    (how to start it again: Daemon.load gives it back in another process, as the CLIs
    deploy/fs3-local.sh and deploy/local-cluster.sh do across invocations)."""

    def __init__(self, binary, name, directory, config, args=(), env=None, health_url=None):
        self.binary = binary
        self.name = name
        self.dir = directory
        self.config = config  # None: the .toml on disk is the config (a loaded daemon)
        self.args = list(args)
        self.env = env
        # A daemon of another project (etcd): `args` are its whole command line, and it is ready
        # when `health_url` answers {"health":"true"} (the ready file then holds its endpoints).
        self.health_url = health_url
        self.prefix = []  # what the command runs under, e.g. ["ip", "netns", "exec", NS]
        self.proc = None
        self.pid = None
        self.ready = None

    def inside(self, prefix):
        """Runs the daemon under `prefix` (a network lab's host: ip netns exec NS, or nsenter
        --net=...); returns self."""
        self.prefix = list(prefix)
        return self

    def path(self, suffix):
        return os.path.join(self.dir, f"{self.name}.{suffix}")

    @property
    def rpc(self):
        return self.ready["rpc"]

    @classmethod
    def load(cls, directory, name):
        """The daemon `name` that an earlier process started in `directory` (its pid, its
        endpoints, how to start it again)."""
        with open(os.path.join(directory, f"{name}.daemon.json")) as f:
            saved = json.load(f)
        d = cls(saved["binary"], name, directory, None, saved["args"], saved["env"],
                saved.get("health_url"))
        d.prefix = saved["prefix"]
        try:
            with open(d.path("pid")) as f:
                d.pid = int(f.read().strip() or 0) or None
        except (OSError, ValueError):
            d.pid = None
        try:
            with open(d.path("ready")) as f:
                d.ready = json.load(f)
        except (OSError, ValueError):
            d.ready = None
        return d

    @staticmethod
    def saved(directory):
        """The names of the daemons started in `directory`, sorted."""
        try:
            return sorted(n[:-len(".daemon.json")] for n in os.listdir(directory)
                          if n.endswith(".daemon.json"))
        except OSError:
            return []

    def start(self, timeout=30, wait=True):
        """Starts it and (with `wait`) waits until it is ready; wait_ready() waits later (the
        members of an etcd cluster are ready only once a majority runs)."""
        os.makedirs(self.dir, exist_ok=True)
        if self.config is not None and TLS and not self.health_url:
            self.config.setdefault("tls", dict(TLS))
        if self.config is not None:
            with open(self.path("toml"), "w") as f:
                f.write(toml(self.config))
        with open(self.path("daemon.json"), "w") as f:
            json.dump({"binary": self.binary, "args": self.args, "env": self.env,
                       "prefix": self.prefix, "health_url": self.health_url}, f)
        ready = self.path("ready")
        if os.path.exists(ready):
            os.remove(ready)
        env = None if self.env is None else {**os.environ, **self.env}
        argv = ([*self.prefix, self.binary, *self.args] if self.health_url else
                [*self.prefix, self.binary, "--config", self.path("toml"), "--ready-file", ready,
                 *self.args])
        with open(self.path("log"), "a") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.pid = self.proc.pid
        with open(self.path("pid"), "w") as f:
            f.write(f"{self.pid}\n")
        return self.wait_ready(timeout) if wait else self

    def wait_ready(self, timeout=30):
        ready = self.path("ready")
        deadline = time.monotonic() + timeout
        if self.health_url:
            while time.monotonic() < deadline:
                if self._healthy():
                    self.ready = {"rpc": self.health_url.split("//", 1)[1].split("/", 1)[0]}
                    with open(ready, "w") as f:
                        json.dump(self.ready, f)
                    return self
                if self.proc is not None and self.proc.poll() is not None:
                    break
                time.sleep(0.1)
            self.kill()
            raise RuntimeError(f"{self.name} ({os.path.basename(self.binary)}) did not become "
                               "healthy:\n" + self.log_tail())
        while time.monotonic() < deadline:
            if os.path.exists(ready) and os.path.getsize(ready) > 0:
                with open(ready) as f:
                    self.ready = json.load(f)
                self._pin_ports()
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{self.name} ({os.path.basename(self.binary)}) did not become ready:\n"
                           + self.log_tail())

    def _healthy(self):
        if self.prefix:  # inside a network lab's host: ask from there (no route from here)
            try:
                return subprocess.run(
                    [*self.prefix, "etcdctl", f"--endpoints={self.health_url.rsplit('/', 1)[0]}",
                     "--dial-timeout=1s", "endpoint", "health"], capture_output=True,
                    env={**os.environ, "ETCDCTL_API": "3"}, timeout=5).returncode == 0
            except subprocess.TimeoutExpired:
                return False
        try:
            with urllib.request.urlopen(self.health_url, timeout=1) as r:
                return b'"true"' in r.read()
        except OSError:
            return False

    def _pin_ports(self):
        if self.config is None:
            return
        changed = False
        for section, key in _READY_KEYS.items():
            listen = self.config.get(section, {}).get("listen")
            if isinstance(listen, str) and listen.endswith(":0") and self.ready.get(key):
                self.config[section]["listen"] = self.ready[key]
                changed = True
        if changed:
            with open(self.path("toml"), "w") as f:
                f.write(toml(self.config))

    def running(self):
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # Exited but not yet reaped by the process that started it (a zombie) is not running.
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            return False

    def terminate(self):
        """SIGTERM, without waiting (stop() waits)."""
        if self.running():
            os.kill(self.pid, signal.SIGTERM)

    def _wait(self, timeout):
        """True when the process is gone within `timeout` seconds."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while self.running():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code (None if never started
        or not started by this process)."""
        if self.pid is None:
            return None
        if self.running():
            os.kill(self.pid, signal.SIGTERM)
            if not self._wait(timeout):
                self.kill()
        return self.proc.returncode if self.proc is not None else None

    def kill(self):
        """SIGKILL (a crash); returns the exit code."""
        if self.pid is None:
            return None
        if self.running():
            os.kill(self.pid, signal.SIGKILL)
            self._wait(30)
        return self.proc.returncode if self.proc is not None else None

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
    """fs3-mgmtd with its data in <directory>/<name>-data; `mgmtd` adds [mgmtd] keys (a key
    given None is left out: data_dir=None with engine="etcd")."""
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
    """fs3-meta with its data in <directory>/<name>-data; `meta` adds [meta] keys (a key given
    None is left out)."""
    config = _common(listen, metrics)
    config["meta"] = {"data_dir": os.path.join(directory, f"{name}-data"), "chunk_size": chunk_size,
                      "mgmtd": mgmtd, **meta}
    return Daemon(os.path.join(bin_dir, "fs3-meta"), name, directory, config)


def hfreduce_store(bin_dir, directory, name="store", listen="127.0.0.1:0", stores=None):
    """hfreduce-store (bin_dir: the build's hfreduce/): the rendezvous store and replica quorums
    for jobs outside HAI-Platform; `stores` lists every server of the quorum service ("a,b")."""
    config = {"store": {"listen": listen, "stores": stores}}
    return Daemon(os.path.join(bin_dir, "hfreduce-store"), name, directory, config)


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
    config = {"metrics": {"enabled": False},
              "web": {"listen": listen, "hai_server": server, "fs3_mgmtd": fs3_mgmtd, **web}}
    return Daemon(os.path.join(bin_dir, "hai-web"), name, directory, config)


def fs3_fuse(bin_dir, directory, mount, meta, mgmtd, name="fuse", metrics_listen="127.0.0.1:0",
             **fuse):
    """fs3-fuse mounting fs3 at `mount`; `fuse` adds [fuse] keys."""
    config = {"metrics": {"listen": metrics_listen}, "fuse": {"meta": meta, "mgmtd": mgmtd, **fuse}}
    return Daemon(os.path.join(bin_dir, "fs3-fuse"), name, directory, config, args=[mount])


def netlab_prefix(lab, node):
    """What runs a command in NODE's host of the network lab LAB (deploy/netlab.py): nsenter into
    its network namespace only, so mounts stay shared (a FUSE mount made there is every host's)."""
    ns = f"/run/netns/{lab}-{node}"
    if not os.path.exists(ns):
        raise RuntimeError(f"the network lab '{lab}' has no host {node} "
                           f"(deploy/netlab.py up CLUSTER_TOML --name {lab})")
    return ["nsenter", f"--net={ns}"]


def netlab_address(lab, node):
    """NODE's address in the network lab LAB."""
    try:
        with open(f"/run/netlab/{lab}.json") as f:
            hosts = json.load(f)["hosts"]
        return next(h["address"] for h in hosts if h["node"] == node)
    except (OSError, ValueError, KeyError, StopIteration):
        raise RuntimeError(f"the network lab '{lab}' has no host {node} "
                           f"(deploy/netlab.py up CLUSTER_TOML --name {lab})") from None


def hai_health(bin_dir, directory, node, server, token_file, name=None,
               metrics_listen="127.0.0.1:0", **health):
    """The hai-health of `node`, reporting to hai-server `server`; `health` adds [health] keys."""
    config = {"metrics": {"listen": metrics_listen},
              "health": {"node": node, "server": server, "token_file": token_file, **health}}
    return Daemon(os.path.join(bin_dir, "hai-health"), name or f"health-{node}", directory, config)


def etcd_members(directory, count, host="127.0.0.1", names=None, binary=None):
    """An etcd cluster of `count` members (Debian's etcd-server) on `host`, on free ports (or on
    the hosts in `names`: [(name, host, prefix)], each with a network lab host's address and
    prefix, on etcd's own ports 2379 and 2380), data in <directory>/<name>-data; each member is a
    Daemon whose ready["rpc"] is its client endpoint. Start them together with start_etcd()."""
    import shutil
    import socket
    binary = binary or shutil.which("etcd") or "/usr/bin/etcd"
    members = names or [(f"etcd{i + 1}", host, []) for i in range(count)]

    # Free ports, every socket held until all are chosen (one released at once may be handed
    # out again: two members on one port).
    held = []

    def free_port(h):
        s = socket.socket()
        s.bind((h, 0))
        held.append(s)
        return s.getsockname()[1]

    ports = [(2379, 2380) if names else (free_port(h), free_port(h)) for _, h, _ in members]
    for s in held:
        s.close()
    initial = ",".join(f"{n}=http://{h}:{peer}" for (n, h, _), (_, peer) in zip(members, ports))
    out = []
    for (name, h, prefix), (client, peer) in zip(members, ports):
        args = [f"--name={name}", f"--data-dir={os.path.join(directory, name + '-data')}",
                f"--listen-client-urls=http://{h}:{client}",
                f"--advertise-client-urls=http://{h}:{client}",
                f"--listen-peer-urls=http://{h}:{peer}",
                f"--initial-advertise-peer-urls=http://{h}:{peer}",
                f"--initial-cluster={initial}", "--initial-cluster-state=new",
                "--initial-cluster-token=fireflyer",
                # fs3-meta's transactions (one operation's keys, one fsck repair's) fit in one
                "--max-txn-ops=1024",
                # old revisions go after 10 minutes (the store grows with every write otherwise)
                "--auto-compaction-mode=periodic", "--auto-compaction-retention=10m",
                # a member cut off and back does not depose the Raft leader (etcd 3.5's default):
                # without it, every heal is an etcd election, and leases held through it wobble
                "--pre-vote=true",
                "--logger=zap", "--log-level=warn"]
        d = Daemon(binary, name, directory, None, args, health_url=f"http://{h}:{client}/health")
        out.append(d.inside(prefix))
    return out


def start_etcd(members, timeout=60):
    """Starts every member, then waits until each reports a healthy cluster (a majority with a
    leader). Returns "host:port,host:port,..." (the client endpoints)."""
    for m in members:
        m.start(wait=False)
    for m in members:
        m.wait_ready(timeout)
    return ",".join(m.rpc for m in members)
