#!/usr/bin/python3
"""Traffic classes on the wire: the real daemons and an HFReduce job on the network lab, with
every packet crossing the lab's switches captured (tcpdump in the switch namespace), and the DSCP
of each of the project's connections checked by its ports:

  fs3 chunk data (fs3-storage's port, both directions, and chain forwarding)   storage, 18
  fs3-mgmtd's replies and fs3-storage's calls to it, other_dscp = 8 in their
  configs' [traffic]; fs3-load's calls (no config: the defaults)               8 (override); 0
  HFReduce's tree connections between the job's two hosts                     hfreduce, 34
  the rendezvous store (MASTER_PORT)                                           other, 0
  a second job with HFREDUCE_DSCP=40                                           40

Root only (namespaces). Usage: tests/deploy/netlab_marks_test.py BUILD_DIR
"""

import collections
import os
import signal
import subprocess
import time

from labtest import fail, lab

from ffdeploy import netlab_cluster

TOPOLOGY = """
name = "marks"
node_link_gbps = 400
cross_zone_gbps = 400
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "L0"
  nodes = 2
  uplink_gbps = 200
  [[zones.leaves]]
  name = "L1"
  nodes = 2
  uplink_gbps = 200
"""


class Capture:
    """tcpdump on every interface of the switch namespace: all traffic between lab hosts."""

    def __init__(self, lab, path):
        self.path = path
        self.p = subprocess.Popen(["ip", "netns", "exec", lab.sw, "tcpdump", "-i", "any", "-nn",
                                   "-s", "96", "-U", "-w", path, "tcp"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not (os.path.exists(path) and os.path.getsize(path) >= 24):
            if self.p.poll() is not None:
                fail(f"tcpdump exited: {self.p.stderr.read().decode()}")
            if time.monotonic() > deadline:
                fail("tcpdump did not start")
            time.sleep(0.05)

    def stop(self):
        time.sleep(0.3)
        self.p.send_signal(signal.SIGINT)
        self.p.wait(timeout=10)
        return list(netlab_cluster.read_pcap(self.path))


def dscps(packets, match):
    """DSCP -> bytes of the packets for which match(src, sport, dst, dport) holds."""
    out = collections.Counter()
    for tos, src, sport, dst, dport, length in packets:
        if match(src, sport, dst, dport):
            out[tos] += length
    return out


def expect(packets, what, match, want, min_bytes):
    seen = dscps(packets, match)
    total = sum(seen.values())
    print(f"{what}: {dict(seen)} (DSCP: bytes)")
    if total < min_bytes:
        fail(f"{what}: only {total} bytes captured (expected at least {min_bytes})")
    if set(seen) != {want}:
        fail(f"{what}: marked {sorted(seen)}, expected only DSCP {want}")


def main():
    with lab("nlm", TOPOLOGY, queue_kb=256, needs=("tcpdump",)) as (cluster, build, tmp, toml):
        a, b = "L0-n00", "L1-n00"
        client, peer = "L0-n01", "L1-n01"
        addr = cluster.address

        cap = Capture(cluster.lab, os.path.join(tmp, "fs3.pcap"))
        mgmtd = cluster.start_fs3(mgmtd_node=a, storage_nodes=[b, peer], replication=2,
                                  traffic={"other_dscp": 8})
        mgmtd_port = int(mgmtd.rsplit(":", 1)[1])
        cluster.run(client, "fs3-load", "write", "--mgmtd", mgmtd, "--count", "2", "--mib", "2")
        cluster.run(client, "fs3-load", "read", "--mgmtd", mgmtd, "--count", "2", "--mib", "2",
                    "--seconds", "1", "--batch", "4")
        job = cluster.allreduce([a, b], bytes_="1M", steps=5, warmup=1)
        packets = cap.stop()
        routing = cluster.run(a, "fs3", "--mgmtd", mgmtd, "--json", "nodes")
        storage_ports = {}
        for node in (b, peer):
            key = f'"{addr(node)}:'
            i = routing.find(key)
            if i < 0:
                fail(f"fs3 nodes does not list {node}'s address {addr(node)}: {routing}")
            storage_ports[addr(node)] = int(routing[i + len(key):].split('"')[0])
        print(f"job: {job['median_allreduce_ms']} ms per 1 MiB allreduce; storage at {storage_ports}")

        def storage(src, sport, dst, dport):
            return storage_ports.get(src) == sport or storage_ports.get(dst) == dport

        store_port = 29500

        def tree(src, sport, dst, dport):
            pair = {src, dst} == {addr(a), addr(b)}
            known = {store_port, mgmtd_port, *storage_ports.values()}
            return pair and sport not in known and dport not in known

        def store(src, sport, dst, dport):
            return store_port in (sport, dport)

        expect(packets, "fs3 chunk data", storage, 18, 2 << 20)
        expect(packets, "fs3-mgmtd's replies (other_dscp = 8 in its [traffic])",
               lambda s, sp, d, dp: s == addr(a) and sp == mgmtd_port, 8, 1000)
        expect(packets, "fs3-storage's calls to fs3-mgmtd (other_dscp = 8 in its [traffic])",
               lambda s, sp, d, dp: s in storage_ports and dp == mgmtd_port, 8, 1000)
        expect(packets, "fs3-load's calls to fs3-mgmtd (its defaults: other = 0)",
               lambda s, sp, d, dp: s == addr(client) and dp == mgmtd_port, 0, 200)
        expect(packets, "HFReduce trees", tree, 34, 2 << 20)
        expect(packets, "rendezvous store", store, 0, 500)

        cap = Capture(cluster.lab, os.path.join(tmp, "job2.pcap"))
        cluster.allreduce([a, b], bytes_="1M", steps=3, warmup=1, env={"HFREDUCE_DSCP": "40"})
        packets = cap.stop()
        store_port = 29501
        expect(packets, "HFReduce trees with HFREDUCE_DSCP=40", tree, 40, 1 << 20)
        print("PASS")


if __name__ == "__main__":
    main()
