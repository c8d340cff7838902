"""straggler-bench: how well hai-server names a straggler, on a real platform on this machine.

A HAI-Platform of three nodes (hai-server and three hai-agents on loopback) runs a data-parallel
job over hfreduce, one rank a node (straggler_worker.py: haiscale DDP, its code does nothing for
telemetry). Faults are injected from outside, one at a time, at every node in turn:

- compute: the rank's process capped at 20% of a CPU with a cgroup (cpu.cfs_quota_us);
- data: the rank's data loader made to take 20 ms a sample (a file the worker reads);
- storage: one of three fs3 storage services (one target each; the job reads a batch a step from
  a file striped over them with the native client) slowed by 150 ms a read (fault_read_delay_file);
- network (on the network lab: the platform in namespaces, 200 Mb/s host links): one node's link
  shaped to 25 Mb/s under a 3-node job with a 2 MiB allreduce a step (`deploy/netlab.py slow`).

Each injection runs until `hai top --json` names a node (or target) and a cause (or 30 s pass, 45
on the lab), is then removed, and the finding must end. Between injections the job runs healthy
for a while, and any finding then is a false alarm. ft recovery: a fault-tolerant job (2 replica
groups) with one group's CPU capped: the seconds from the cap until the job's step time is back
within 10% of its healthy one (hai-server moves the group off its node). Telemetry overhead: in
the same job, every rank records its steps in every other block of 50 (off, on, off, ...): the
median block step time on over off; and the cost of recording one step, timed in process.

Prints a table of every injection and a last line:

    straggler bench: right node and cause N/M, median time to diagnosis X s, false alarms F/H,
    ft recovery Y s, telemetry overhead Z%

Run as root (cgroups), from the repository with the build in build/ (or $FF_BUILD_DIR):

    sudo FF_BUILD_DIR=build .venv/bin/python tests/torch/straggler_bench.py [--repeats 4]

(CTest `straggler_bench`, label slow.) --no-lab leaves the network class out (a machine without
network namespaces).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from hai_cluster import HaiCluster
from launch import HERE
from test_straggler import CpuThrottle, ft_steps_back, rank_pid, stop_ft, submit_ft

NODES = 3
DIAGNOSIS_LIMIT_S = 30


def submit(cluster, out, *args):
    command = (f"{sys.executable} {os.path.join(HERE, 'rank_runner.py')} "
               f"straggler_worker:train '{json.dumps([out, *args])}'")
    job = cluster.submit("--nodes", str(NODES), "--gpus-per-node", "1", "--env",
                         "OMP_NUM_THREADS=1", "--", command)
    cluster.wait_state(job, "RUNNING")
    return job


def top(cluster, job):
    return json.loads(cluster.hai("top", str(job), "--json"))


class Inject:
    """One fault at one position: compute or data at a rank (its node A-leaf-n0<rank>), storage at
    a storage service (its target t10<i+1>)."""

    def __init__(self, kind, where, out, slow_reads):
        self.kind, self.where, self.out, self.slow_reads = kind, where, out, slow_reads
        self.throttle = None

    def __enter__(self):
        if self.kind == "compute":
            self.throttle = CpuThrottle(rank_pid(self.out, self.where), 0.2)
        elif self.kind == "data":
            with open(os.path.join(self.out, f"slow-data.{self.where}"), "w") as f:
                f.write("0.02")
        else:
            with open(self.slow_reads(self.where), "w") as f:
                f.write("150")
        return self

    def __exit__(self, *exc):
        if self.throttle:
            self.throttle.release()
        elif self.kind == "data":
            os.unlink(os.path.join(self.out, f"slow-data.{self.where}"))
        else:
            os.unlink(self.slow_reads(self.where))


WANT = {"compute": "SLOW_COMPUTE", "data": "SLOW_DATA", "storage": "SLOW_STORAGE",
        "network": "SLOW_NETWORK"}


def diagnose(top_fn, kind, who, limit):
    """Polls the job's finding while a fault is in (the caller's context): (finding, seconds to
    it, right) once something is named, or (None, None, False) after `limit` s."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        f = top_fn()["finding"]
        if f["cause"] != "SLOW_NONE":
            named = f.get("target") if kind == "storage" else f.get("node")
            return f, time.monotonic() - began, f["cause"] == WANT[kind] and named == who
        time.sleep(0.2)
    return None, None, False


