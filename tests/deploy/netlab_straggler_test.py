#!/usr/bin/python3
"""Straggler detection's network class on the network lab: HAI-Platform (hai-server and one
hai-agent per host, each bound to its host's address) runs a 3-node data-parallel torch job over
hfreduce (haiscale DDP and a 2 MiB allreduce a step, recording its steps unasked), and one of its
nodes' link is slowed under it (`deploy/netlab.py slow`: HTB at 25 Mb/s both ways instead of 200,
a degraded cable). What users rely on:

  healthy, for a while          no finding
  one node's link slowed        hai-server names that node, cause "its network" (SLOW_NETWORK),
                                from HFReduce's per-edge timing (every rank alike waits in the
                                collectives: nobody arrives late), within DIAGNOSIS_S
  the link restored             the finding ends; the job's history holds both lines

Root only (namespaces). Usage: tests/deploy/netlab_straggler_test.py BUILD_DIR
"""

import json
import os
import sys
import time

from labtest import ROOT, fail, lab, say, wait_for

TOPOLOGY = """
name = "straggler"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "L"          # L-n00 .. L-n03
  nodes = 4
  gpus_per_node = 1
  uplink_gbps = 800
"""

SERVER = "L-n00"
NODES = [f"L-n0{n}" for n in range(4)]
DIAGNOSIS_S = 40  # a loaded 2-core machine running three torch ranks and the emulated switches
SLOW_MBIT = 25



def main():
    # The ranks' Python: the project's (torch, haiscale's dependencies), not this script's.
    python = os.environ.get("FF_PYTHON") or os.path.join(ROOT, ".venv", "bin", "python")
    torch_dir = os.path.join(ROOT, "tests", "torch")
    build = os.path.abspath(sys.argv[1]) if len(sys.argv) == 2 else ""
    # The ranks inherit the agents' environment: haiscale and hai_job from the build.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(build, "python"), torch_dir, os.environ.get("PYTHONPATH", "")])
    os.environ["OMP_NUM_THREADS"] = "1"
    with lab("nls", TOPOLOGY, queue_kb=1024) as (cluster, build, tmp, toml):
        cluster.start_platform(SERVER, NODES, toml, heartbeat_timeout_ms=5000)
        wait_for("every node up", lambda: all(
            n["state"] == "NODE_UP" for n in cluster.hai_json("nodes")["nodes"]) and
            len(cluster.hai_json("nodes")["nodes"]) == len(NODES), 30)
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        args = json.dumps([out, None, 600, 0, True, 2])
        command = (f"{python} {os.path.join(torch_dir, 'rank_runner.py')} "
                   f"straggler_worker:train '{args}'")
        job = int(cluster.hai_json("submit", "--name", "train", "--nodes", "3",
                                   "--env", "HFREDUCE_TRANSPORT=tcp", "--", command)["id"])
        show = wait_for(f"job {job} running",
                        lambda: (j := cluster.hai_json("show", str(job)))["state"] == "RUNNING"
                        and j, 60)
        nodes = show["runs"][0]["nodes"]
        slow = next(n for n in reversed(nodes) if n != SERVER)

        def top():
            return cluster.hai_json("top", str(job))

        # Healthy: every rank records steps, the leaders their tree edges; nothing is found.
        def recording():
            t = top()
            return (len(t["ranks"]) == 3 and all(int(r["recorded"]) >= 12 for r in t["ranks"])
                    and t.get("baseline_s", 0) > 0 and t)
        seen = wait_for("three ranks recording steps", recording, 120)
        for _ in range(10):
            seen = top()
            if seen["finding"]["cause"] != "SLOW_NONE":
                fail(f"a finding on the healthy job: {json.dumps(seen)}")
            time.sleep(0.5)
        links = {r["node"]: {p["peer"] for p in r.get("links", [])} for r in seen["ranks"]}
        if not all(links[n] and links[n] <= set(nodes) - {n} for n in nodes):
            fail(f"the ranks' tree edges are not their job's other nodes: {links}")
        say(f"job {job} on {', '.join(nodes)}: healthy at {seen['step_s'] * 1000:.0f} ms a step; "
            f"edges {links}")

        # One node's link: 25 Mb/s both ways.
        cluster.lab.slow(slow, SLOW_MBIT)
        t = time.monotonic()
        try:
            def named():
                f = top()["finding"]
                if f["cause"] not in ("SLOW_NONE", "SLOW_NETWORK"):
                    say(f"(meanwhile: {f['text']})")
                return f["cause"] == "SLOW_NETWORK" and f
            finding = wait_for(f"{slow}'s network named", named, DIAGNOSIS_S)
            took = time.monotonic() - t
            if finding["node"] != slow:
                fail(f"the network finding names {finding['node']}, not {slow}: {finding['text']}")
            say(f"found in {took:.1f} s: {finding['text']}")
            live = cluster.hai("top", str(job), "--once")
            if "tree edges (into each node's leader, per step):" not in live or \
                    f"<- {slow}" not in live:
                fail(f"hai top shows no tree edges from {slow}: {live}")
            shown = cluster.hai("show", str(job))
            if f"node {slow}'s links move bytes" not in shown:
                fail(f"hai show has no slow steps line for {slow}: {shown}")
        finally:
            cluster.lab.slow(slow, None)
        wait_for("the finding ended after the link came back",
                 lambda: top()["finding"]["cause"] == "SLOW_NONE", DIAGNOSIS_S)

        open(os.path.join(out, "stop"), "w").close()
        wait_for(f"job {job} finished",
                 lambda: cluster.hai_json("show", str(job))["state"] in
                 ("SUCCEEDED", "FAILED", "STOPPED"), 60)
        final = cluster.hai_json("show", str(job))
        if final["state"] != "SUCCEEDED":
            fail(f"job {job} ended {final['state']}: {final.get('message', '')}")
        history = "\n".join(e["text"] for e in final["runs"][-1]["events"])
        if f"{slow}'s links move bytes" not in history or \
                f"node {slow} no longer makes the others wait" not in history:
            fail(f"the job's history lacks the finding or its end: {history}")
        say("history:\n" + history)
        print("PASS")


if __name__ == "__main__":
    main()
