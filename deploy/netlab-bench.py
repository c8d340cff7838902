#!/usr/bin/python3
"""The network lab's experiments, on the real daemons and HFReduce (deploy/NETLAB.md):

  classes    a cross-leaf HFReduce allreduce alone, then beside an fs3 read storm through the
             same uplink, with the lab's traffic classes off and on: X = loaded / unloaded
             allreduce time with classes on (Y with them off)
  incast     one client reading batches from storage services on every other host through its
             leaf's port: goodput and p99 batch latency with the read credits (request-to-send)
             pacing on and off; R = p99 paced / p99 unpaced
  placement  three multi-node allreduce jobs (hfreduce-loop) arriving on a fragmented,
             8:1-oversubscribed tree (cluster-lab-place.toml), placed by first-fit, slurm-tree and
             congestion-aware (the scheduler library, through `hai-sim place`) and run together:
             S = mean step time under congestion-aware / under first-fit. hai-sim's performance
             model, calibrated from each job size alone (its compute and allreduce under one leaf,
             and its allreduce across two leaves, which gives its traffic_gbps), predicts every
             job's step time: E = mean |predicted - measured| / measured over every job

  trees      a 6-node allreduce split evenly over two leaves (cluster-lab-place.toml: 8:1
             uplinks), its ranks alternating between them
             and in blocks, with rank-ordered trees (HFREDUCE_TREES=rank) and leaf-aware ones
             (each rank told its leaf as the platform tells it, HAI_LEAF), beside a read storm across the
             uplinks: T = bytes over the uplinks per allreduce, leaf-aware / rank-ordered, and
             the allreduce times' ratio

  deploy/netlab-bench.py [--experiments classes,incast,placement,trees] [--out DIR] [--scale 0.001]
                         [--queue-kb 1024] [--incast-queue-kb 256] [--repeat 1]

Root (namespaces); needs the build (build/ or --build). Writes DIR/results.json, DIR/plot.svg
(per-step allreduce times of the classes experiment) and DIR/placement.svg (each job's measured
and predicted step time) and prints a table per experiment, then the last line:
  network lab: allreduce under storage load, classes on X (off Y) of its unloaded time; incast p99
  paced vs unpaced R; congestion-aware vs first-fit step time S; sim vs measured error E%;
  leaf-aware trees' uplink bytes T (blocks T') of rank order's, allreduce time A (blocks A')
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from ffdeploy import netlab  # (deploy/, this script's folder, is on the path)
from ffdeploy.netlab_cluster import lab_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOPOLOGY = os.path.join(ROOT, "deploy", "config", "cluster-lab.toml")


def say(msg):
    print(f"netlab-bench: {msg}", file=sys.stderr, flush=True)


def with_lab(args, classes, body, queue_kb=None, topology=TOPOLOGY):
    """Runs body(cluster) on a fresh lab of `topology`; tears everything down after."""
    with lab_cluster(args.name, topology, args.build, args.scale, queue_kb or args.queue_kb,
                     classes, work_root=args.work) as cluster:
        return body(cluster)


# ---- classes: allreduce under a storage storm ------------------------------------------------
JOB = ["L00-n00", "L01-n00"]            # one rank on each leaf: the trees cross the uplinks
STORAGE = ["L01-n01", "L01-n02", "L01-n03"]
STORM_CLIENTS = ["L00-n01", "L00-n02"]  # reading from the other leaf: the same uplinks
MGMTD = "L00-n03"


def classes_run(args, classes):
    def body(c):
        mgmtd = c.start_fs3(MGMTD, STORAGE, replication=1)
        files = ["--count", "6", "--mib", "16"]
        c.run(STORM_CLIENTS[0], "fs3-load", "write", "--mgmtd", mgmtd, *files)
        job = dict(bytes_=args.allreduce_bytes, steps=args.steps, warmup=2)
        alone = c.allreduce(JOB, name="alone", **job)
        storm = [c.spawn(n, "fs3-load", "read", "--mgmtd", mgmtd, *files, "--seconds", "0",
                         "--batch", "16", "--unpaced", name=f"storm-{n}")
                 for n in STORM_CLIENTS]
        time.sleep(2)  # the storm fills the uplink
        loaded = c.allreduce(JOB, name="loaded", **job)
        c.stop([(f"storm-{i}", p) for i, p in enumerate(storm)])
        storm_mbit = 0.0
        for p in storm:  # each client's JSON line, printed when it is stopped
            with open(p.log_path) as f:
                lines = [line for line in f.read().splitlines() if line.startswith("{")]
            if not lines:
                raise RuntimeError(f"a storm client printed no result: {p.log_path}")
            storm_mbit += json.loads(lines[-1])["goodput_mbit"]
        return {"alone": alone, "loaded": loaded, "storm_mbit": storm_mbit}
    return with_lab(args, classes, body)


def classes_experiment(args, results):
    rows = []
    for classes in (False, True):
        for _rep in range(args.repeat):
            say(f"classes {'on' if classes else 'off'}: allreduce alone, then under a read storm")
            r = classes_run(args, classes)
            a, loaded = r["alone"]["median_allreduce_ms"], r["loaded"]["median_allreduce_ms"]
            rows.append({"classes": classes, "alone_ms": a, "loaded_ms": loaded, "ratio": loaded / a,
                         "storm_mbit": r["storm_mbit"],
                         "alone_steps": r["alone"]["allreduce_ms"],
                         "loaded_steps": r["loaded"]["allreduce_ms"]})
    results["classes"] = rows
    print(f"\nallreduce of {args.allreduce_bytes} between {JOB[0]} and {JOB[1]} (one uplink each "
          f"way), storm: {len(STORM_CLIENTS)} clients reading from {len(STORAGE)} storage hosts "
          f"across the same uplink")
    print(f"{'classes':8s} {'alone ms':>9s} {'loaded ms':>10s} {'loaded/alone':>13s} "
          f"{'storm Mb/s':>11s}")
    for row in rows:
        print(f"{'on' if row['classes'] else 'off':8s} {row['alone_ms']:9.1f} "
              f"{row['loaded_ms']:10.1f} {row['ratio']:13.2f} {row['storm_mbit']:11.1f}")
    on = statistics.median(r["ratio"] for r in rows if r["classes"])
    off = statistics.median(r["ratio"] for r in rows if not r["classes"])
    return on, off


# ---- trees: leaf-aware against rank-ordered ---------------------------------------------------
# A 6-node job split evenly over the two leaves, in two rank orders: alternating between the leaves
# (a replacement node, or a placement in name order) and in blocks (what the scheduler gives).
TREE_JOBS = {
    "alternating": ["L00-n00", "L01-n00", "L00-n01", "L01-n01", "L00-n02", "L01-n02"],
    "blocks": ["L00-n00", "L00-n01", "L00-n02", "L01-n00", "L01-n01", "L01-n02"],
}
TREE_STORAGE, TREE_CLIENT = ["L01-n03"], "L00-n03"  # cross-traffic over the same uplinks
# 8:1 uplinks (100 Mb/s against four 200 Mb/s node links), so that the uplinks, not the node links,
# are what a tree crossing them too often waits for.
TREE_TOPOLOGY = os.path.join(ROOT, "deploy", "config", "cluster-lab-place.toml")
HFREDUCE_CLASS = "1:10"  # the lab's HTB class of TRAFFIC_CLASSES' first entry, hfreduce


def trees_run(args):
    def body(c):
        mgmtd = c.start_fs3(TREE_CLIENT, TREE_STORAGE, replication=1)
        files = ["--count", "4", "--mib", "16"]
        c.run(TREE_CLIENT, "fs3-load", "write", "--mgmtd", mgmtd, *files)
        storm = c.spawn(TREE_CLIENT, "fs3-load", "read", "--mgmtd", mgmtd, *files, "--seconds", "0",
                        "--batch", "16", "--unpaced", name="storm")
        time.sleep(2)  # the storm fills the uplink
        rows = []
        for order, nodes in TREE_JOBS.items():
            for trees in ("rank", "leaf"):
                env = {"HFREDUCE_TREES": trees}  # the leaves: HAI_LEAF, as the platform sets
                before = c.lab.uplink_bytes(HFREDUCE_CLASS)
                r = c.allreduce(nodes, bytes_=args.allreduce_bytes, steps=args.steps, warmup=2,
                                env=env, name=f"{order}-{trees}")
                sent = c.lab.uplink_bytes(HFREDUCE_CLASS) - before
                allreduces = args.steps + 2
                rows.append({"order": order, "trees": trees, "layout": r.get("trees", ""),
                             "uplink_mib": sent / allreduces / 2**20,
                             "allreduce_ms": r["median_allreduce_ms"],
                             "steps_ms": r["allreduce_ms"]})
                say(f"trees {order}/{trees}: {rows[-1]['uplink_mib']:.1f} MiB over the uplinks "
                    f"per allreduce, {rows[-1]['allreduce_ms']:.0f} ms ({rows[-1]['layout']})")
        c.stop([("storm", storm)])
        return rows
    return with_lab(args, True, body, topology=TREE_TOPOLOGY)


def trees_experiment(args, results):
    rows = []
    for _rep in range(args.repeat):
        say("trees: a 6-node allreduce over two leaves, rank-ordered and leaf-aware trees, beside "
            "a read storm across the uplinks")
        rows += trees_run(args)
    results["trees"] = rows
    print(f"\nallreduce of {args.allreduce_bytes} on 6 nodes, 3 under each of two leaves "
          f"({os.path.basename(TREE_TOPOLOGY)}: 8:1 uplinks), beside an fs3 read storm across the "
          f"uplinks ({TREE_STORAGE[0]} -> {TREE_CLIENT}); bytes over both leaves' uplinks, both "
          f"ways, in HFReduce's traffic class")
    print(f"{'rank order':12s} {'trees':6s} {'uplink MiB':>11s} {'allreduce ms':>13s}  layout")
    for row in rows:
        print(f"{row['order']:12s} {row['trees']:6s} {row['uplink_mib']:11.1f} "
              f"{row['allreduce_ms']:13.1f}  {row['layout']}")
    ratio = lambda key, order: (
        statistics.median(r[key] for r in rows if r["order"] == order and r["trees"] == "leaf") /
        statistics.median(r[key] for r in rows if r["order"] == order and r["trees"] == "rank"))
    return {order: (ratio("uplink_mib", order), ratio("allreduce_ms", order)) for order in TREE_JOBS}


# ---- incast ----------------------------------------------------------------------------------
def incast_experiment(args, results):
    client = "L00-n00"
    storage = [f"L0{leaf}-n0{n}" for leaf in (0, 1) for n in range(4) if (leaf, n) != (0, 0)]

    def body(c):
        mgmtd = c.start_fs3(client, storage, replication=1)
        files = ["--count", str(len(storage)), "--mib", "8"]
        c.run(client, "fs3-load", "write", "--mgmtd", mgmtd, *files)
        out = {}
        for mode, flags in (("unpaced", ["--unpaced"]),
                            ("paced", ["--max-inflight-kib", str(args.incast_credit_kib)])):
            for _rep in range(args.repeat):
                say(f"incast: {len(storage)} storage hosts to one client, {mode}")
                r = json.loads(c.run(client, "fs3-load", "read", "--mgmtd", mgmtd, *files,
                                     "--batch", str(args.incast_batch), "--op-kib", str(args.incast_op_kib),
                                     "--seconds", str(args.incast_seconds), *flags))
                out.setdefault(mode, []).append(r)
        return out
    out = with_lab(args, False, body, queue_kb=args.incast_queue_kb)
    results["incast"] = out
    print(f"\nincast: {len(storage)} storage hosts answering one client's batches of {args.incast_batch} x "
          f"{args.incast_op_kib} KiB through its 200 Mb/s port ({args.incast_queue_kb} KiB switch "
          f"buffer), read credits {args.incast_credit_kib} KiB when paced")
    print(f"{'mode':8s} {'goodput Mb/s':>13s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s} "
          f"{'peak in flight':>15s}")
    for mode in ("unpaced", "paced"):
        for r in out[mode]:
            print(f"{mode:8s} {r['goodput_mbit']:13.1f} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} "
                  f"{r['max_ms']:8.1f} {r['peak_inflight_bytes'] / 1024:12.0f} KiB")
    p99 = {m: statistics.median(r["p99_ms"] for r in out[m]) for m in out}
    return p99["paced"] / p99["unpaced"]


# ---- placement: the policies' placements on real traffic -------------------------------------
PLACE_TOPOLOGY = os.path.join(ROOT, "deploy", "config", "cluster-lab-place.toml")
# The cluster as the jobs find it: single-node jobs without traffic hold a node in two of the three
# leaves. Placement only matters on a fragmented cluster: on an empty one every policy keeps these
# jobs under one leaf each.
PLACE_BUSY = ["L00-n01", "L01-n02"]
PLACE_JOBS = [2, 3, 3]  # nodes of each job, in arrival order
POLICIES = ["first-fit", "slurm-tree", "congestion-aware"]


def hai_sim_place(args, model_by_size):
    """Each policy's placement of PLACE_JOBS on the lab topology, from the scheduler library
    (hai-sim place), with the performance model's slowdown of each job's communication.
    model_by_size: job size -> (traffic_gbps, bandwidth-bound share)."""
    jobs = [a for n in PLACE_JOBS
            for a in ("--job", f"{n}:{model_by_size[n][0]:.6f}:{model_by_size[n][1]:.6f}")]
    r = subprocess.run(
        [os.path.join(args.build, "scheduler", "hai-sim"), "place", "--cluster", PLACE_TOPOLOGY,
         "--busy", ",".join(PLACE_BUSY), "--policies", ",".join(POLICIES), *jobs],
        capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"hai-sim place failed: {r.stderr.strip()}")
    return {p["policy"]: p["jobs"] for p in json.loads(r.stdout)["policies"]}


def mean_step(result):
    """A job's step time: the mean of its timed steps (its throughput over the window)."""
    return statistics.mean(result["step_ms"])