def report(rows, i, kind, who, found, took, right, cleared):
    rows.append((kind, who, took, right, cleared))
    named = found.get("target") or found.get("node") if found else ""
    print(f"{i:3d}  {kind:8s} {who:11s} -> "
          f"{(found['cause'] + ' on ' + named) if found else 'nothing':30s} "
          f"{'%.1f s' % took if took else '-':>7s}  {'right' if right else 'WRONG'}"
          f"{'' if cleared else ', never cleared'}", flush=True)


def watch_healthy(top_fn, seconds):
    """A healthy window: the findings seen in it (each a false alarm)."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        f = top_fn()["finding"]
        if f["cause"] != "SLOW_NONE" and f["text"] not in seen:
            seen.append(f["text"])
        time.sleep(0.5)
    return seen


def wait_cleared(top_fn, limit=DIAGNOSIS_LIMIT_S):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if top_fn()["finding"]["cause"] == "SLOW_NONE":
            return True
        time.sleep(0.3)
    return False


def run_alternating(cluster, out, steps):
    """One job of `steps` steps whose ranks record their steps in every other block of 50
    (straggler_worker.train, telemetry "alternate"): every rank's block means, on and off."""
    job = submit(cluster, out, None, 900, steps, "alternate")
    cluster.wait_state(job, "SUCCEEDED", timeout=900)
    on, off = [], []
    for line in cluster.logs(job, 0).splitlines():  # (every rank's blocks are alike: in step)
        if line.startswith("RESULT "):
            blocks = json.loads(line[7:])["blocks"]
            on += blocks["on"]
            off += blocks["off"]
    return on, off


def record_cost(steps=20000):
    """Seconds hai_job spends recording one step (a perf_counter pair and one line)."""
    import importlib

    import hai_job

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HAI_STEPS_FILE"] = os.path.join(tmp, "steps.jsonl")
        module = importlib.reload(hai_job)
        module.record_steps(optimizer_hook=False, data_loader=False)
        module.set_comm_clock(lambda: (0, 0.0))
        began = time.perf_counter()
        for _ in range(steps):
            with module.phase("data"):
                pass
            module.step_done()
        cost = (time.perf_counter() - began) / steps
        module._stop_recording()
        del os.environ["HAI_STEPS_FILE"]
    return cost


def loopback_phase(args, tmp, rows, alarms):
    """compute, data and storage at every position on a 3-node platform beside a 3-target fs3;
    then the ft recovery runs on the same platform. Returns (healthy windows, ft recoveries, the
    job's history, the overhead jobs' step times off and on)."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))  # tests/python
    from fs3_cluster import Fs3Cluster

    from fs3client import FileSystem

    def slow_reads(i):
        return os.path.join(tmp, f"slow-reads.{i}")

    os.makedirs(os.path.join(tmp, "fs3"))
    os.makedirs(os.path.join(tmp, "hai"))
    windows = 0
    with Fs3Cluster(os.path.join(tmp, "fs3"), storage=NODES, replication=1,
                    storage_options=lambda i: {"fault_read_delay_file": slow_reads(i - 1)}) as fs3, \
            HaiCluster(os.path.join(tmp, "hai"), nodes=NODES) as cluster:
        fs = FileSystem(fs3.meta, fs3.mgmtd)
        fs.write_file("/data", os.urandom(6 << 20))
        fs.close()
        reads = {"meta": fs3.meta, "mgmtd": fs3.mgmtd, "path": "/data", "ranges": 6}
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        job = submit(cluster, out, None, 3600, 0, True, 0, reads)

        def top_fn():
            return top(cluster, job)

        # The first: the job's baseline forms (its best steps, the usual waits). A fault from the
        # start would be the job's normal, never named.
        alarms += watch_healthy(top_fn, max(8.0, args.healthy_s))
        windows += 1
        injections = [(kind, where) for _ in range(args.repeats)
                      for kind in ("compute", "data", "storage") for where in range(NODES)]
        for i, (kind, where) in enumerate(injections):
            who = f"t10{where + 1}" if kind == "storage" else f"A-leaf-n0{where}"
            with Inject(kind, where, out, slow_reads):
                found, took, right = diagnose(top_fn, kind, who, DIAGNOSIS_LIMIT_S)
            report(rows, len(rows) + 1, kind, who, found, took, right, wait_cleared(top_fn))
            if windows < args.healthy and i % max(1, len(injections) // args.healthy) == 0:
                alarms += watch_healthy(top_fn, args.healthy_s)
                windows += 1
        while windows < args.healthy:
            alarms += watch_healthy(top_fn, args.healthy_s)
            windows += 1
        open(os.path.join(out, "stop"), "w").close()
        cluster.wait_state(job, "SUCCEEDED")
        history = [e["text"] for e in cluster.show(job)["runs"][-1]["events"]]

        recoveries = [ft_recovery(cluster, os.path.join(tmp, f"ft-{k}")) for k in range(args.ft)]

        on, off = [], []
        for k in range(args.overhead_runs):  # the same run, on and off in turn
            d = os.path.join(tmp, f"overhead-{k}")
            os.makedirs(d)
            blocks_on, blocks_off = run_alternating(cluster, d, args.overhead_steps)
            on += blocks_on
            off += blocks_off
    return windows, recoveries, history, off, on


def ft_recovery(cluster, out):
    """A fault-tolerant job of 2 replica groups (straggler_worker.train_ft); group 1's CPU capped
    at 20% after a healthy while: seconds until the job's step time is back within 10% of its
    healthy one (None: not within 60 s)."""
    os.makedirs(out)
    job = submit_ft(cluster, out)
    deadline = time.monotonic() + 60
    healthy = None
    while time.monotonic() < deadline:  # both groups recording, a baseline formed
        t = top(cluster, job)
        if len(t["ranks"]) == 2 and all(int(r["recorded"]) >= 30 for r in t["ranks"]) \
                and t.get("baseline_s", 0) > 0:
            healthy = t["step_s"]
            break
        time.sleep(0.5)
    back = None
    if healthy:
        slow_node = cluster.show(job)["runs"][-1]["nodes"][1]
        throttle = CpuThrottle(rank_pid(out, "1"), 0.2)
        try:
            back = ft_steps_back(cluster, job, healthy, slow_node, time.monotonic())
        finally:
            throttle.release()
    stop_ft(cluster, job, out)
    print(f"ft: healthy {healthy * 1000 if healthy else float('nan'):.0f} ms a step; back within "
          f"10% {'%.1f s' % back if back else 'never (60 s)'} after the cap", flush=True)
    return back


LAB_TOPOLOGY = """
name = "sbench"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "L"
  nodes = 4
  gpus_per_node = 1
  uplink_gbps = 800
