"""A real HAI-Platform on loopback for Python tests: hai-server, hai-agents as nodes, the hai CLI.

The daemons are started by ffdeploy.daemons (deploy/ffdeploy/daemons.py); the binaries come from $FF_BUILD_DIR/platform
(CTest sets it). Every process is stopped, and every
job's process group killed, when the context ends, also on failure.
"""

import json
import os
import random
import signal
import socket
import subprocess
import time

from ffdeploy.daemons import etcd_members, hai_agent, hai_server, start_etcd, stop_all


def quiet_port():
    """A free port below the kernel's ephemeral range. gRPC listens with SO_REUSEPORT, and Linux
    may hand a port such a listener holds to another SO_REUSEPORT socket of the same user bound
    to port 0 (a job's own sockets), which then takes some of the connections meant for it."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and 32000")

def wait_for(what, check, timeout=60, every=0.2):
    """Polls check() until it returns something true, which it returns; an AssertionError naming
    `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout} s")


CLUSTER = """
name = "pytest"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "A-leaf"
  nodes = {nodes}
  gpus_per_node = 2
  cpus_per_node = 8
  memory_gib = 16
"""


class HaiCluster:
    def __init__(self, directory, nodes=2, ha=False, server_options=None):
        """ha: two hai-servers on etcd (one member), a leader and a standby; `servers` lists
        them, `address` is both (the CLI and the agents follow the leader). server_options: more
        [hai] keys."""
        self.server_options = server_options or {}
        build = os.environ.get("FF_BUILD_DIR")
        if not build:
            raise RuntimeError("FF_BUILD_DIR (the CMake build directory) is not set")
        self.bin = os.path.join(build, "platform")
        self.dir = directory
        self.nodes = nodes
        self.daemons = []
        self.agents = []  # agent i runs node A-leaf-n0i
        self.server = None
        self.ha = ha
        self.servers = []
        self.address = f"127.0.0.1:{quiet_port()}"

    def _file(self, name):
        return os.path.join(self.dir, name)

    def __enter__(self):
        with open(self._file("cluster.toml"), "w") as f:
            f.write(CLUSTER.format(nodes=self.nodes))
        try:
            options = dict(checkpoint_root=self._file("ckpt"), heartbeat_timeout_ms=5000,
                           heartbeat_interval_ms=200, schedule_interval_ms=200,
                           suspend_grace_ms=30000,
                           # its own masters' ports: another platform on this machine (a test
                           # beside this one) would hand out the same ones
                           master_port_base=quiet_port())
            options.update(self.server_options)
            if self.ha:
                etcd = etcd_members(self.dir, 1)
                self.daemons.extend(etcd)
                endpoints = start_etcd(etcd)
                options.update(engine="etcd", etcd_endpoints=endpoints.split(","),
                               election_ttl_s=2)
                second = f"127.0.0.1:{quiet_port()}"
            self.server = hai_server(self.bin, self.dir, self._file("cluster.toml"), self.address,
                                     **options)
            self.daemons.append(self.server)
            self.servers.append(self.server)
            self.server.start()
            if self.ha:  # the first leads (its admin token is written then); then the standby
                token = self._file("server/admin.token")
                deadline = time.monotonic() + 30
                while not (os.path.exists(token) and os.path.getsize(token) > 0):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the first hai-server never led")
                    time.sleep(0.1)
                standby = hai_server(self.bin, self.dir, self._file("cluster.toml"), second,
                                     name="server2", **options)
                self.daemons.append(standby)
                self.servers.append(standby)
                standby.start()
                self.address = f"{self.address},{second}"
            self.admin = open(self._file("server/admin.token")).read().strip()
            for i in range(self.nodes):
                agent = hai_agent(self.bin, self.dir, f"A-leaf-n0{i}", self.address,
                                  f"127.0.0.1:{quiet_port()}", name=f"agent{i}", gpus=2,
                                  kill_grace_ms=1000)
                self.daemons.append(agent)
                self.agents.append(agent)
                agent.start()
            self.token = json.loads(self.hai("admin", "user", "add", "researcher", "--json", token=self.admin))["token"]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                nodes = json.loads(self.hai("nodes", "--json", token=self.admin))
                nodes = nodes.get("nodes", nodes) if isinstance(nodes, dict) else nodes
                if sum(1 for n in nodes if n.get("state") == "NODE_UP") == self.nodes:
                    break
                time.sleep(0.2)
            else:
                raise RuntimeError(f"the agents never reported in: {nodes}")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        stop_all(self.daemons)
        for i in range(self.nodes):  # jobs live in their own process groups
            try:
                tasks = json.load(open(self._file(f"agent{i}-state/tasks.json")))
            except (OSError, ValueError):
                continue
            for t in tasks if isinstance(tasks, list) else []:
                if t.get("pid", -1) > 0:
                    try:
                        os.killpg(t["pid"], signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def hai(self, *args, token=None, check=True):
        env = dict(os.environ, HAI_SERVER=self.address, HAI_TOKEN=token or self.token, HOME=self.dir)
        r = subprocess.run([os.path.join(self.bin, "hai"), *args], env=env, capture_output=True, text=True,
                           timeout=60)
        if check and r.returncode != 0:
            server = self.server
            state = "running" if server and server.running() else f"exited {server and server.proc.returncode}"
            tail = server.log_tail(2000) if server else ""
            raise RuntimeError(f"hai {' '.join(args)} exited {r.returncode}: {r.stderr}\n"
                               f"hai-server is {state}; its log ends:\n{tail}")
        return r.stdout

    def submit(self, *args):
        return json.loads(self.hai("submit", "--json", *args))["id"]

    def show(self, job):
        return json.loads(self.hai("show", str(job), "--json"))

    def logs(self, job, rank=0):
        return self.hai("logs", str(job), "--rank", str(rank))

    def wait_state(self, job, state, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.show(job)
            if s.get("state", "").upper() == state:
                return s
            if s.get("state", "").upper() in ("FAILED", "STOPPED") and state not in ("FAILED", "STOPPED"):
                break
            time.sleep(0.2)
        raise AssertionError(f"job {job} is {s}, not {state}; rank 0 says:\n{self.logs(job)[-3000:]}")

    def wait_log(self, job, text, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.logs(job):
                return
            time.sleep(0.2)
        raise AssertionError(f"job {job} never printed {text!r}:\n{self.logs(job)[-3000:]}")
