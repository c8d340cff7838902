#!/usr/bin/env python3
"""torch.distributed backends side by side: "hfreduce" against "gloo", in one run, same harness.

    .venv/bin/python haiscale/bench/torch_backends.py                       # 2x2 and 2x4
    .venv/bin/python haiscale/bench/torch_backends.py --layouts 2x2 --sizes 1M,64M --iters 5

For each layout (emulated nodes x ranks per node, HFREDUCE_NODE_ID; every rank is a process on
this machine, and gloo sees them all over loopback TCP) and each backend it starts the ranks,
which time (median of --iters after --warmup, nccl-tests style):
  - all_reduce, all_gather_into_tensor and reduce_scatter_tensor of fp32 buffers whose total size
    is each of --sizes (algbw = size / time; busbw = algbw x 2(n-1)/n for allreduce, x (n-1)/n for
    the other two);
  - the training step of a small GPT (haiscale.models.GPT, random tokens) under stock
    torch.nn.parallel.DistributedDataParallel, p50 and p90 over --ddp-steps, beside a one-rank
    step without DDP (the compute alone);
  - under stock DDP, the overlap: per gradient bucket, the share of its allreduce (launch to
    completion, timed by a comm hook around torch's allreduce hook) that ran while backward
    still computed (until the last bucket was launched), and what a step waited for the
    reductions after its compute.
The last line is the summary for --summary (layout) and --summary-size:
  torch backends: hfreduce vs gloo allreduce 64MiB ratio A, reduce-scatter ratio B, allgather ratio C, ddp step ratio D
(ratios > 1 mean hfreduce is faster).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

OPS = ["allreduce", "allgather", "reduce_scatter"]


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def size_name(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- one rank -----------------------------------------------------------------------------------

def time_op(dist, torch, op, size, iters, warmup):
    world = dist.get_world_size()
    n = size // 4
    n -= n % world
    # 2.13 renamed these two (the old names warn on every call).
    all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
    if op == "allreduce":
        buf = torch.ones(n)
        run = lambda: dist.all_reduce(buf)  # noqa: E731
    elif op == "allgather":
        out, inp = torch.empty(n), torch.ones(n // world)
        run = lambda: all_gather(out, inp)  # noqa: E731
    else:
        out, inp = torch.empty(n // world), torch.ones(n)
        run = lambda: reduce_scatter(out, inp)  # noqa: E731
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    # A collective ends when its slowest rank does.
    t = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def gpt_config(args):
    from haiscale.models import GPTConfig

    return GPTConfig(vocab_size=args.gpt_vocab, d_model=args.gpt_dim, n_layers=args.gpt_layers,
                     n_heads=max(1, args.gpt_dim // 64))


def ddp_steps(dist, torch, args, steps, warmup):
    from haiscale.models import GPT

    torch.manual_seed(0)
    config = gpt_config(args)
    if args.ddp_impl == "haiscale":
        from haiscale.ddp import DistributedDataParallel
    else:
        DistributedDataParallel = torch.nn.parallel.DistributedDataParallel
    model = DistributedDataParallel(GPT(config))
    # Each bucket's allreduce, timed: (bucket index, bytes, launched, completed), this step.
    buckets = []
    if args.ddp_impl == "torch":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def timed_allreduce(state, bucket):
            launched = time.perf_counter()
            index, nbytes = bucket.index(), bucket.buffer().numel() * bucket.buffer().element_size()

            def done(fut):
                buckets.append((index, nbytes, launched, time.perf_counter()))
                return fut.value()
            return default_hooks.allreduce_hook(state, bucket).then(done)
        model.register_comm_hook(None, timed_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(dist.get_rank())
    times, overlap = [], []
    for step in range(warmup + steps):
        tokens = torch.randint(config.vocab_size, (args.gpt_batch, config.seq_len + 1), generator=g)
        dist.barrier()
        buckets.clear()
        t0 = time.perf_counter()
        opt.zero_grad()
        model(tokens[:, :-1], tokens[:, 1:]).backward()
        backward_done = time.perf_counter()
        opt.step()
        t = time.perf_counter() - t0
        if step >= warmup:
            times.append(t)
            if buckets:
                # Backward computes until the last bucket is ready (launched); what of each
                # allreduce ran before that was hidden.
                compute_done = max(b[2] for b in buckets)
                overlap.append({"exposed": backward_done - compute_done,
                                "buckets": [[i, n, (min(d, compute_done) - s) / max(d - s, 1e-9), d - s, s - t0]
                                            for i, n, s, d in buckets]})
    params = sum(p.numel() for p in model.parameters())
    return times, params, overlap


def rank_main(args):
    import torch
    import torch.distributed as dist

    import haiscale  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    results = {"ops": {}, "ddp": None}
    for op in [o for o in args.ops.split(",") if o]:
        for size in [parse_size(s) for s in args.sizes.split(",")]:
            iters = args.iters if size < (64 << 20) else max(3, args.iters // 2)
            results["ops"][f"{op}/{size}"] = time_op(dist, torch, op, size, iters, args.warmup)
    if args.ddp_steps > 0:
        times, params, overlap = ddp_steps(dist, torch, args, args.ddp_steps, 2)
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        results["ddp"] = {"times": t.tolist(), "params": params, "overlap": overlap}
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(results), flush=True)
    dist.destroy_process_group()


def baseline_step(args):
    """One rank, no DDP: the compute of a step alone."""
    import torch

    from haiscale.models import GPT

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = gpt_config(args)
    model = GPT(config)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for step in range(2 + args.ddp_steps):
        tokens = torch.randint(config.vocab_size, (args.gpt_batch, config.seq_len + 1))
        t0 = time.perf_counter()
        opt.zero_grad()
        model(tokens[:, :-1], tokens[:, 1:]).backward()
        opt.step()
        if step >= 2:
            times.append(time.perf_counter() - t0)
    print("RESULT " + json.dumps({"times": times}), flush=True)


# ---- the driver ---------------------------------------------------------------------------------

def run_ranks(cmd, nodes, per_node, what):
    """Runs `cmd` as every rank of nodes x per_node emulated nodes (HFREDUCE_NODE_ID) and returns
    the RESULT json one of them printed; exits naming the ranks that failed."""
    world = nodes * per_node
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_node),
                   LOCAL_WORLD_SIZE=str(per_node), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   HFREDUCE_NODE_ID=f"node{rank // per_node}", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    result = None
    failed = []
    for rank, p in enumerate(procs):
        out, _ = p.communicate()
        if p.returncode != 0:
            failed.append(f"rank {rank} exited {p.returncode}:\n{out[-3000:]}")
        for line in out.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
    if failed:
        raise SystemExit(f"{what} on {nodes}x{per_node} failed:\n" + "\n".join(failed))
    return result


def launch(args, backend, nodes, per_node):
    cmd = [sys.executable, __file__, "--rank-worker", "--backend", backend, "--ops", args.ops,
           "--sizes", args.sizes, "--iters", str(args.iters), "--warmup", str(args.warmup),
           "--ddp-steps", str(args.ddp_steps), "--ddp-impl", args.ddp_impl] + gpt_args(args)
    return run_ranks(cmd, nodes, per_node, f"torch_backends: {backend}")


def gpt_args(args):
    return ["--gpt-dim", str(args.gpt_dim), "--gpt-layers", str(args.gpt_layers),
            "--gpt-vocab", str(args.gpt_vocab), "--gpt-batch", str(args.gpt_batch)]


def busbw_factor(op, world):
    return 2 * (world - 1) / world if op == "allreduce" else (world - 1) / world


def print_overlap(figures, layouts, backends):
    """Per bucket (in launch order), rank 0's median over the steps: size, allreduce time, and
    the share of it hidden behind backward's compute; and the wait after the compute."""
    rows = []
    for nodes, per_node in layouts:
        for b in backends:
            steps = figures[(f"{nodes}x{per_node}", b)]["ddp"].get("overlap") or []
            if not steps:
                continue
            per_bucket = {}
            for s in steps:
                for i, n, hidden, seconds, launched in s["buckets"]:
                    per_bucket.setdefault(i, (n, [], [], []))
                    per_bucket[i][1].append(hidden)
                    per_bucket[i][2].append(seconds)
                    per_bucket[i][3].append(launched)
            exposed = statistics.median(s["exposed"] for s in steps)
            in_order = sorted(per_bucket.items(), key=lambda kv: statistics.median(kv[1][3]))
            cells = "  ".join(f"#{i} {n / 2**20:.1f}MiB {statistics.median(sec) * 1e3:.1f}ms "
                              f"{statistics.median(h) * 100:.0f}%"
                              for i, (n, h, sec, _) in in_order)
            rows.append(f"{f'{nodes}x{per_node}':<7}{b:<10}{exposed * 1e3:>10.1f}  {cells}")
    if rows:
        print("\noverlap (stock DDP; rank 0, median over the steps): the wait after backward's compute, "
              "then per bucket in launch order: size, allreduce time, share hidden behind the compute")
        print(f"{'layout':<7}{'backend':<10}{'wait ms':>10}  buckets")
        for r in rows:
            print(r)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layouts", default="2x2,2x4", help="nodes x ranks per node, comma-separated")
    p.add_argument("--backends", default="hfreduce,gloo")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--sizes", default="1M,4M,16M,64M,256M", help="total buffer sizes")
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--ddp-steps", type=int, default=10)
    p.add_argument("--ddp-impl", choices=["torch", "haiscale"], default="torch",
                   help="the DDP the step uses: torch's (the default) or haiscale.ddp")
    p.add_argument("--gpt-dim", type=int, default=256, help="GPT width (heads of 64)")
    p.add_argument("--gpt-layers", type=int, default=4)
    p.add_argument("--gpt-vocab", type=int, default=8192)
    p.add_argument("--gpt-batch", type=int, default=2, help="sequences of 64 tokens per rank")
    p.add_argument("--summary", default="2x4", help="the layout of the last line")
    p.add_argument("--summary-size", default="64M")
    p.add_argument("--json", help="also write every figure to this file")
    p.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--baseline-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_worker:
        return rank_main(args)
    if args.baseline_worker:
        return baseline_step(args)

    backends = args.backends.split(",")
    layouts = [tuple(int(v) for v in layout.split("x")) for layout in args.layouts.split(",")]
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    ops = [o for o in args.ops.split(",") if o]
    started = time.time()
    figures = {}
    for nodes, per_node in layouts:
        for backend in backends:
            print(f"torch_backends: {backend} on {nodes}x{per_node} ...", file=sys.stderr, flush=True)
            figures[(f"{nodes}x{per_node}", backend)] = launch(args, backend, nodes, per_node)
    baseline = None
    if args.ddp_steps > 0:
        out = subprocess.run([sys.executable, __file__, "--baseline-worker", "--ddp-steps", str(args.ddp_steps)]
                             + gpt_args(args),
                             capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        for line in out.stdout.splitlines():
            if line.startswith("RESULT "):
                baseline = json.loads(line[7:])["times"]

    print(f"torch collectives, fp32, median of {args.iters} after {args.warmup} warm-up "
          f"(>= 64 MiB: {max(3, args.iters // 2)}); every rank a process on this {os.cpu_count()}-core machine")
    header = f"{'layout':<7}{'op':<15}{'size':>8}" + "".join(
        f"{b + ' ms':>14}{b + ' busbw':>16}" for b in backends) + f"{'ratio':>8}"
    print(header)
    for nodes, per_node in layouts:
        world = nodes * per_node
        layout = f"{nodes}x{per_node}"
        for op in ops:
            for size in sizes:
                row = f"{layout:<7}{op:<15}{size_name(size):>8}"
                ts = []
                for b in backends:
                    t = figures[(layout, b)]["ops"][f"{op}/{size}"]
                    ts.append(t)
                    busbw = size / t * busbw_factor(op, world) / 1e9
                    row += f"{t * 1e3:>14.2f}{busbw:>11.2f} GB/s"
                ratio = ts[1] / ts[0] if len(ts) > 1 else 1.0
                print(row + f"{ratio:>8.2f}")
    if args.ddp_steps > 0:
        print()
        params = figures[(f"{layouts[0][0]}x{layouts[0][1]}", backends[0])]["ddp"]["params"]
        print(f"GPT ({params / 1e6:.2f} M parameters: width {args.gpt_dim}, {args.gpt_layers} layers, "
              f"vocabulary {args.gpt_vocab}; batch {args.gpt_batch} x 64 tokens per rank) step time, "
              f"{'stock' if args.ddp_impl == 'torch' else 'haiscale.ddp'} DDP, {args.ddp_steps} steps after 2 warm-up")
        print(f"{'layout':<7}{'backend':<10}{'p50 ms':>10}{'p90 ms':>10}")
        if baseline:
            print(f"{'1x1':<7}{'no DDP':<10}{statistics.median(baseline) * 1e3:>10.1f}"
                  f"{sorted(baseline)[int(0.9 * (len(baseline) - 1))] * 1e3:>10.1f}")
        for nodes, per_node in layouts:
            for b in backends:
                t = sorted(figures[(f"{nodes}x{per_node}", b)]["ddp"]["times"])
                print(f"{f'{nodes}x{per_node}':<7}{b:<10}{statistics.median(t) * 1e3:>10.1f}"
                      f"{t[int(0.9 * (len(t) - 1))] * 1e3:>10.1f}")
        print_overlap(figures, layouts, backends)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{k[0]}/{k[1]}": v for k, v in figures.items()} | {"baseline": baseline}, f, indent=1)
    print(f"\n(took {time.time() - started:.0f} s)")
    if len(backends) >= 2:
        summary = args.summary
        print(f"summary layout {summary}, size {args.summary_size}:")
        if (summary, backends[0]) not in figures:
            summary = f"{layouts[-1][0]}x{layouts[-1][1]}"
        s = parse_size(args.summary_size)
        ratio = {}
        for op in ops:
            key = f"{op}/{s}"
            a, b = figures[(summary, backends[0])]["ops"].get(key), figures[(summary, backends[1])]["ops"].get(key)
            ratio[op] = b / a if a and b else float("nan")
        d = float("nan")
        if args.ddp_steps > 0:
            d = statistics.median(figures[(summary, backends[1])]["ddp"]["times"]) / statistics.median(
                figures[(summary, backends[0])]["ddp"]["times"])
        print(f"torch backends: {backends[0]} vs {backends[1]} allreduce {size_name(s)} ratio "
              f"{ratio.get('allreduce', float('nan')):.2f}, "
              f"reduce-scatter ratio {ratio.get('reduce_scatter', float('nan')):.2f}, "
              f"allgather ratio {ratio.get('allgather', float('nan')):.2f}, ddp step ratio {d:.2f}")


if __name__ == "__main__":
    main()