def placement_run(args):
    with open(PLACE_TOPOLOGY, "rb") as f:
        topo = netlab.tomllib.load(f)
    node_gbps = float(topo["node_link_gbps"])
    uplink_gbps = float(topo["zones"][0]["leaves"][0]["uplink_gbps"])
    job = dict(bytes_=args.allreduce_bytes, compute_ms=args.place_compute_ms, warmup=2)

    def body(c):
        # Calibration of the model, per job size, each job alone. Under one leaf: its compute and
        # its allreduce (f = allreduce / step). Then with rank 0 on another leaf: its two tree
        # edges to rank 0 cross the uplinks, which the model loads with the job's traffic_gbps.
        # A job sends at its node link's rate when nothing else limits it, so traffic_gbps is
        # node_link_gbps, and alone across the uplink its load / capacity is node_link / uplink
        # (2 here): the allreduce slowing by s there says that a share b = (s - 1) / (2 - 1) of it
        # is bound by bandwidth (the rest is latency and the CPU's part).
        cal = {}
        for n in sorted(set(PLACE_JOBS)):
            say(f"placement: calibrating with a {n}-node job alone, under one leaf and across two")
            inside = c.allreduce([f"L02-n{i:02d}" for i in range(n)], steps=args.steps,
                                 name=f"inside{n}", **job)
            across = c.allreduce(["L00-n00"] + [f"L01-n{i:02d}" for i in range(n - 1)],
                                 steps=args.steps, name=f"across{n}", **job)
            comm = statistics.median(inside["allreduce_ms"])
            step = mean_step(inside)
            slowdown = statistics.median(across["allreduce_ms"]) / comm
            share = min(1.0, max(0.0, (slowdown - 1) / (node_gbps / uplink_gbps - 1)))
            cal[n] = {"step_ms": step, "allreduce_ms": comm, "compute_ms": step - comm,
                      "comm_fraction": comm / step, "across_step_ms": mean_step(across),
                      "across_slowdown": slowdown, "traffic_gbps": node_gbps,
                      "bandwidth_share": share}
        placed = hai_sim_place(args, {n: (cal[n]["traffic_gbps"], cal[n]["bandwidth_share"])
                                      for n in cal})
        runs = {}
        for policy in POLICIES:
            say(f"placement: {policy}: " + "; ".join(",".join(j["nodes"]) for j in placed[policy]))
            procs = [c.allreduce_job(j["nodes"], seconds=args.place_seconds,
                                     name=f"{policy}-j{j['job']}", **job) for j in placed[policy]]
            jobs = []
            for j, p in zip(placed[policy], procs):
                r = c.wait_job(p)
                n = len(j["nodes"])
                predicted = cal[n]["compute_ms"] + cal[n]["allreduce_ms"] * j["slowdown"]
                jobs.append({**j, "measured_ms": mean_step(r), "predicted_ms": predicted,
                             "alone_ms": cal[n]["step_ms"], "steps": r["step_ms"]})
            runs[policy] = jobs
        return {"calibration": cal, "uplink_gbps": uplink_gbps, "node_gbps": node_gbps,
                "policies": runs}

    return with_lab(args, False, body, topology=PLACE_TOPOLOGY)


