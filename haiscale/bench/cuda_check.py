#!/usr/bin/env python3
"""The "hfreduce" backend on CUDA tensors, for a machine with a GPU (every rank may share one).

    python haiscale/bench/cuda_check.py [--layouts 1x2,2x2] [--size 64M]

For each layout (emulated nodes x ranks per node) it starts the ranks, each on GPU
(local rank mod GPUs), and checks against exact values computed on the CPU: all_reduce (sum,
avg) in fp32 and bf16, reduce_scatter_tensor, all_gather_into_tensor, broadcast,
all_to_all_single, send/recv, and work queued on a side stream before and after a collective
(the collective must follow the stream's earlier work, and later work must see its result);
then three steps of stock DDP on a GPT on the GPU against one process on the full batch. Last,
all_reduce of --size on CUDA tensors timed through "hfreduce" and "gloo" (NCCL needs a GPU per
rank, so on one GPU it cannot run several ranks). Exits non-zero on any mismatch.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checks(dist, torch):
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    failures = []

    def same(what, got, want):
        if not torch.equal(got.cpu(), want.cpu()):
            failures.append(f"rank {rank}: {what}: got {got.flatten()[:4].tolist()}, "
                            f"want {want.flatten()[:4].tolist()}")

    n = 300_007
    for dtype in (torch.float32, torch.bfloat16):
        vals = [((torch.arange(n) * 7 + r * 5) % 9 - 4).to(dtype) for r in range(world)]
        t = vals[rank].to(dev)
        dist.all_reduce(t)
        same(f"all_reduce sum {dtype}", t, torch.stack([v.double() for v in vals]).sum(0).to(dtype))
        t = vals[rank].to(dev)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        acc = torch.float32
        same(f"all_reduce avg {dtype}", t, (torch.stack([v.double() for v in vals]).sum(0).to(acc) / world).to(dtype))
    per = 40_003
    full = [((torch.arange(per * world) + r) % 11).float() for r in range(world)]
    out = torch.empty(per, device=dev)
    dist.reduce_scatter_tensor(out, full[rank].to(dev))
    same("reduce_scatter_tensor", out, torch.stack(full).sum(0)[rank * per:(rank + 1) * per])
    big = torch.empty(per * world, device=dev)
    dist.all_gather_into_tensor(big, (torch.arange(per) + 1000 * rank).float().to(dev))
    same("all_gather_into_tensor", big, torch.cat([(torch.arange(per) + 1000 * r).float() for r in range(world)]))
    for root in range(world):
        t = torch.full((5000,), float(rank), device=dev)
        dist.broadcast(t, root)
        same(f"broadcast from {root}", t, torch.full((5000,), float(root)))
    inp = (torch.arange(world * 4) + 100 * rank).float().to(dev)
    out = torch.empty(world * 4, device=dev)
    dist.all_to_all_single(out, inp)
    same("all_to_all_single", out,
         torch.cat([(torch.arange(world * 4) + 100 * r).float()[4 * rank:4 * rank + 4] for r in range(world)]))
    if world > 1:
        right, left = (rank + 1) % world, (rank - 1) % world
        w = dist.isend(torch.full((1000,), float(rank), device=dev), right, tag=5)
        got = torch.empty(1000, device=dev)
        dist.recv(got, left, tag=5)
        w.wait()
        same("send/recv", got, torch.full((1000,), float(left)))
    # Ordering with the caller's current stream: a side stream doubles, reduces, then adds one.
    side = torch.cuda.Stream()
    base = torch.full((4_000_000,), float(rank + 1), device=dev)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        x = base * 2
        torch.cuda._sleep(50_000_000)  # keep the stream busy so an unordered copy would be early
        x.mul_(1.0)
        dist.all_reduce(x)
        x.add_(1)
    side.synchronize()
    same("collective ordered on the current stream", x, torch.full((4_000_000,), float(world * (world + 1) + 1)))
    return failures


def ddp_check(dist, torch):
    import torch.nn as nn

    from haiscale.models import GPT, GPTConfig

    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    config = GPTConfig(vocab_size=256, seq_len=16, d_model=64, n_layers=2)
    g = torch.Generator().manual_seed(5)
    data = [torch.randint(256, (world * 2, 17), generator=g) for _ in range(3)]

    def train(model, batches):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for tokens in batches:
            tokens = tokens.to(dev)
            opt.zero_grad()
            model(tokens[:, :-1], tokens[:, 1:]).backward()
            opt.step()

    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(GPT(config).to(dev), device_ids=[dev])
    train(ddp, [d[2 * rank:2 * rank + 2] for d in data])
    torch.manual_seed(0)
    ref = GPT(config).to(dev)
    train(ref, data)
    worst = max((p - q).abs().max().item() for p, q in zip(ddp.module.parameters(), ref.parameters()))
    return [] if worst < 1e-4 else [f"rank {rank}: DDP on CUDA differs from one process by {worst}"]


def time_allreduce(dist, torch, size, iters=8):
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    t = torch.ones(size // 4, device=dev)
    for _ in range(2):
        dist.all_reduce(t)
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rank_main(args):
    import torch
    import torch.distributed as dist

    import haiscale  # noqa: F401

    dist.init_process_group(args.backend)
    failures = []
    if args.backend == "hfreduce":
        failures = checks(dist, torch) + ddp_check(dist, torch)
    seconds = time_allreduce(dist, torch, args.size_bytes)
    if dist.get_rank() == 0:
        print(f"RESULT {len(failures)} {seconds:.6f}", flush=True)
    for f in failures:
        print("FAIL " + f, flush=True)
    dist.destroy_process_group()
    return 1 if failures else 0


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layouts", default="1x2,2x2")
    p.add_argument("--size", default="64M")
    p.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", default="hfreduce", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.size_bytes = parse_size(args.size)
    if args.rank_worker:
        sys.exit(rank_main(args))
    ok = True
    for layout in args.layouts.split(","):
        nodes, per_node = (int(v) for v in layout.split("x"))
        world = nodes * per_node
        figures = {}
        for backend in ("hfreduce", "gloo"):
            port = free_port()
            procs = []
            for rank in range(world):
                env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_node),
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), HFREDUCE_NODE_ID=f"node{rank // per_node}",
                           PYTHONUNBUFFERED="1")
                procs.append(subprocess.Popen([sys.executable, __file__, "--rank-worker", "--backend", backend,
                                               "--size", args.size], env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
            for rank, proc in enumerate(procs):
                out, _ = proc.communicate(timeout=600)
                for line in out.splitlines():
                    if line.startswith("RESULT "):
                        figures[backend] = float(line.split()[2])
                    if line.startswith("FAIL "):
                        print(line)
                if proc.returncode != 0:
                    ok = False
                    print(f"cuda_check: {backend} {layout} rank {rank} exited {proc.returncode}:\n{out[-3000:]}")
        if "hfreduce" in figures and "gloo" in figures:
            busbw = lambda s: 2 * (world - 1) / world * args.size_bytes / s / 1e9  # noqa: E731
            print(f"cuda_check {layout}: checks {'passed' if ok else 'FAILED'}; all_reduce {args.size} on CUDA "
                  f"tensors: hfreduce {figures['hfreduce'] * 1e3:.1f} ms "
                  f"({busbw(figures['hfreduce']):.2f} GB/s busbw), "
                  f"gloo {figures['gloo'] * 1e3:.1f} ms ({busbw(figures['gloo']):.2f} GB/s), "
                  f"ratio {figures['gloo'] / figures['hfreduce']:.2f}", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
