#!/usr/bin/python3
"""An emulated fat-tree network on one machine, built from a cluster.toml topology (read as
hai-server reads it, by the scheduler through the build's hai-sim: $FF_BUILD_DIR, default build/).

Every node of the topology becomes a host: a network namespace with its own address in
198.18.0.0/15 (the range reserved for benchmarking) and no route out of the machine. The switches
live in one more namespace (<name>-sw): a bridge per leaf, a bridge per zone's spine and a core
bridge joining the zones. Links are veth pairs shaped with tc in both directions:

  host  - leaf    node_link_gbps
  leaf  - spine   uplink_gbps (the leaf's oversubscription: nodes x node_link / uplink)
  spine - core    cross_zone_gbps (the few links between the two zones)

all multiplied by --scale (this machine cannot move 200 Gb/s: the default 0.001 makes 200 Gb/s a
200 Mb/s link, keeping the topology's ratios). Each shaped link is an HTB tree whose leaves are
FIFO queues of --queue-kb (the switch buffer). With --classes, each link gives each traffic class
its own queue with a weight (Fire-Flyer's weighted virtual lanes): a guaranteed share of the rate
by weight, and spare rate to the heavier classes first; packets are classified by their DSCP (see
TRAFFIC_CLASSES). Without, one queue carries everything.

  deploy/netlab.py up CLUSTER_TOML [--name fflab] [--scale 0.001] [--queue-kb 256] [--classes]
  deploy/netlab.py down [--name fflab]          # removes everything it made (also after a crash)
  deploy/netlab.py status [--name fflab]        # hosts, addresses and each shaped link's counters
  deploy/netlab.py hosts [--name fflab]         # "node address" per line
  deploy/netlab.py exec NODE [--name fflab] -- CMD...   # runs CMD in NODE's namespace
  deploy/netlab.py cut WHAT [--name fflab]      # a cable cut: WHAT is a node (its host link),
                                                # a leaf (its uplinks) or a zone (its zone link)
  deploy/netlab.py heal WHAT [--name fflab]     # puts it back

`up` tears down whatever a previous lab of the same name left (a crash) before it builds, and
fails cleanly (tearing down what it made) on any error. Needs root, iproute2 and tc (htb, bfifo
and u32; netem is not needed: this kernel has none, so links carry no added delay).
"""

import argparse
import json
import os
import subprocess
import sys

from ffdeploy import default_hai_sim, read_cluster

# Traffic classes: DSCP code point -> (name, weight of the link it gets with --classes). The one
# documented mapping (deploy/NETLAB.md).
TRAFFIC_CLASSES = [
    # (name, dscp, weight)
    ("hfreduce", 34, 4),  # AF41: allreduce between nodes
    ("nccl", 26, 4),      # AF31: a GPU collective library's traffic
    ("storage", 18, 2),   # AF21: fs3 chunk transfers
    ("other", 0, 1),      # best effort: control RPCs and everything unmarked
]

ADDRESS_BASE = (198, 18)  # 198.18.0.0/15
STATE_DIR = "/run/netlab"


def run(*cmd, check=True, quiet=False):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def namespaces():
    r = run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def load_topology(path, scale, hai_sim=None):
    """The lab's shape from a cluster.toml, read as hai-server reads it (ffdeploy.read_cluster:
    the scheduler's reading, through hai-sim; `hai_sim` defaults to $FF_BUILD_DIR's), with link
    rates scaled by `scale` and an address per node."""
    t = read_cluster(path, hai_sim or default_hai_sim())
    node_gbps = float(t["node_link_gbps"])
    topo = {"zones": [], "node_mbit": node_gbps * 1000 * scale,
            "cross_mbit": float(t["cross_zone_gbps"]) * 1000 * scale}
    host = 0
    for z in t["zones"]:
        zone = {"name": z["name"], "leaves": []}
        for leaf in z["leaves"]:
            entry = {"name": leaf["name"], "uplink_mbit": float(leaf["uplink_gbps"]) * 1000 * scale,
                     "hosts": []}
            for node in leaf["nodes"]:
                a, b = ADDRESS_BASE
                entry["hosts"].append({"node": node["name"],
                                       "address": f"{a}.{b + host // 62500}.{host // 250 % 250}.{host % 250 + 2}"})
                host += 1
            zone["leaves"].append(entry)
        topo["zones"].append(zone)
    return topo


