"""A one-machine fs3: fs3-mgmtd, N fs3-storage services (one target each), fs3-meta and an fs3-fuse
mount, with their state under one folder; the daemons are started by ffdeploy.daemons (deploy/ffdeploy/daemons.py).

    deploy/fs3-local.sh start [DIR]   # default DIR: /tmp/fs3-local; needs build/; mounts DIR/mnt
    deploy/fs3-local.sh stop [DIR]    # unmounts, stops everything and removes DIR
    deploy/fs3-local.sh down [DIR]    # unmounts and stops everything, keeps DIR (logs, data)
    deploy/fs3-local.sh status [DIR]  # each service: running or DEAD, and its addresses
    deploy/fs3-local.sh kill NAME [DIR]     # kill -9 one service: mgmtd, meta, storageN or fuse
    deploy/fs3-local.sh restart NAME [DIR]  # stop it (if it runs) and start it again from its
                                            # config, at the same addresses, under a live mount

Environment: FS3_REPLICATION (default 1), FS3_STORAGE_SERVICES (default: the replication),
FS3_CHUNK_SIZE (default 4194304), FS3_DATA (default DIR/data: where chunks and RocksDB live),
FS3_MOUNT (default DIR/mnt), FF_BUILD_DIR (default build). FS3_HA=1: no single point of failure:
two fs3-mgmtd replicas ("mgmtd", "mgmtd2") and two fs3-meta servers ("meta", "meta2") keep their
state in etcd: the cluster at FS3_ETCD ("host:port,...") or, without it, three etcd members
started here ("etcd1".."etcd3"); every client is given both addresses of each. On the network lab (NETLAB=NAME,
deploy/netlab.py): fs3-mgmtd, fs3-meta and fs3-fuse run in FS3_HEAD_NODE's host and the storage
services in FS3_STORAGE_NODES' hosts (a space-separated list, used in turn), each bound to its
host's address; the mount is this machine's as always.
"""

import json
import os
import shutil
import subprocess
import sys
import time

from ffdeploy import source_root
from ffdeploy.daemons import (
    Daemon,
    etcd_members,
    fs3_fuse,
    fs3_meta,
    fs3_mgmtd,
    fs3_storage,
    netlab_address,
    netlab_prefix,
    start_etcd,
    stop_all,
)

ROOT = source_root()


def say(message):
    print(f"fs3-local: {message}", file=sys.stderr)


class Fail(Exception):
    """What a deploy CLI (this one, local_cluster.py) reports in one line and exits with `code`."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def unmount(path):
    """Unmounts a FUSE mount at `path` if there is one (a killed fs3-fuse leaves one that answers
    ENOTCONN until unmounted)."""
    with open("/proc/mounts") as f:
        mounted = any(line.split()[1] == path for line in f if len(line.split()) > 1)
    if mounted:
        if subprocess.run(["fusermount3", "-u", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)


def place(lab, node):
    """(prefix, address) of where a service on `node` runs: the lab's host, or here."""
    if not lab:
        return [], "127.0.0.1"
    return netlab_prefix(lab, node), netlab_address(lab, node)


def start(d, env):
    bin_dir = os.path.join(os.path.abspath(env.get("FF_BUILD_DIR", "build")), "fs3")
    for b in ("fs3-mgmtd", "fs3-storage", "fs3-meta", "fs3-fuse", "fs3"):
        if not os.access(os.path.join(bin_dir, b), os.X_OK):
            raise Fail(f"{bin_dir}/{b} is missing: build first")
    if "mgmtd" in Daemon.saved(d) and Daemon.load(d, "mgmtd").running():
        raise Fail(f"already running in {d} (stop it first)")
    replication = int(env.get("FS3_REPLICATION", "1"))
    services = int(env.get("FS3_STORAGE_SERVICES", str(replication)))
    chunk = int(env.get("FS3_CHUNK_SIZE", "4194304"))
    data = env.get("FS3_DATA", os.path.join(d, "data"))
    mnt = os.path.abspath(env.get("FS3_MOUNT", os.path.join(d, "mnt")))
    lab = env.get("NETLAB", "")
    storage_nodes = ["local"]
    if lab:
        storage_nodes = env.get("FS3_STORAGE_NODES", "").split()
        if not env.get("FS3_HEAD_NODE") or not storage_nodes:
            raise Fail("on the network lab, FS3_HEAD_NODE and FS3_STORAGE_NODES name its hosts", 64)
    head_at, head = place(lab, env.get("FS3_HEAD_NODE", "local"))
    for p in (d, data, mnt):
        os.makedirs(p, exist_ok=True)
    started = []

    def run(daemon, prefix, addr):
        daemon.config["metrics"] = {"listen": f"{addr}:0"}  # beside the service, on its host
        started.append(daemon.inside(prefix))
        return daemon.start()

    ha = env.get("FS3_HA", "0") == "1"
    try:
        if ha:
            etcd = env.get("FS3_ETCD", "")
            if not etcd:
                members = etcd_members(d, 3, host=head)
                started.extend(members)
                etcd = start_etcd(members)
            engine = {"engine": "etcd", "etcd_endpoints": etcd.split(",")}
            mgmtds = [run(fs3_mgmtd(bin_dir, d, name=name, listen=f"{head}:0", data_dir=None,
                                    lease_ms=3000, restart_grace_ms=5000, election_ttl_s=2,
                                    **engine), head_at, head).rpc
                      for name in ("mgmtd", "mgmtd2")]
            mgmtd = ",".join(mgmtds)
        else:
            mgmtd = run(fs3_mgmtd(bin_dir, d, listen=f"{head}:0",
                                  data_dir=os.path.join(data, "mgmtd"), lease_ms=3000,
                                  restart_grace_ms=5000), head_at, head).rpc
        for i in range(1, services + 1):
            at, addr = place(lab, storage_nodes[(i - 1) % len(storage_nodes)])
            run(fs3_storage(bin_dir, d, f"storage-{i}", mgmtd,
                            [(100 + i, os.path.join(data, f"storage{i}"))], name=f"storage{i}",
                            listen=f"{addr}:0"), at, addr)
        fs3 = [*head_at, os.path.join(bin_dir, "fs3"), "--mgmtd", mgmtd]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out = subprocess.run([*fs3, "nodes", "--json"], capture_output=True, text=True).stdout
            if out.count('"up"') >= services:
                break
            time.sleep(0.1)
        r = subprocess.run([*fs3, "init", "--chunk-size", str(chunk), "--replication",
                            str(replication)], capture_output=True, text=True)
        if r.returncode != 0:
            raise Fail(f"fs3 init failed: {r.stderr.strip()}")
        if ha:
            meta = ",".join(run(fs3_meta(bin_dir, d, mgmtd, chunk, name=name, listen=f"{head}:0",
                                         data_dir=None, **engine), head_at, head).rpc
                            for name in ("meta", "meta2"))
        else:
            meta = run(fs3_meta(bin_dir, d, mgmtd, chunk, listen=f"{head}:0",
                                data_dir=os.path.join(data, "meta")), head_at, head).rpc
        with open(os.path.join(d, "mnt.path"), "w") as f:
            f.write(mnt + "\n")
        run(fs3_fuse(bin_dir, d, mnt, meta, mgmtd), head_at, head)
    except BaseException:
        unmount(mnt)
        stop_all(started)
        raise
    with open(os.path.join(d, "env"), "w") as f:
        f.write(f"export FS3_MGMTD={mgmtd}\nexport FS3_META={meta}\nexport FS3_MOUNT={mnt}\n")
    say(f"fs3 mounted at {mnt} (mgmtd {mgmtd}, meta {meta}, replication {replication}"
        f"{', highly available on etcd' if ha else ''}); source {d}/env")


