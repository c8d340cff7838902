#!/usr/bin/python3
"""The network lab's experiments, on the real daemons and HFReduce (deploy/NETLAB.md):

  classes    a cross-leaf HFReduce allreduce alone, then beside an fs3 read storm through the
             same uplink, with the lab's traffic classes off and on: X = loaded / unloaded
             allreduce time with classes on (Y with them off)
  incast     one client reading batches from storage services on every other host through its
             leaf's port: goodput and p99 batch latency with the read credits (request-to-send)
             pacing on and off; R = p99 paced / p99 unpaced

  deploy/netlab-bench.py [--experiments classes,incast] [--out DIR] [--scale 0.001]
                         [--queue-kb 1024] [--incast-queue-kb 256] [--repeat 1]

Root (namespaces); needs the build (build/ or --build). Writes DIR/results.json and DIR/plot.svg
(per-step allreduce times of the classes experiment) and prints a table per experiment, then the
last line:
  network lab: allreduce under storage load, classes on X (off Y) of its unloaded time; incast p99
  paced vs unpaced R; congestion-aware vs first-fit step time S; sim vs measured error E%
(S and E are "n/a" until the placement experiment exists.)
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "deploy"))
import netlab  # noqa: E402
from netlab_cluster import LabCluster  # noqa: E402

TOPOLOGY = os.path.join(ROOT, "deploy", "config", "cluster-lab.toml")


def say(msg):
    print(f"netlab-bench: {msg}", file=sys.stderr, flush=True)


def with_lab(args, classes, body, queue_kb=None):
    lab = netlab.Lab(args.name)
    lab.up(netlab.load_topology(TOPOLOGY, args.scale), queue_kb or args.queue_kb, classes)
    work = tempfile.mkdtemp(prefix="netlab-bench-", dir=args.work)
    cluster = LabCluster(lab, args.build, work)
    try:
        return body(cluster)
    finally:
        cluster.stop()
        lab.down()
        shutil.rmtree(work, ignore_errors=True)


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
                lines = [l for l in f.read().splitlines() if l.startswith("{")]
            if not lines:
                raise RuntimeError(f"a storm client printed no result: {p.log_path}")
            storm_mbit += json.loads(lines[-1])["goodput_mbit"]
        return {"alone": alone, "loaded": loaded, "storm_mbit": storm_mbit}
    return with_lab(args, classes, body)


def classes_experiment(args, results):
    rows = []
    for classes in (False, True):
        for rep in range(args.repeat):
            say(f"classes {'on' if classes else 'off'}: allreduce alone, then under a read storm")
            r = classes_run(args, classes)
            a, l = r["alone"]["median_allreduce_ms"], r["loaded"]["median_allreduce_ms"]
            rows.append({"classes": classes, "alone_ms": a, "loaded_ms": l, "ratio": l / a,
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


# ---- incast ----------------------------------------------------------------------------------
def incast_experiment(args, results):
    client = "L00-n00"
    storage = [f"L0{l}-n0{n}" for l in (0, 1) for n in range(4) if (l, n) != (0, 0)]

    def body(c):
        mgmtd = c.start_fs3(client, storage, replication=1)
        files = ["--count", str(len(storage)), "--mib", "8"]
        c.run(client, "fs3-load", "write", "--mgmtd", mgmtd, *files)
        out = {}
        for mode, flags in (("unpaced", ["--unpaced"]),
                            ("paced", ["--max-inflight-kib", str(args.incast_credit_kib)])):
            for rep in range(args.repeat):
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


def main():
    p = argparse.ArgumentParser(description="The network lab's experiments.")
    p.add_argument("--experiments", default="classes,incast")
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
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("netlab-bench: run as root (network namespaces)")
    wanted = [e for e in args.experiments.split(",") if e]
    for e in wanted:
        if e not in ("classes", "incast"):
            sys.exit(f"netlab-bench: unknown experiment '{e}' (classes, incast)")
    os.makedirs(args.out, exist_ok=True)
    results = {"scale": args.scale, "queue_kb": args.queue_kb}
    x = y = r = None
    if "classes" in wanted:
        x, y = classes_experiment(args, results)
    if "incast" in wanted:
        r = incast_experiment(args, results)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    plot(results, os.path.join(args.out, "plot.svg"))
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"
    print(f"\nresults: {args.out}/results.json, plot: {args.out}/plot.svg")
    print(f"network lab: allreduce under storage load, classes on {fmt(x)} (off {fmt(y)}) of its "
          f"unloaded time; incast p99 paced vs unpaced {fmt(r)}; congestion-aware vs first-fit step "
          f"time n/a; sim vs measured error n/a%")


if __name__ == "__main__":
    main()
