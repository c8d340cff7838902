#!/usr/bin/env python3
"""stagger-bench: jobs checkpointing on the same period, with and without the platform spreading
their checkpoints (hai-server's checkpoint_write_gbps), in one run.

    FF_BUILD_DIR=build PYTHONPATH=build/python:deploy OMP_NUM_THREADS=1 \\
        .venv/bin/python tests/torch/stagger_bench.py [--jobs 4] [--mib 48] [--period 8] [--seconds 60]

Each half starts a platform (hai-server, one hai-agent per job and one more) beside one fs3
(fs3-mgmtd, three fs3-storage services, fs3-meta; chains of three replicas), and runs --jobs jobs
that each write a checkpoint of --mib MiB to fs3 (its native client) every --period seconds,
asking hai_job.checkpoint_slot first, and one more job that reads 8 MiB from fs3 each step (its
data loading) for --seconds. Without staggering (checkpoint_write_gbps = 0) every ask is granted
at once, so the checkpoints land together; with it, the budget is one job's measured write rate,
so they go one after another. Figures per half: the p50 and p99 of a checkpoint's write time and
of its wait for the go, and the co-running job's median step and its worst step over that median
(its hiccup). What bounds them here: every byte is written three times on one disk over loopback
by services that share two cores with the jobs; the wait is bounded by checkpoint_max_delay_ms.
The last line:
  stagger bench: p99 checkpoint write A s staggered vs B s not (wait p99 W s); co-running job's
  worst step hiccup H s vs K s
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

from fs3_cluster import Fs3Cluster  # noqa: E402
from hai_cluster import HaiCluster  # noqa: E402


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))] if values else 0.0


def half(args, budget_gbps, root):
    """One platform run; returns (checkpoint windows, reader step times)."""
    os.makedirs(os.path.join(root, "hai"))
    with Fs3Cluster(os.path.join(root, "fs3")) as fs3, \
            HaiCluster(os.path.join(root, "hai"), nodes=args.jobs + 1,
                       server_options=dict(checkpoint_write_gbps=budget_gbps,
                                           checkpoint_max_delay_ms=60000)) as cluster:
        out = os.path.join(root, "out")
        os.makedirs(out)
        env = ["--env", f"FS3_META={fs3.meta}", "--env", f"FS3_MGMTD={fs3.mgmtd}",
               "--env", "OMP_NUM_THREADS=1"]
        runner = f"{sys.executable} {os.path.join(HERE, 'rank_runner.py')}"
        reader = cluster.submit("--nodes", "1", "--gpus-per-node", "1", "--name", "reader", *env,
                                "--", f"{runner} timesharing_worker:reader '{json.dumps([out, 8])}'")
        cluster.wait_state(reader, "RUNNING")
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(out, "reader.steps")):
            assert time.monotonic() < deadline, cluster.logs(reader)
            time.sleep(0.2)
        jobs = []
        for i in range(args.jobs):
            a = json.dumps([out, f"j{i}", args.period, 0, 0, False, True, args.mib])
            jobs.append(cluster.submit("--nodes", "1", "--gpus-per-node", "1", "--name", f"j{i}",
                                       *env, "--", f"{runner} timesharing_worker:train '{a}'"))
        for job in jobs:
            cluster.wait_state(job, "RUNNING")
        began = time.time()
        time.sleep(args.seconds)
        open(os.path.join(out, "stop"), "w").close()
        for job in jobs + [reader]:
            cluster.wait_state(job, "SUCCEEDED", timeout=120)
        windows = []
        for i in range(args.jobs):
            path = os.path.join(out, f"j{i}.ckpts")
            windows += [json.loads(line) for line in open(path)] if os.path.exists(path) else []
        steps = [float(line.split()[1]) for line in open(os.path.join(out, "reader.steps"))
                 if float(line.split()[0]) >= began]
        return windows, steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--mib", type=int, default=48)
    parser.add_argument("--period", type=float, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        # One job's write rate alone, to set the budget: a short probe run without staggering.
        for name, budget in (("not staggered", 0.0), ("staggered", None)):
            if budget is None:  # the budget: what one checkpoint alone wrote at, measured above
                alone = [args.mib * (1 << 20) / 1e9 / (w["ended"] - w["began"])
                         for w in results["not staggered"][0]]
                budget = max(alone)
            windows, steps = half(args, budget, os.path.join(tmp, name.replace(" ", "-")))
            results[name] = (windows, steps, budget)
            print(f"{name}: {len(windows)} checkpoints, budget {budget:.3f} GB/s", flush=True)
    print(f"\n{args.jobs} jobs writing {args.mib} MiB to fs3 every {args.period:g} s, one job reading "
          f"8 MiB a step, {args.seconds:g} s each")
    print(f"{'':15s} {'write p50':>10s} {'write p99':>10s} {'wait p50':>9s} {'wait p99':>9s} "
          f"{'step p50':>9s} {'worst step':>11s} {'hiccup':>8s}")
    figures = {}
    for name, (windows, steps, _) in results.items():
        writes = [w["ended"] - w["began"] for w in windows]
        waits = [w["waited"] for w in windows]
        median = statistics.median(steps)
        figures[name] = dict(write99=percentile(writes, 0.99), wait99=percentile(waits, 0.99),
                             hiccup=max(steps) - median)
        print(f"{name:15s} {percentile(writes, .5):10.2f} {percentile(writes, .99):10.2f} "
              f"{percentile(waits, .5):9.2f} {percentile(waits, .99):9.2f} {median:9.3f} "
              f"{max(steps):11.3f} {max(steps) - median:8.3f}")
    s, n = figures["staggered"], figures["not staggered"]
    print(f"stagger bench: p99 checkpoint write {s['write99']:.2f} s staggered vs "
          f"{n['write99']:.2f} s not (wait p99 {s['wait99']:.2f} s); co-running job's worst step "
          f"hiccup {s['hiccup']:.2f} s vs {n['hiccup']:.2f} s")


if __name__ == "__main__":
    main()