def mount_path(d):
    try:
        with open(os.path.join(d, "mnt.path")) as f:
            return f.read().strip()
    except OSError:
        return ""


def stop(d, keep):
    if not os.path.isdir(d):
        say(f"nothing runs in {d}")
        return
    if mount_path(d):
        unmount(mount_path(d))
    daemons = [Daemon.load(d, n) for n in Daemon.saved(d)]
    stop_all(daemons, timeout=5)
    for daemon in daemons:
        for suffix in ("pid", "ready"):
            try:
                os.remove(daemon.path(suffix))
            except OSError:
                pass
    if keep:
        say(f"stopped; state kept in {d}")
    else:
        shutil.rmtree(d, ignore_errors=True)
        say(f"stopped; removed {d}")


def status(d):
    if not os.path.isdir(d):
        raise Fail(f"nothing in {d}")
    bad = 0
    print(f"{'SERVICE':<10} {'STATE':<8} ENDPOINTS")
    for name in Daemon.saved(d):
        daemon = Daemon.load(d, name)
        state = "running" if daemon.running() else "DEAD"
        bad |= state == "DEAD"
        ready = json.dumps(daemon.ready, separators=(",", ":")) if daemon.ready and state == "running" else ""
        print(f"{name:<10} {state:<8} {ready}")
    return bad


def service(d, name):
    if not name:
        raise Fail("which service? (mgmtd, meta, storageN, fuse; with FS3_HA mgmtd2, meta2, etcdN)",
                   64)
    names = Daemon.saved(d)
    if name not in names:
        raise Fail(f"no service '{name}' in {d}; there are: {' '.join(names)}")
    return Daemon.load(d, name)


def kill(d, name):
    daemon = service(d, name)
    if daemon.running():
        daemon.kill()
        say(f"killed {name} (pid {daemon.pid})")
    else:
        say(f"{name} was not running")
    try:
        os.remove(daemon.path("ready"))
    except OSError:
        pass


def restart(d, name):
    daemon = service(d, name)
    if name == "fuse":
        unmount(mount_path(d))
    daemon.stop()
    if name == "fuse":
        unmount(mount_path(d))
    daemon.start()
    say(f"restarted {name} (pid {daemon.pid}): {json.dumps(daemon.ready, separators=(',', ':'))}")


def main(argv=None):
    argv = sys.argv if argv is None else argv
    cmd = argv[1] if len(argv) > 1 else ""
    try:
        if cmd in ("start", "stop", "down", "status"):
            d = os.path.abspath(argv[2] if len(argv) > 2 else "/tmp/fs3-local")
            if cmd == "start":
                start(d, os.environ)
            elif cmd in ("stop", "down"):
                stop(d, keep=cmd == "down")
            else:
                return status(d)
            return 0
        if cmd in ("kill", "restart"):
            name = argv[2] if len(argv) > 2 else ""
            d = os.path.abspath(argv[3] if len(argv) > 3 else "/tmp/fs3-local")
            (kill if cmd == "kill" else restart)(d, name)
            return 0
    except (Fail, RuntimeError) as e:
        say(str(e))
        return getattr(e, "code", 1)
    print("usage: deploy/fs3-local.sh start|stop|down|status [DIR]; kill|restart NAME [DIR]",
          file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