def placement_experiment(args, results):
    reps = [placement_run(args) for _ in range(args.repeat)]
    results["placement"] = reps
    print(f"\nplacement: jobs of {', '.join(map(str, PLACE_JOBS))} nodes arriving in that order on "
          f"{os.path.basename(PLACE_TOPOLOGY)} (3 leaves x 4 hosts, 8:1 uplinks) with "
          f"{', '.join(PLACE_BUSY)} busy; each step computes {args.place_compute_ms:g} ms and "
          f"allreduces {args.allreduce_bytes}; all jobs run together for {args.place_seconds:g} s")
    s_values, errors = [], []
    for rep in reps:
        print("calibrated model (each job size alone): " + "; ".join(
            f"{n} nodes: {c['step_ms']:.0f} ms/step under one leaf, allreduce {c['allreduce_ms']:.0f} "
            f"(f = {c['comm_fraction']:.2f}), across two leaves allreduce x{c['across_slowdown']:.2f} "
            f"(b = {c['bandwidth_share']:.2f})" for n, c in sorted(rep["calibration"].items())) +
            f"; traffic_gbps {rep['node_gbps']:g} (node link), uplink {rep['uplink_gbps']:g}")
        print(f"{'policy':17s} {'job':>3s}  {'nodes':30s} {'leaves':>6s} {'alone ms':>9s} "
              f"{'measured ms':>12s} {'sim ms':>8s} {'error':>7s}")
        means = {}
        for policy in POLICIES:
            for j in rep["policies"][policy]:
                err = (j["predicted_ms"] - j["measured_ms"]) / j["measured_ms"]
                errors.append(abs(err))
                print(f"{policy:17s} {j['job']:3d}  {','.join(j['nodes']):30s} {j['leaves']:6d} "
                      f"{j['alone_ms']:9.0f} {j['measured_ms']:12.0f} {j['predicted_ms']:8.0f} "
                      f"{100 * err:+6.1f}%")
            jobs = rep["policies"][policy]
            means[policy] = (statistics.mean(j["measured_ms"] for j in jobs),
                             statistics.mean(j["predicted_ms"] for j in jobs))
        print(f"{'policy':17s} {'mean step ms':>13s} {'vs first-fit':>13s} {'sim mean ms':>12s} "
              f"{'sim vs first-fit':>17s}")
        for policy in POLICIES:
            m, p = means[policy]
            print(f"{policy:17s} {m:13.0f} {m / means['first-fit'][0]:13.2f} {p:12.0f} "
                  f"{p / means['first-fit'][1]:17.2f}")
        s_values.append(means["congestion-aware"][0] / means["first-fit"][0])
    print(f"sim vs measured step time: mean error {100 * statistics.mean(errors):.1f}%, "
          f"worst {100 * max(errors):.1f}% (over every job of every policy)")
    return statistics.median(s_values), 100 * statistics.mean(errors)