class Lab:
    def __init__(self, name):
        self.name = name
        self.sw = f"{name}-sw"
        self.state = os.path.join(STATE_DIR, name + ".json")

    def host_ns(self, node):
        return f"{self.name}-{node}"

    # ---- teardown ---------------------------------------------------------------------------
    def down(self):
        gone = 0
        for ns in namespaces():
            if ns == self.sw or ns.startswith(self.name + "-"):
                run("ip", "netns", "del", ns, check=False)
                gone += 1
        if os.path.exists(self.state):
            os.remove(self.state)
        return gone

    # ---- build ------------------------------------------------------------------------------
    def up(self, topo, queue_kb, classes):
        if self.down():
            print(f"netlab: removed what an earlier {self.name} left", file=sys.stderr)
        try:
            self._build(topo, queue_kb, classes)
        except Exception:
            self.down()
            raise

    def _veth(self, a_ns, a_if, b_ns, b_if):
        run("ip", "-n", a_ns, "link", "add", a_if, "type", "veth", "peer", "name", b_if,
            "netns", b_ns)

    def _shape(self, ns, dev, mbit, queue_kb, classes):
        """HTB at `mbit` on dev's egress; a FIFO of queue_kb per class (or one for all)."""
        rate = f"{max(mbit, 0.1):.3f}mbit"
        run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "40",
            "r2q", "1000")
        # Bursts of 64 KiB: with the few-KiB default, the kernel's timer granularity keeps a class
        # from borrowing the spare rate it is entitled to.
        burst = ["burst", "64k", "cburst", "64k"]
        run("tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
            "rate", rate, "ceil", rate, *burst)
        limit = str(queue_kb * 1024)
        if not classes:
            run("tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:1", "classid", "1:40", "htb",
                "rate", rate, "ceil", rate, *burst)
            run("tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:40", "bfifo", "limit", limit)
            return
        total = sum(w for _, _, w in TRAFFIC_CLASSES)
        for i, (_cname, dscp, weight) in enumerate(TRAFFIC_CLASSES):
            classid = f"1:{10 * (i + 1)}"
            share = f"{max(mbit * weight / total, 0.05):.3f}mbit"
            # Each class is guaranteed its weight's share; spare rate goes to the heavier classes
            # first (HTB's prio; among equal weights by quantum). Sharing spare rate by quantum
            # alone gave 2:1 instead of 4:1 between TCP flows, whose queues do not stay backlogged.
            prio = sorted({w for _, _, w in TRAFFIC_CLASSES}, reverse=True).index(weight)
            run("tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:1", "classid", classid,
                "htb", "rate", share, "ceil", rate, "prio", str(prio), "quantum",
                str(3000 * weight), *burst)
            run("tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", classid, "bfifo", "limit", limit)
            if dscp:
                run("tc", "-n", ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip",
                    "prio", str(i + 1), "u32", "match", "ip", "dsfield", hex(dscp << 2), "0xfc",
                    "flowid", classid)

    def _link(self, a_ns, a_if, b_ns, b_if, mbit, queue_kb, classes):
        self._veth(a_ns, a_if, b_ns, b_if)
        for ns, dev in ((a_ns, a_if), (b_ns, b_if)):
            self._shape(ns, dev, mbit, queue_kb, classes)

    def _bridge(self, br):
        run("ip", "-n", self.sw, "link", "add", br, "type", "bridge")
        run("ip", "-n", self.sw, "link", "set", br, "up")

    def _attach(self, dev, br):
        run("ip", "-n", self.sw, "link", "set", dev, "master", br)
        run("ip", "-n", self.sw, "link", "set", dev, "up")

    def _build(self, topo, queue_kb, classes):
        run("ip", "netns", "add", self.sw)
        run("ip", "-n", self.sw, "link", "set", "lo", "up")
        self._bridge("core")
        hosts, links = [], []
        for zi, zone in enumerate(topo["zones"]):
            spine = f"s{zi}"
            self._bridge(spine)
            # spine - core: the zone's link to the other zones
            self._link(self.sw, f"z{zi}a", self.sw, f"z{zi}b", topo["cross_mbit"], queue_kb, classes)
            self._attach(f"z{zi}a", spine)
            self._attach(f"z{zi}b", "core")
            links.append({"link": f"zone {zone['name']} - core", "dev": f"z{zi}a",
                          "ends": [f"z{zi}a", f"z{zi}b"], "cut": zone["name"],
                          "mbit": topo["cross_mbit"]})
            for li, leaf in enumerate(zone["leaves"]):
                lbr = f"l{zi}.{li}"
                self._bridge(lbr)
                up_a, up_b = f"u{zi}.{li}a", f"u{zi}.{li}b"
                self._link(self.sw, up_a, self.sw, up_b, leaf["uplink_mbit"], queue_kb, classes)
                self._attach(up_a, lbr)
                self._attach(up_b, spine)
                links.append({"link": f"leaf {leaf['name']} - spine", "dev": up_a,
                              "ends": [up_a, up_b], "cut": leaf["name"],
                              "mbit": leaf["uplink_mbit"]})
                for hi, h in enumerate(leaf["hosts"]):
                    ns = self.host_ns(h["node"])
                    run("ip", "netns", "add", ns)
                    run("ip", "-n", ns, "link", "set", "lo", "up")
                    port = f"h{zi}.{li}.{hi}"
                    self._link(ns, "eth0", self.sw, port, topo["node_mbit"], queue_kb, classes)
                    self._attach(port, lbr)
                    run("ip", "-n", ns, "addr", "add", h["address"] + "/15", "dev", "eth0")
                    run("ip", "-n", ns, "link", "set", "eth0", "up")
                    hosts.append({"node": h["node"], "address": h["address"], "netns": ns,
                                  "leaf": leaf["name"], "zone": zone["name"], "port": port,
                                  "mbit": topo["node_mbit"]})
        os.makedirs(STATE_DIR, exist_ok=True)
        with open(self.state, "w") as f:
            json.dump({"hosts": hosts, "links": links, "classes": classes, "queue_kb": queue_kb}, f,
                      indent=1)

    # ---- faults -------------------------------------------------------------------------------
    def _ends(self, what):
        """The switch-side devices of WHAT's link: a node's port, a leaf's uplink, a zone's link."""
        state = self.load()
        for h in state["hosts"]:
            if h["node"] == what:
                return [h["port"]]
        for link in state["links"]:
            if link.get("cut") == what:
                return link["ends"]
        raise RuntimeError(f"nothing called {what} in lab {self.name} (a node, a leaf or a zone)")

    def cut(self, what):
        """Cuts WHAT's link as a cable cut would: both ends lose carrier, packets in flight and
        queued are lost, nothing answers (no reset, no ICMP)."""
        for dev in self._ends(what):
            run("ip", "-n", self.sw, "link", "set", dev, "down")

    def heal(self, what):
        for dev in self._ends(what):
            run("ip", "-n", self.sw, "link", "set", dev, "up")

    def _shaped_ends(self, what):
        """[(namespace, device)] at both ends of WHAT's link, and the rate it was built with."""
        state = self.load()
        for h in state["hosts"]:
            if h["node"] == what:
                return [(h["netns"], "eth0"), (self.sw, h["port"])], h.get("mbit")
        for link in state["links"]:
            if link.get("cut") == what:
                return [(self.sw, dev) for dev in link["ends"]], link["mbit"]
        raise RuntimeError(f"nothing called {what} in lab {self.name} (a node, a leaf or a zone)")

    def slow(self, what, mbit):
        """Shapes WHAT's link (both directions) to `mbit` (a degraded cable, a port renegotiated
        down); packets queued at the moment are dropped. `mbit` None: back to its built rate."""
        state = self.load()
        ends, built = self._shaped_ends(what)
        if mbit is None:
            if built is None:
                raise RuntimeError(f"{what}'s built rate is unknown (a lab made before 'slow')")
            mbit = built
        if mbit <= 0:
            raise ValueError("the rate must be positive")
        for ns, dev in ends:
            run("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
            self._shape(ns, dev, mbit, state["queue_kb"], state["classes"])

    def uplink_bytes(self, classid=None):
        """Bytes sent so far over every leaf's uplink, both directions (both ends' egress), of
        one traffic class (its HTB class id, e.g. "1:10" for hfreduce when built with classes)
        or of all."""
        total = 0
        for link in self.load()["links"]:
            if not link["link"].startswith("leaf "):
                continue
            for dev in link["ends"]:
                cls = ["classid", classid] if classid else ["classid", "1:1"]
                r = run("tc", "-n", self.sw, "-s", "class", "show", "dev", dev, *cls)
                sent = [line.split()[1] for line in r.stdout.splitlines()
                        if line.strip().startswith("Sent")]
                if not sent:
                    raise RuntimeError(f"no byte count for {dev} class {cls[1]}: {r.stdout!r}")
                total += int(sent[0])
        return total

    def load(self):
        if not os.path.exists(self.state):
            raise RuntimeError(f"no lab named {self.name} is up (deploy/netlab.py up CLUSTER_TOML)")
        with open(self.state) as f:
            return json.load(f)


def main():
    p = argparse.ArgumentParser(description="An emulated fat-tree network of namespaces.")
    p.add_argument("command",
                   choices=["up", "down", "status", "hosts", "exec", "cut", "heal", "slow",
                            "restore"])
    p.add_argument("arg", nargs="?",
                   help="up: the cluster.toml; exec: the node; cut, heal, slow, restore: a node, "
                   "leaf or zone")
    p.add_argument("--mbit", type=float, help="slow: the link's new rate in Mb/s")
    p.add_argument("--name", default="fflab", help="prefix of every namespace it makes")
    p.add_argument("--scale", type=float, default=0.001, help="link rates x this (default 0.001)")
    p.add_argument("--queue-kb", type=int, default=256, help="each queue's buffer (default 256 KiB)")
    p.add_argument("--classes", action="store_true", help="a weighted queue per traffic class")
    argv = sys.argv[1:]
    rest = []
    if "--" in argv:
        rest = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("netlab: run as root (it makes network namespaces)")
    if len(a.name) > 8 or not a.name.replace("-", "").isalnum():
        sys.exit("netlab: --name must be at most 8 letters, digits or dashes")
    lab = Lab(a.name)
    try:
        if a.command == "up":
            if not a.arg:
                sys.exit("netlab: up needs a cluster.toml")
            if a.scale <= 0 or a.queue_kb <= 0:
                sys.exit("netlab: --scale and --queue-kb must be positive")
            topo = load_topology(a.arg, a.scale)
            lab.up(topo, a.queue_kb, a.classes)
            state = lab.load()
            print(f"netlab: {len(state['hosts'])} hosts up in namespaces {a.name}-<node>; "
                  f"switches in {lab.sw}; classes {'on' if a.classes else 'off'}", file=sys.stderr)
        elif a.command == "down":
            n = lab.down()
            print(f"netlab: removed {n} namespaces", file=sys.stderr)
        elif a.command == "hosts":
            for h in lab.load()["hosts"]:
                print(h["node"], h["address"])
        elif a.command == "status":
            state = lab.load()
            for h in state["hosts"]:
                print(f"{h['node']:24s} {h['address']:16s} zone {h['zone']} leaf {h['leaf']}")
            for link in state["links"]:
                r = run("tc", "-n", lab.sw, "-s", "class", "show", "dev", link["dev"], check=False)
                sent = [line.split()[1] for line in r.stdout.splitlines() if line.strip().startswith("Sent")]
                print(f"{link['link']:32s} {link['mbit']:10.1f} Mb/s  sent {sent[0] if sent else '?'} bytes")
        elif a.command in ("cut", "heal"):
            if not a.arg:
                sys.exit(f"netlab: {a.command} needs a node, a leaf or a zone")
            getattr(lab, a.command)(a.arg)
            print(f"netlab: {a.arg} {'cut' if a.command == 'cut' else 'healed'}", file=sys.stderr)
        elif a.command in ("slow", "restore"):
            if not a.arg or (a.command == "slow" and not a.mbit):
                sys.exit("netlab: slow NODE|LEAF|ZONE --mbit RATE; restore NODE|LEAF|ZONE")
            lab.slow(a.arg, a.mbit if a.command == "slow" else None)
            print(f"netlab: {a.arg} {'at ' + str(a.mbit) + ' Mb/s' if a.command == 'slow' else 'restored'}",
                  file=sys.stderr)
        elif a.command == "exec":
            if not a.arg or not rest:
                sys.exit("netlab: exec NODE -- CMD...")
            hosts = {h["node"]: h for h in lab.load()["hosts"]}
            if a.arg not in hosts:
                sys.exit(f"netlab: no host {a.arg} (hosts: {' '.join(hosts)})")
            os.execvp("ip", ["ip", "netns", "exec", hosts[a.arg]["netns"], *rest])
    except (RuntimeError, ValueError, OSError) as e:
        sys.exit(f"netlab: {e}")


if __name__ == "__main__":
    main()
