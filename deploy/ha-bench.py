#!/usr/bin/env python3
"""How long the control plane is gone when one of its leaders dies, and what the etcd engine
costs fs3's metadata, in one run on this machine.

    deploy/ha-bench.py [--kills 5] [--dir /var/tmp] [--no-meta-bench] [--files 2000]

Starts the highly available control plane as `local-cluster.sh up --ha` does (three etcd members;
fs3 with two fs3-mgmtd replicas, two fs3-meta servers, three storage services and a FUSE mount;
two hai-servers), then, --kills times each:
  fs3-mgmtd: kill -9 of the leader; until `fs3 nodes` (given both replicas) answers;
  fs3-meta:  kill -9 of one server (in turn); until a file is created through the mount;
  hai-server: kill -9 of the leader; until `hai whoami` (given both replicas) answers;
each measured from the kill to the first successful call of a client that keeps calling, then the
killed daemon is started again (as a follower) before the next kill. Then, unless
--no-meta-bench, fs3/bench/meta-bench.sh --engine both (passthrough_ll, fs3 on RocksDB, fs3 on
etcd in one run). Root (FUSE mounts); needs build/.

What bounds the figures: a dead leader is replaced when its etcd lease (election_ttl_s, 2 s here)
runs out, plus the follower's next campaign and the client's next retry; a dead fs3-meta server
costs a client only the failed call's retry on the other server. The etcd engine's metadata rate
is bounded by etcd's work per request (each a gRPC call, and each change a Raft entry that the
three members append, fsync and apply: with the members, the mounts and fs3-meta sharing this
machine's cores, CPU), about 9 requests per file created, stat'ed and removed through FUSE, and
by conflicts (operations in one directory change its inode and run again).
Last line: ha bench: failover mgmtd Xs, meta Ys, hai-server Zs (max of N kills); meta on etcd
create+stat+unlink 8 workers P% of rocksdb, Q% of passthrough_ll
"""

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from ffdeploy import fs3_local  # (deploy/, this script's folder, is on the path)
from ffdeploy.daemons import Daemon, etcd_members, hai_server, start_etcd, stop_all

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("FF_BUILD_DIR", "build"))
CLUSTER = """name = "ha-bench"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "A-leaf"
  nodes = 2
  gpus_per_node = 1
  cpus_per_node = 8
  memory_gib = 16
"""


def say(message):
    print(f"ha-bench: {message}", file=sys.stderr, flush=True)


