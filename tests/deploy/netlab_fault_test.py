#!/usr/bin/python3
"""Cables cut under load, on the network lab (deploy/netlab.py cut/heal): the real fs3 daemons
(one chain of three replicas across both zones) and HFReduce jobs, on two zones of two leaves of
two hosts each. What users rely on:

  a storage host's link cut during writes   every write is acknowledged and none is lost; the
                                            cut target goes offline, the chain goes on with two;
                                            healed, the target resyncs and serves again
  a leaf's uplink cut during a job          both ranks of a cross-leaf HFReduce job fail within
  and writes                                seconds with an error naming the timeout, not hang;
                                            the writes go on (the chain loses the leaf's target)
  a zone's link cut during writes           the writes go on with the other zone's replicas;
                                            healed, the zone's target resyncs
  then                                      the target that missed both rounds of writes, alone
                                            (the other two cut), serves every byte ever written

Root only (namespaces). Usage: tests/deploy/netlab_fault_test.py BUILD_DIR
"""

import subprocess
import time

from labtest import fail, lab, say

from ffdeploy import netlab_cluster

TOPOLOGY = """
name = "faults"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "A"          # A00, A01
  count = 2
  nodes = 2
  uplink_gbps = 200
[[zones]]
name = "B"
  [[zones.leaves]]
  name = "B"          # B00, B01
  count = 2
  nodes = 2
  uplink_gbps = 200
"""

MGMTD = "A00-n00"
STORAGE = {"A00-n01": "11", "A01-n00": "21", "B00-n00": "31"}  # node -> its target's id
CLIENT = "A01-n01"
LEASE_MS = 3000
HFREDUCE_TIMEOUT_MS = 5000

class Faults:
    def __init__(self, cluster):
        self.lab, self.c = cluster.lab, cluster
        self.mgmtd = cluster.start_fs3(MGMTD, list(STORAGE), replication=3, lease_ms=LEASE_MS)
        self.sets = []  # (first inode, count): every set of files acknowledged so far

    def states(self):
        return {t["id"]: t["public_state"] for t in self.c.fs3_json("targets")}

    def wait_states(self, want, timeout=60, why=""):
        """Waits until every target in `want` (id -> public state) is in that state."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.states()
            if all(got.get(t) == s for t, s in want.items()):
                return got
            if time.monotonic() > deadline:
                fail(f"{why}: targets {got} after {timeout} s, expected {want}")
            time.sleep(0.3)

    def files(self, first):
        return ["--mgmtd", self.mgmtd, "--inodes", str(first), "--count", "16", "--mib", "2"]

    def write_during(self, cut, first):
        """Writes a set of files from the client and cuts `cut` a second into it; every write must
        be acknowledged."""
        w = self.c.spawn(CLIENT, "fs3-load", "write", *self.files(first), name=f"write-{first}",
                         stdout=subprocess.PIPE)
        time.sleep(1)
        if w.poll() is not None:
            fail(f"the writes of set {first} ended before the cut: make the set larger")
        say(f"cut {cut} during the writes of set {first}")
        self.lab.cut(cut)
        out = w.communicate(timeout=300)[0].decode()
        if w.returncode != 0:
            fail(f"writes through the cut of {cut} failed: {netlab_cluster.tail(w.log_path)}")
        say(f"set {first} acknowledged through the cut of {cut}: {out.strip()}")
        self.sets.append(first)

    def check_all(self, why):
        for first in self.sets:
            out = self.c.run(CLIENT, "fs3-load", "check", *self.files(first))
            say(f"{why}: set {first} read back whole: {out.strip()}")

    def heal_and_resync(self, what, targets):
        self.lab.heal(what)
        say(f"healed {what}; waiting for {', '.join(targets)} to resync")
        t = time.monotonic()
        self.wait_states({x: "serving" for x in STORAGE.values()}, why=f"resync after {what}")
        say(f"resync done in {time.monotonic() - t:.1f} s: every target serving")


def hfreduce_fails_fast(f, nodes, cut):
    """A job across `cut` keeps running until the cut, then each rank exits non-zero within the
    HFReduce timeout and a margin, with an error that says what timed out."""
    procs = f.c.allreduce_job(nodes, bytes_="1M", seconds=600, name=f"job-{cut}",
                              env={"HFREDUCE_TIMEOUT_MS": str(HFREDUCE_TIMEOUT_MS)})
    time.sleep(3)
    for r, p in enumerate(procs):
        if p.poll() is not None:
            fail(f"rank {r} ended before the cut ({p.returncode}): {netlab_cluster.tail(p.log_path)}")
    say(f"job on {', '.join(nodes)} running; cut {cut}")
    t = time.monotonic()
    f.lab.cut(cut)
    limit = HFREDUCE_TIMEOUT_MS / 1000 + 15
    for r, p in enumerate(procs):
        try:
            p.wait(timeout=max(0.1, limit - (time.monotonic() - t)))
        except subprocess.TimeoutExpired:
            fail(f"rank {r} still running {limit:.0f} s after {cut} was cut: it hangs")
        err = netlab_cluster.tail(p.log_path, 600)
        if p.returncode == 0:
            fail(f"rank {r} exited 0 after the cut: {err}")
        if "timed out" not in err.lower() and "timeout" not in err.lower():
            fail(f"rank {r}'s error does not say what timed out: {err}")
        say(f"rank {r} failed after {time.monotonic() - t:.1f} s: {err.splitlines()[-1]}")


def main():
    with lab("nlf", TOPOLOGY, queue_kb=1024) as (cluster, build, tmp, toml):
        f = Faults(cluster)
        f.wait_states({t: "serving" for t in STORAGE.values()}, why="start")

        # A storage host's link.
        f.write_during("A01-n00", 1000)
        f.wait_states({"21": "offline", "11": "serving", "31": "serving"}, why="A01-n00 cut")
        f.heal_and_resync("A01-n00", ["21"])

        # A leaf's uplink, under a job across it and writes.
        hfreduce_fails_fast(f, [CLIENT, "B00-n01"], "B00")
        f.heal_and_resync("B00", ["31"])  # the writes below must start with three replicas
        f.write_during("B00", 2000)
        f.wait_states({"31": "offline"}, why="B00's uplink cut")
        f.heal_and_resync("B00", ["31"])

        # A zone's link.
        f.write_during("B", 3000)
        f.wait_states({"31": "offline", "11": "serving", "21": "serving"}, why="zone B cut")
        f.heal_and_resync("B", ["31"])

        # The target that missed two sets of writes serves everything alone.
        f.lab.cut("A00-n01")
        f.lab.cut("A01-n00")
        f.wait_states({"11": "offline", "21": "offline", "31": "serving"},
                      why="A00-n01 and A01-n00 cut")
        f.check_all("B00-n00 alone")
        f.lab.heal("A00-n01")
        f.lab.heal("A01-n00")
        f.wait_states({t: "serving" for t in STORAGE.values()}, why="final resync")
        f.check_all("all three again")
        print("PASS")


if __name__ == "__main__":
    main()