"""


def lab_phase(args, tmp, rows, alarms):
    """network: one node's link at 25 Mb/s under a 3-node job on the platform on the network lab,
    each of the job's nodes in turn. Returns its healthy windows."""
    from ffdeploy import netlab_cluster

    root = os.path.dirname(os.path.dirname(HERE))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(os.environ.get("FF_BUILD_DIR", os.path.join(root, "build")), "python"), HERE,
         os.environ.get("PYTHONPATH", "")])
    build = os.path.abspath(os.environ.get("FF_BUILD_DIR", os.path.join(root, "build")))
    toml = os.path.join(tmp, "lab.toml")
    with open(toml, "w") as f:
        f.write(LAB_TOPOLOGY)
    windows = 0
    with netlab_cluster.lab_cluster(f"sb{os.getpid()}"[:8], toml, build, queue_kb=1024,
                                    work_root=tmp) as c:
        nodes = [f"L-n0{i}" for i in range(4)]
        c.start_platform(nodes[0], nodes, toml, heartbeat_timeout_ms=5000)
        deadline = time.monotonic() + 30
        while len([n for n in c.hai_json("nodes")["nodes"] if n["state"] == "NODE_UP"]) < 4:
            if time.monotonic() > deadline:
                raise RuntimeError("the lab's nodes did not come up")
            time.sleep(0.3)
        out = os.path.join(tmp, "lab-out")
        os.makedirs(out)
        command = (f"{sys.executable} {os.path.join(HERE, 'rank_runner.py')} "
                   f"straggler_worker:train '{json.dumps([out, None, 3600, 0, True, 2])}'")
        job = int(c.hai_json("submit", "--nodes", "3", "--env", "HFREDUCE_TRANSPORT=tcp", "--",
                             command)["id"])

        def top_fn():
            return c.hai_json("top", str(job))

        deadline = time.monotonic() + 120
        while True:
            t = top_fn()
            if len(t["ranks"]) == 3 and all(int(r["recorded"]) >= 12 for r in t["ranks"]) \
                    and t.get("baseline_s", 0) > 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the lab's job never recorded steps: {t}")
            time.sleep(0.5)
        alarms += watch_healthy(top_fn, args.healthy_s)
        windows += 1
        job_nodes = c.hai_json("show", str(job))["runs"][-1]["nodes"]
        for _ in range(args.lab_repeats):
            for node in job_nodes:
                c.lab.slow(node, 25)
                try:
                    found, took, right = diagnose(top_fn, "network", node, 45)
                finally:
                    c.lab.slow(node, None)
                report(rows, len(rows) + 1, "network", node, found, took, right,
                       wait_cleared(top_fn, 45))
            alarms += watch_healthy(top_fn, args.healthy_s)
            windows += 1
        open(os.path.join(out, "stop"), "w").close()
    return windows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3,
                        help="injections of compute, data and storage at each position "
                             "(default 3: 27 in all)")
    parser.add_argument("--lab-repeats", type=int, default=2,
                        help="network injections at each of the lab job's 3 nodes (default 2)")
    parser.add_argument("--no-lab", action="store_true", help="leave the network class out")
    parser.add_argument("--ft", type=int, default=3, help="ft recovery runs (default 3)")
    parser.add_argument("--healthy", type=int, default=10,
                        help="healthy windows on the loopback platform (default 10)")
    parser.add_argument("--healthy-s", type=float, default=10, help="seconds of each")
    parser.add_argument("--overhead-runs", type=int, default=3,
                        help="jobs recording their steps in every other block of 50 (default 2)")
    parser.add_argument("--overhead-steps", type=int, default=1000)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("straggler-bench throttles ranks with cgroups: run it as root")

    rows, alarms = [], []
    with tempfile.TemporaryDirectory() as tmp:
        windows, recoveries, history, off, on = loopback_phase(args, tmp, rows, alarms)
        if not args.no_lab:
            windows += lab_phase(args, tmp, rows, alarms)
    cost = record_cost()

    right = sum(1 for r in rows if r[3])
    times = [r[2] for r in rows if r[3]]
    median_s = statistics.median(times) if times else float("nan")
    step_off, step_on = statistics.median(off), statistics.median(on)
    overhead = (step_on - step_off) / step_off * 100
    print()
    print(f"{'class':8s} {'where':11s} {'right':>6s} {'median s':>9s} {'max s':>6s}")
    for kind in ("compute", "data", "storage", "network"):
        for who in sorted({r[1] for r in rows if r[0] == kind}):
            mine = [r for r in rows if r[0] == kind and r[1] == who]
            ok = [r[2] for r in mine if r[3]]
            print(f"{kind:8s} {who:11s} {len(ok):3d}/{len(mine):<2d} "
                  f"{statistics.median(ok) if ok else float('nan'):9.1f} "
                  f"{max(ok) if ok else float('nan'):6.1f}")
    print(f"healthy windows: {windows} of {args.healthy_s:.0f} s, findings in them: {len(alarms)}")
    for a in alarms:
        print(f"  false alarm: {a}")
    got = [r for r in recoveries if r is not None]
    ft_s = statistics.median(got) if len(got) == len(recoveries) and got else None
    print(f"ft recovery (a group's CPU capped at 20%, back within 10% of healthy): "
          f"{', '.join('%.1f s' % r if r is not None else 'never' for r in recoveries)}")
    print(f"step time, telemetry off: {step_off * 1000:.2f} ms, on: {step_on * 1000:.2f} ms "
          f"(medians of {len(off)} and {len(on)} blocks of 50 steps, rank 0 of "
          f"{args.overhead_runs} jobs of {args.overhead_steps} steps recording in every other "
          f"block, the first block of each left out as warm-up; off {', '.join('%.1f' % (t * 1000) for t in off)}, on "
          f"{', '.join('%.1f' % (t * 1000) for t in on)} ms); "
          f"recording one step costs {cost * 1e6:.1f} us in process "
          f"({cost / step_off * 100:.3f}% of a step)")
    print(f"job history: {len(history)} events, {sum('slower' in h for h in history)} findings")
    print("bounds: the agent's window (a rank's median moves after 5 of its last 8 steps are "
          "slow: on the lab, where a slowed step takes 2 s, that is most of the time), the "
          "heartbeat (200 ms here, 1 s by default), and confirmation (3 evaluations over 2 s)")
    print(f"straggler bench: right node and cause {right}/{len(rows)}, median time to diagnosis "
          f"{median_s:.1f} s, false alarms {len(alarms)}/{windows}, ft recovery "
          f"{'%.1f s' % ft_s if ft_s is not None else 'n/a (not every run recovered)'}, "
          f"telemetry overhead {overhead:+.1f}%")


if __name__ == "__main__":
    main()