def ok(argv, env=None, timeout=30):
    try:
        return subprocess.run(argv, capture_output=True, env=env, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def until_ok(call, timeout=60):
    """Calls `call` until it succeeds; the time that took (None: never within `timeout`)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if call():
            return time.monotonic() - start
        time.sleep(0.02)
    return None


class Bench:
    def __init__(self, directory, kills):
        self.dir = directory
        self.kills = kills

    def up(self):
        d = self.dir
        self.etcd = start_etcd(etcd_members(d, 3))
        env = dict(os.environ, FF_BUILD_DIR=BUILD, FS3_HA="1", FS3_ETCD=self.etcd,
                   FS3_REPLICATION="1", FS3_STORAGE_SERVICES="3",
                   FS3_MOUNT=os.path.join(d, "fs3-mnt"))
        fs3_local.start(os.path.join(d, "fs3"), env)
        self.fs3_dir = os.path.join(d, "fs3")
        with open(os.path.join(self.fs3_dir, "env")) as f:
            self.fs3_env = dict(line.removeprefix("export ").strip().split("=", 1) for line in f)
        cluster = os.path.join(d, "cluster.toml")
        with open(cluster, "w") as f:
            f.write(CLUSTER)
        pbin = os.path.join(BUILD, "platform")
        self.servers = []
        for i, name in enumerate(("hai-server", "hai-server2")):
            s = hai_server(pbin, d, cluster, "127.0.0.1:0", name=name,
                           data_dir=os.path.join(d, name), engine="etcd",
                           etcd_endpoints=self.etcd.split(","), election_ttl_s=2).start()
            self.servers.append(s)
            if i == 0:
                token = os.path.join(d, name, "admin.token")
                if until_ok(lambda: os.path.exists(token) and os.path.getsize(token) > 0, 30) is None:
                    raise RuntimeError("the first hai-server did not lead")
        with open(os.path.join(d, "hai-server", "admin.token")) as f:
            self.admin = f.read().strip()

    def down(self):
        fs3_local.stop(self.fs3_dir, keep=True)
        stop_all([Daemon.load(self.dir, n) for n in Daemon.saved(self.dir)], timeout=5)

    # ---- the clients ------------------------------------------------------------------------
    def fs3_nodes(self, mgmtd):
        return ok([os.path.join(BUILD, "fs3", "fs3"), "--mgmtd", mgmtd, "nodes", "--json"],
                  timeout=20)

    def hai_whoami(self, server):
        env = dict(os.environ, HAI_SERVER=server, HAI_TOKEN=self.admin, HOME=self.dir)
        return ok([os.path.join(BUILD, "platform", "hai"), "whoami"], env=env, timeout=20)

    # ---- the kills ---------------------------------------------------------------------------
    def failover(self, names, leads, client, directory):
        """Kills the leader among `names` (daemons in `directory`) `kills` times; the times from
        each kill to the first success of `client`."""
        times = []
        for k in range(self.kills):
            daemons = [Daemon.load(directory, n) for n in names]
            leader = next((d for d in daemons if leads(d)), None) if leads else daemons[k % len(daemons)]
            if leader is None:
                raise RuntimeError(f"no leader among {names}")
            killed_at = time.monotonic()
            leader.kill()
            took = until_ok(client, 60)
            if took is None:
                raise RuntimeError(f"no client call succeeded within 60 s of killing {leader.name}")
            times.append(time.monotonic() - killed_at)
            leader.start()
            time.sleep(1.0)  # the restarted replica settles as a follower
        return times

    def meta_failover(self):
        """fs3-meta servers killed in turn while a writer creates files through the mount: the
        longest wait for a create after each kill."""
        mnt = self.fs3_env["FS3_MOUNT"]
        os.makedirs(os.path.join(mnt, "ha-bench"), exist_ok=True)
        done = []  # completion times of the creates
        stop = threading.Event()
        failures = []

        def writer():
            i = 0
            while not stop.is_set():
                try:
                    fd = os.open(os.path.join(mnt, "ha-bench", f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
                    os.close(fd)
                    done.append(time.monotonic())
                except OSError as e:
                    failures.append(str(e))
                i += 1

        t = threading.Thread(target=writer)
        t.start()
        times = []
        try:
            names = ["meta", "meta2"]
            for k in range(self.kills):
                time.sleep(0.5)
                victim = Daemon.load(self.fs3_dir, names[k % 2])
                killed_at = time.monotonic()
                victim.kill()
                if until_ok(lambda: any(x > killed_at for x in done), 60) is None:
                    raise RuntimeError("no create succeeded within 60 s of killing " + victim.name)
                times.append(min(x for x in done if x > killed_at) - killed_at)
                victim.start()
        finally:
            stop.set()
            t.join()
        if failures:
            raise RuntimeError(f"{len(failures)} creates failed: {failures[0]}")
        return times

    def run(self):
        mgmtd = self.fs3_env["FS3_MGMTD"]
        servers = ",".join(s.rpc for s in self.servers)
        results = {}
        results["mgmtd"] = self.failover(
            ["mgmtd", "mgmtd2"], lambda d: self.fs3_nodes(d.rpc), lambda: self.fs3_nodes(mgmtd),
            self.fs3_dir)
        say(f"fs3-mgmtd: {results['mgmtd']}")
        results["meta"] = self.meta_failover()
        say(f"fs3-meta: {results['meta']}")
        results["hai-server"] = self.failover(
            ["hai-server", "hai-server2"], lambda d: self.hai_whoami(d.rpc),
            lambda: self.hai_whoami(servers), self.dir)
        say(f"hai-server: {results['hai-server']}")
        return results


def meta_bench(files, base):
    r = subprocess.run([os.path.join(ROOT, "fs3", "bench", "meta-bench.sh"), "--engine", "both",
                        "--files", str(files), "--dir", base], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("meta-bench.sh failed: " + (r.stderr.strip().splitlines() or ["?"])[-1])
    print(r.stdout, end="")
    vs = re.search(r"meta bench etcd vs rocksdb: 1 worker (\d+)%, (\d+) workers (\d+)%", r.stdout)
    pt = re.search(r"meta bench etcd: .*?, (\d+) workers on two mounts (\d+)%", r.stdout)
    if not vs or not pt:
        raise RuntimeError("meta-bench.sh printed no etcd lines")
    return int(vs.group(3)), int(pt.group(2)), int(vs.group(2))


def main(argv):
    kills, base, bench, files = 5, "/var/tmp", True, 2000
    rest = argv[1:]
    while rest:
        a = rest.pop(0)
        if a == "--kills" and rest:
            kills = int(rest.pop(0))
        elif a == "--dir" and rest:
            base = rest.pop(0)
        elif a == "--files" and rest:
            files = int(rest.pop(0))
        elif a == "--no-meta-bench":
            bench = False
        else:
            print(__doc__, file=sys.stderr)
            return 64
    if os.geteuid() != 0:
        say("needs root (FUSE mounts)")
        return 1
    if not shutil.which("etcd"):
        say("no etcd: deploy/install-deps.sh installs etcd-server")
        return 1
    d = tempfile.mkdtemp(prefix="ha-bench.", dir=base)
    b = Bench(d, kills)
    try:
        say(f"starting the control plane in {d}")
        b.up()
        results = b.run()
    finally:
        b.down()
        shutil.rmtree(d, ignore_errors=True)
    print(f"{'failover (kill -9 to first call)':<34} {'median':>8} {'max':>8} {'kills':>6}")
    for name, times in results.items():
        print(f"{name:<34} {statistics.median(times):>7.2f}s {max(times):>7.2f}s {len(times):>6}")
    line = (f"ha bench: failover mgmtd {max(results['mgmtd']):.1f}s, meta {max(results['meta']):.1f}s, "
            f"hai-server {max(results['hai-server']):.1f}s (max of {kills} kills)")
    if bench:
        of_rocksdb, of_pt, workers = meta_bench(files, base)
        line += (f"; meta on etcd create+stat+unlink {workers} workers {of_rocksdb}% of rocksdb, "
                 f"{of_pt}% of passthrough_ll")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