# ---- plot ------------------------------------------------------------------------------------
def plot(results, path):
    rows = results.get("classes") or []
    if not rows:
        return
    series = []
    for row in rows:
        name = "classes " + ("on" if row["classes"] else "off")
        series.append((name + ", alone", row["alone_steps"], "#888888" if not row["classes"] else "#4a7"))
        series.append((name + ", storage storm", row["loaded_steps"],
                       "#c33" if not row["classes"] else "#27c"))
    w, h, pad = 720, 360, 50
    top = max(max(s[1]) for s in series) * 1.1
    n = max(len(s[1]) for s in series)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="12">', f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle">HFReduce allreduce per step, across one '
           f'uplink, alone and beside an fs3 read storm</text>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - 10}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="30" x2="{pad}" y2="{h - pad}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 15}" text-anchor="middle">step</text>',
           f'<text x="12" y="{h / 2}" transform="rotate(-90 12 {h / 2})" text-anchor="middle">ms</text>']
    for k in range(5):
        v = top * k / 4
        y = h - pad - (h - pad - 30) * k / 4
        out.append(f'<text x="{pad - 5}" y="{y + 4}" text-anchor="end">{v:.0f}</text>')
    for i, (name, ys, color) in enumerate(series):
        pts = " ".join(f"{pad + (w - pad - 10) * j / max(n - 1, 1):.1f},"
                       f"{h - pad - (h - pad - 30) * y / top:.1f}" for j, y in enumerate(ys))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>')
        out.append(f'<text x="{w - 200}" y="{40 + 15 * i}" fill="{color}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def plot_placement(results, path):
    """Bars: each job's measured step time beside hai-sim's prediction, per policy."""
    reps = results.get("placement") or []
    if not reps:
        return
    rep = reps[0]
    bars = []  # (label, measured, predicted)
    for policy in POLICIES:
        for j in rep["policies"][policy]:
            bars.append((f"{policy} job {j['job']} ({j['leaves']} {'leaves' if j['leaves'] > 1 else 'leaf'})",
                         j["measured_ms"], j["predicted_ms"]))
    w, pad, row = 760, 260, 26
    h = 60 + row * len(bars) + 30
    top = max(max(m, p) for _, m, p in bars) * 1.1
    x = lambda v: pad + (w - pad - 20) * v / top
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="12">', f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle">Step time of each job as placed by each '
           f'policy: measured on the lab, and hai-sim\'s model</text>',
           f'<rect x="{pad}" y="28" width="12" height="10" fill="#27c"/>'
           f'<text x="{pad + 16}" y="37">measured (ms)</text>',
           f'<rect x="{pad + 130}" y="28" width="12" height="10" fill="#e93"/>'
           f'<text x="{pad + 146}" y="37">hai-sim, calibrated</text>']
    for i, (label, m, p) in enumerate(bars):
        y = 50 + row * i
        out.append(f'<text x="{pad - 6}" y="{y + 14}" text-anchor="end">{label}</text>')
        out.append(f'<rect x="{pad}" y="{y + 2}" width="{x(m) - pad:.1f}" height="10" fill="#27c"/>')
        out.append(f'<rect x="{pad}" y="{y + 12}" width="{x(p) - pad:.1f}" height="10" fill="#e93"/>')
        out.append(f'<text x="{x(max(m, p)) + 4:.1f}" y="{y + 16}">{m:.0f} / {p:.0f}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
    p = argparse.ArgumentParser(description="The network lab's experiments.")
    p.add_argument("--experiments", default="classes,incast,placement,trees")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default="/tmp/netlab-bench")
    p.add_argument("--work", default="/tmp", help="where the daemons' data goes")
    p.add_argument("--name", default="flbench")
    p.add_argument("--scale", type=float, default=0.001)
    # Deep enough that the allreduce alone sees no drop: Fire-Flyer's InfiniBand is lossless
    # (credit flow control), and a drop costs a TCP flow 200 ms (the minimum retransmission
    # timeout); with 256 KiB a 4 MiB allreduce alone took 244 to 975 ms, with 1 MiB 296 to 330.
    p.add_argument("--queue-kb", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--allreduce-bytes", default="4M")
    p.add_argument("--incast-seconds", type=float, default=20)
    p.add_argument("--incast-batch", type=int, default=16)
    # A shallow port buffer, as switches have: the incast condition (many senders, one port).
    p.add_argument("--incast-queue-kb", type=int, default=256)
    p.add_argument("--incast-credit-kib", type=int, default=512)
    p.add_argument("--incast-op-kib", type=int, default=1024)
    # About half of a job's step is communication alone under one leaf (0.5 for 2 nodes, 0.65 for
    # 3): the share the performance model's allreduce_comm_fraction stands for.
    p.add_argument("--place-compute-ms", type=float, default=300)
    p.add_argument("--place-seconds", type=float, default=25)
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("netlab-bench: run as root (network namespaces)")
    wanted = [e for e in args.experiments.split(",") if e]
    for e in wanted:
        if e not in ("classes", "incast", "placement", "trees"):
            sys.exit(f"netlab-bench: unknown experiment '{e}' (classes, incast, placement, trees)")
    os.makedirs(args.out, exist_ok=True)
    results = {"scale": args.scale, "queue_kb": args.queue_kb}
    x = y = r = speed = error = trees = None
    if "classes" in wanted:
        x, y = classes_experiment(args, results)
    if "incast" in wanted:
        r = incast_experiment(args, results)
    if "placement" in wanted:
        speed, error = placement_experiment(args, results)
    if "trees" in wanted:
        trees = trees_experiment(args, results)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    plot(results, os.path.join(args.out, "plot.svg"))
    plot_placement(results, os.path.join(args.out, "placement.svg"))
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"
    print(f"\nresults: {args.out}/results.json, plots: {args.out}/plot.svg, "
          f"{args.out}/placement.svg")
    print(f"network lab: allreduce under storage load, classes on {fmt(x)} (off {fmt(y)}) of its "
          f"unloaded time; incast p99 paced vs unpaced {fmt(r)}; congestion-aware vs first-fit step "
          f"time {fmt(speed)}; sim vs measured error {'n/a' if error is None else f'{error:.1f}'}%; "
          f"leaf-aware trees' uplink bytes "
          + ("n/a" if trees is None else
             f"{fmt(trees['alternating'][0])} (blocks {fmt(trees['blocks'][0])}) of rank order's, "
             f"allreduce time {fmt(trees['alternating'][1])} (blocks {fmt(trees['blocks'][1])})"))


if __name__ == "__main__":
    main()
