"""The project's real daemons and jobs on the network lab (deploy/netlab.py): each in its host's
namespace, bound to its host's address, so every byte between them crosses the emulated switches.

Used by deploy/netlab-bench.py (the experiments) and the lab's tests:

    with lab_cluster("fflab", toml, build_dir) as c:     # a lab and the cluster on it; gone after
        mgmtd = c.start_fs3(mgmtd_node="L0-n00", storage_nodes=["L1-n00", "L1-n01"])
        c.run("L0-n01", "fs3-load", "write", "--mgmtd", mgmtd, "--count", "4", "--mib", "16")
        storm = c.spawn("L0-n01", "fs3-load", "read", "--mgmtd", mgmtd, "--seconds", "0")
        c.start_platform("L0-n00", ["L0-n01", "L1-n00"], toml)          # hai-server + hai-agents
        job = c.hai_json("submit", "--nodes", "2", "--", "/path/to/hfreduce-loop --seconds 10")
        result = c.allreduce(["L0-n02", "L1-n02"], bytes_="4M", steps=20)  # rank 0's JSON

Nothing here routes out of the machine: the hosts only have lab addresses.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile

from ffdeploy import netlab
from ffdeploy.daemons import fs3_mgmtd, fs3_storage, hai_agent, hai_server, stop_all


class LabCluster:
    def __init__(self, lab, build_dir, work_dir):
        self.lab = lab
        self.build = build_dir
        self.work = work_dir
        os.makedirs(work_dir, exist_ok=True)
        self.hosts = {h["node"]: h for h in lab.load()["hosts"]}
        self.procs = []  # (name, Popen), stopped in reverse order
        self.daemons = []  # ffdeploy.daemons (deploy/ffdeploy/daemons.py)'s, stopped after the processes
        self.next_port = 29500

    # ---- processes in a host ------------------------------------------------------------------
    def address(self, node):
        return self.hosts[node]["address"]

    def binary(self, name):
        for sub in ("fs3", "hfreduce", "platform", ""):
            path = os.path.join(self.build, sub, name)
            if os.access(path, os.X_OK):
                return path
        raise RuntimeError(f"{name} is not built under {self.build}")

    def _argv(self, node, program, args):
        if node not in self.hosts:
            raise RuntimeError(f"no host {node} in the lab")
        exe = program if program.startswith("/") or program in ("tcpdump",) else self.binary(program)
        return ["ip", "netns", "exec", self.hosts[node]["netns"], exe, *args]

    def spawn(self, node, program, *args, env=None, name=None, stdout=None):
        """Starts PROGRAM in NODE's namespace; its log is WORK/NAME.log."""
        name = name or f"{program}-{node}-{len(self.procs)}"
        log = open(os.path.join(self.work, name + ".log"), "w")
        p = subprocess.Popen(self._argv(node, program, args), env={**os.environ, **(env or {})},
                             stdout=stdout if stdout is not None else log, stderr=log,
                             start_new_session=True)
        p.log_path = log.name
        self.procs.append((name, p))
        return p

    def run(self, node, program, *args, env=None, timeout=300):
        """Runs PROGRAM in NODE's namespace to completion; returns its stdout (error: its stderr)."""
        r = subprocess.run(self._argv(node, program, args), env={**os.environ, **(env or {})},
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} on {node} failed ({r.returncode}): "
                               f"{r.stderr.strip()[-2000:]}")
        return r.stdout

    def start(self, node, daemon, timeout=30):
        """Starts a daemon of ffdeploy.daemons inside NODE's namespace; returns it once ready."""
        if node not in self.hosts:
            raise RuntimeError(f"no host {node} in the lab")
        self.daemons.append(daemon.inside(["ip", "netns", "exec", self.hosts[node]["netns"]]))
        return daemon.start(timeout)

    def stop(self, procs=None):
        for _name, p in reversed(procs or self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for _name, p in reversed(procs or self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if procs is None:
            self.procs = []
            stop_all(list(reversed(self.daemons)))
            self.daemons = []

    # ---- fs3 ----------------------------------------------------------------------------------
    def start_fs3(self, mgmtd_node, storage_nodes, replication=1, chunk_size="1MiB", traffic=None,
                  lease_ms=None):
        """fs3-mgmtd on MGMTD_NODE and one fs3-storage (one target) on each storage node, all bound
        to their host's address; builds the chains. Returns fs3-mgmtd's address. `traffic`: extra
        --set overrides of the [traffic] section, e.g. {"storage_dscp": 0}; `lease_ms`: fs3-mgmtd's
        lease (how long an unheard storage service stays up)."""
        fs3_bin = os.path.join(self.build, "fs3")
        d = os.path.join(self.work, "fs3")
        mgmtd_keys = {"lease_ms": lease_ms} if lease_ms else {}
        m = fs3_mgmtd(fs3_bin, d, listen=f"{self.address(mgmtd_node)}:0", metrics=False,
                      **mgmtd_keys)
        if traffic:
            m.config["traffic"] = dict(traffic)
        mgmtd = self.start(mgmtd_node, m).rpc
        for i, node in enumerate(storage_nodes):
            target = (i + 1) * 10 + 1
            s = fs3_storage(fs3_bin, d, node, mgmtd, [(target, os.path.join(d, f"{node}-t{target}"))],
                            name=f"storage-{node}", listen=f"{self.address(node)}:0", metrics=False)
            if traffic:
                s.config["traffic"] = dict(traffic)
            self.start(node, s)
        self.run(mgmtd_node, "fs3", "--mgmtd", mgmtd, "init", "--chunk-size", chunk_size,
                 "--replication", str(replication))
        self.mgmtd = (mgmtd_node, mgmtd)
        return mgmtd

    def fs3_json(self, what):
        """`fs3 nodes|targets|chains --json`, asked from fs3-mgmtd's host."""
        node, mgmtd = self.mgmtd
        return json.loads(self.run(node, "fs3", "--mgmtd", mgmtd, what, "--json"))

    # ---- HAI-Platform -------------------------------------------------------------------------
    def start_platform(self, server_node, agent_nodes, cluster_toml, heartbeat_timeout_ms=3000,
                       gpus=1, policy="congestion-aware"):
        """hai-server on SERVER_NODE (its cluster: CLUSTER_TOML, the lab's own topology) and one
        hai-agent on each of AGENT_NODES, each bound to its host's address: the server hands a
        job's ranks their node's address (MASTER_ADDR, HFREDUCE_LISTEN_HOST), so a job's traffic
        crosses the lab. Adds the user "researcher"; `hai(...)` runs the CLI as that user."""
        d = os.path.join(self.work, "platform")
        bin_dir = os.path.join(self.build, "platform")
        server = self.start(server_node, hai_server(
            bin_dir, d, os.path.abspath(cluster_toml), f"{self.address(server_node)}:0",
            checkpoint_root=os.path.join(d, "checkpoints"), policy=policy,
            heartbeat_timeout_ms=heartbeat_timeout_ms,
            heartbeat_interval_ms=max(50, heartbeat_timeout_ms // 10),
            schedule_interval_ms=250)).rpc
        for node in agent_nodes:
            self.start(node, hai_agent(bin_dir, d, node, server, f"{self.address(node)}:0",
                                       name=f"agent-{node}", gpus=gpus))
        with open(os.path.join(d, "server", "admin.token")) as f:
            admin = f.read().strip()
        self.platform = {"node": server_node, "server": server, "token": admin}
        self.platform["token"] = json.loads(self.hai("admin", "user", "add", "researcher",
                                                     "--json"))["token"]
        return server

    def agent_dir(self, node):
        return os.path.join(self.work, "platform", f"agent-{node}-state")

    def hai(self, *args, timeout=60):
        """The hai CLI, from the server's host (the lab has no route to the machine's own
        namespace); returns its stdout."""
        p = self.platform
        return self.run(p["node"], "hai", *args, timeout=timeout,
                        env={"HAI_SERVER": p["server"], "HAI_TOKEN": p["token"], "HOME": self.work})

    def hai_json(self, *args):
        return json.loads(self.hai("--json", *args))  # before the subcommand: after "--" is a command

    # ---- HFReduce -----------------------------------------------------------------------------
    def allreduce_job(self, nodes, bytes_="4M", steps=20, warmup=2, compute_ms=0, seconds=0,
                      env=None, name="job"):
        """Starts one hfreduce-loop rank per node (rank 0 on nodes[0], which serves the store);
        returns the rank processes (rank 0's stdout is a pipe: its JSON line). Each rank is told
        its node's leaf as the platform tells it (HAI_LEAF), so the trees follow the leaves unless
        `env` says otherwise (HFREDUCE_TREES=rank)."""
        port = self.next_port
        self.next_port += 1
        procs = []
        for r, node in enumerate(nodes):
            e = {"RANK": str(r), "WORLD_SIZE": str(len(nodes)), "MASTER_ADDR": self.address(nodes[0]),
                 "MASTER_PORT": str(port), "HFREDUCE_LISTEN_HOST": self.address(node),
                 "HFREDUCE_NODE_ID": node, "HFREDUCE_TRANSPORT": "tcp",
                 "HFREDUCE_TIMEOUT_MS": "60000",
                 "HAI_LEAF": f"{self.hosts[node]['zone']}/{self.hosts[node]['leaf']}",
                 **(env or {})}
            args = ["--bytes", bytes_, "--steps", str(steps), "--warmup", str(warmup),
                    "--compute-ms", str(compute_ms), "--seconds", str(seconds)]
            procs.append(self.spawn(node, "hfreduce-loop", *args, env=e, name=f"{name}-r{r}",
                                    stdout=subprocess.PIPE if r == 0 else None))
        return procs

    def wait_job(self, procs, timeout=600):
        """Waits for a job's ranks; returns rank 0's JSON (an error names the rank that failed)."""
        out = procs[0].communicate(timeout=timeout)[0]
        for r, p in enumerate(procs):
            p.wait(timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"rank {r} failed ({p.returncode}): {tail(p.log_path)}")
        return json.loads(out.decode().strip().splitlines()[-1])

    def allreduce(self, nodes, **kw):
        return self.wait_job(self.allreduce_job(nodes, **kw))


@contextlib.contextmanager
def lab_cluster(name, topology, build_dir, scale=0.001, queue_kb=256, classes=False,
                work_root=None):
    """A lab NAME of TOPOLOGY (a cluster.toml path) with a LabCluster on it, its work files in a
    fresh folder under WORK_ROOT (default: the system's temp). On leaving, also by an exception
    or sys.exit, every process it started is stopped, the lab torn down and the folder removed."""
    lab = netlab.Lab(name)
    work = tempfile.mkdtemp(prefix=f"{name}-", dir=work_root)
    cluster = None
    try:
        lab.up(netlab.load_topology(topology, scale,
                                    os.path.join(build_dir, "scheduler", "hai-sim")),
               queue_kb, classes)
        cluster = LabCluster(lab, build_dir, work)
        yield cluster
    finally:
        if cluster:
            cluster.stop()
        lab.down()
        shutil.rmtree(work, ignore_errors=True)


def tail(path, n=1500):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:].strip()
    except OSError:
        return "(no log)"


def read_pcap(path):
    """Yields (tos, src, sport, dst, dport, length) of the IPv4 TCP packets of a pcap file
    (Ethernet or Linux cooked captures, as tcpdump -w writes them)."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    link_len = {1: 14, 113: 16, 276: 20}.get(linktype)
    if link_len is None:
        raise RuntimeError(f"{path}: link type {linktype} not understood")
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8:off + 12])[0]
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        ethertype = struct.unpack(">H", pkt[link_len - 2:link_len])[0] if len(pkt) >= link_len else 0
        if linktype == 276:
            ethertype = struct.unpack(">H", pkt[0:2])[0] if len(pkt) >= 2 else 0
        ip = pkt[link_len:]
        if ethertype != 0x0800 or len(ip) < 24 or ip[9] != 6:
            continue
        ihl = (ip[0] & 0x0F) * 4
        src = ".".join(str(b) for b in ip[12:16])
        dst = ".".join(str(b) for b in ip[16:20])
        sport, dport = struct.unpack(">HH", ip[ihl:ihl + 4])
        yield ip[1] >> 2, src, sport, dst, dport, struct.unpack(">H", ip[2:4])[0]  # on the wire
