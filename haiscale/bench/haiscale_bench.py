#!/usr/bin/env python3
"""HaiScale against PyTorch's own parallelism, in one run, same model, same harness.

    .venv/bin/python haiscale/bench/haiscale_bench.py                  # 2 emulated nodes x 2 ranks
    .venv/bin/python haiscale/bench/haiscale_bench.py --steps 20 --gpt-dim 384

Each line starts the ranks afresh (processes; HFREDUCE_NODE_ID groups them into nodes; gloo sees
them all over loopback TCP) and times training steps of haiscale.models.GPT on random tokens
(p50 and p90 over --rounds launches x --steps after 2 warm-up steps, a barrier before each; the
rounds alternate which implementation of a pair runs first):
  ddp    haiscale.ddp over "hfreduce"             vs  torch DDP over "gloo"
  fsdp   haiscale.fsdp (Blocks as units) "hfreduce" vs  torch FSDP2 fully_shard (Blocks, root) "gloo"
  1f1b   haiscale.pipeline.PipeDream "hfreduce"   vs  torch.distributed.pipelining Schedule1F1B "gloo"
DDP and FSDP train the same global batch (--batch sequences per rank); the pipelines cut the
model into one stage per rank and run --batch x ranks sequences in --micro-batches micro-batches
(the tied embedding is untied, since it would sit on two stages). Peak memory per rank is the
growth of the process's peak RSS (ru_maxrss) from just before the model is built to the end:
model, gradients, optimizer state, activations and communication buffers, on host memory.

What bounds the figures, on a 2-core machine: four ranks share two cores, so a step is at least
(ranks x one rank's compute / cores); the line "compute floor" runs a rank's share of the step in
one process with no communication. The last line:
  haiscale: ddp vs torch-ddp/gloo R1; fsdp vs torch-fsdp2/gloo R2 (memory M%); 1f1b vs torch-pipelining R3
(R > 1: haiscale is faster; M: haiscale's peak memory as a percentage of FSDP2's).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from torch_backends import run_ranks  # the same launcher (this folder is on sys.path)

CASES = [("ddp", "haiscale", "hfreduce"), ("ddp", "torch", "gloo"),
         ("fsdp", "haiscale", "hfreduce"), ("fsdp", "torch", "gloo"),
         ("1f1b", "haiscale", "hfreduce"), ("1f1b", "torch", "gloo")]


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- one rank -------------------------------------------------------------------------------------


def rank_main(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import haiscale  # noqa: F401
    from haiscale.models import GPT, GPTConfig
    from haiscale.models.gpt import Block

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    pipeline = args.kind == "1f1b"
    config = GPTConfig(vocab_size=args.gpt_vocab, seq_len=64, d_model=args.gpt_dim, n_heads=max(1, args.gpt_dim // 64),
                       n_layers=args.gpt_layers, tie_embeddings=not pipeline)
    # Warm up what every implementation loads on first use (kernels, thread pools, the backend's
    # buffers for a small collective), so the peak measured below is the training state's.
    tiny = GPT(GPTConfig(vocab_size=64, seq_len=8, d_model=64, n_heads=1, n_layers=1))
    tiny_opt = torch.optim.AdamW(tiny.parameters())
    t = torch.randint(64, (2, 9))
    tiny(t[:, :-1], t[:, 1:]).backward()
    tiny_opt.step()
    del tiny, tiny_opt
    dist.all_reduce(torch.ones(1024))
    dist.barrier()
    base_rss = peak_rss_mib()
    torch.manual_seed(0)
    gpt = GPT(config)
    params = sum(p.numel() for p in gpt.parameters())
    g = torch.Generator().manual_seed(1 + rank)
    batch = args.batch * world if pipeline else args.batch

    def tokens():
        t = torch.randint(config.vocab_size, (batch, config.seq_len + 1), generator=g)
        return t[:, :-1], t[:, 1:]

    if args.kind == "ddp" and args.impl == "haiscale":
        from haiscale.ddp import DistributedDataParallel
        model = DistributedDataParallel(gpt, **({"bucket_cap_mb": args.bucket_mb} if args.bucket_mb else {}))
    elif args.kind == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(gpt)
    elif args.kind == "fsdp" and args.impl == "haiscale":
        from haiscale.fsdp import FullyShardedDataParallel, ModuleTypePolicy
        model = FullyShardedDataParallel(gpt, auto_wrap_policy=ModuleTypePolicy(Block))
    elif args.kind == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for block in gpt.blocks:
            fully_shard(block, mesh=mesh)
        model = fully_shard(gpt, mesh=mesh)
    if args.kind in ("ddp", "fsdp"):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            x, y = tokens()
            opt.zero_grad()
            model(x, y).backward()
            opt.step()
    else:
        from haiscale.pipeline import PipeDream, partition
        stage_module = partition(gpt.as_sequential(), rank, world)
        del gpt
        criterion = lambda logits, y: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))  # noqa
        if args.impl == "haiscale":
            model = PipeDream(stage_module, args.micro_batches)

            def run(x, y):
                model.forward_backward(x, criterion=criterion, labels=(y,))
        else:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B
            stage = PipelineStage(stage_module, rank, world, torch.device("cpu"))
            schedule = Schedule1F1B(stage, n_microbatches=args.micro_batches, loss_fn=criterion)

            def run(x, y):
                if rank == 0:
                    schedule.step(x)
                elif rank == world - 1:
                    schedule.step(target=y)
                else:
                    schedule.step()
        opt = torch.optim.AdamW(stage_module.parameters(), lr=1e-4)

        def step():
            x, y = tokens()
            opt.zero_grad()
            run(x, y)
            opt.step()

    times = []
    for i in range(2 + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        dist.barrier()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    peak = torch.tensor([peak_rss_mib() - base_rss])
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        print("RESULT " + json.dumps({"times": times, "peak_mib": peak.item(), "params": params}), flush=True)
    dist.destroy_process_group()


def floor_main(args):
    """A rank's share of the DDP step in one process: its compute, no communication."""
    import torch

    from haiscale.models import GPT, GPTConfig

    torch.set_num_threads(1)
    config = GPTConfig(vocab_size=args.gpt_vocab, seq_len=64, d_model=args.gpt_dim, n_heads=max(1, args.gpt_dim // 64),
                       n_layers=args.gpt_layers)
    torch.manual_seed(0)
    model = GPT(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for i in range(2 + args.steps):
        t = torch.randint(config.vocab_size, (args.batch, config.seq_len + 1))
        t0 = time.perf_counter()
        opt.zero_grad()
        model(t[:, :-1], t[:, 1:]).backward()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    print("RESULT " + json.dumps({"times": times}), flush=True)


# ---- the driver -----------------------------------------------------------------------------------


def worker_args(args):
    return ["--steps", str(args.steps), "--batch", str(args.batch), "--micro-batches", str(args.micro_batches),
            "--gpt-dim", str(args.gpt_dim), "--gpt-layers", str(args.gpt_layers),
            "--gpt-vocab", str(args.gpt_vocab)] + (["--bucket-mb", str(args.bucket_mb)] if args.bucket_mb else [])


def launch(args, kind, impl, backend):
    cmd = [sys.executable, __file__, "--rank-worker", "--kind", kind, "--impl", impl, "--backend", backend]
    return run_ranks(cmd + worker_args(args), args.nodes, args.per_node, f"haiscale_bench: {kind} {impl}")


def p(times, q):
    t = sorted(times)
    return t[int(q * (len(t) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--per-node", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per launch")
    ap.add_argument("--rounds", type=int, default=3, help="launches per case, alternating the order of each pair")
    ap.add_argument("--batch", type=int, default=4, help="sequences of 64 tokens per rank")
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--gpt-dim", type=int, default=256)
    ap.add_argument("--gpt-layers", type=int, default=4)
    ap.add_argument("--gpt-vocab", type=int, default=8192)
    ap.add_argument("--cases", default="ddp,fsdp,1f1b")
    ap.add_argument("--bucket-mb", type=float, default=None, help="haiscale.ddp's bucket_cap_mb (default: its own)")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--floor-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kind", help=argparse.SUPPRESS)
    ap.add_argument("--impl", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_worker:
        return rank_main(args)
    if args.floor_worker:
        return floor_main(args)

    kinds = args.cases.split(",")
    world = args.nodes * args.per_node
    started = time.time()
    figures = {}
    # Rounds alternate which of a pair runs first, and the step times of all rounds are pooled:
    # a shared 2-core machine drifts by tens of percent over minutes.
    for r in range(args.rounds):
        for kind in kinds:
            pair = [c for c in CASES if c[0] == kind]
            for _, impl, backend in (pair if r % 2 == 0 else pair[::-1]):
                print(f"haiscale_bench: round {r + 1}/{args.rounds}: {kind} {impl}/{backend} ...", file=sys.stderr,
                      flush=True)
                try:
                    result = launch(args, kind, impl, backend)
                except SystemExit as e:  # seen: gloo ranks aborting at exit ("terminate called ...")
                    print(f"haiscale_bench: {kind} {impl} failed, running it again once:\n{e}", file=sys.stderr,
                          flush=True)
                    result = launch(args, kind, impl, backend)
                if (kind, impl) not in figures:
                    figures[kind, impl] = result
                else:
                    figures[kind, impl]["times"] += result["times"]
                    figures[kind, impl]["peak_mib"] = max(figures[kind, impl]["peak_mib"], result["peak_mib"])
    out = subprocess.run([sys.executable, __file__, "--floor-worker"] + worker_args(args), capture_output=True,
                         text=True, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore"))
    floor = next(json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT "))["times"]
    cores = os.cpu_count()
    params = next(iter(figures.values()))["params"]
    print(f"HaiScale vs PyTorch: GPT {params / 1e6:.2f} M parameters (width {args.gpt_dim}, {args.gpt_layers} layers, "
          f"vocabulary {args.gpt_vocab}), {args.nodes} nodes x {args.per_node} ranks, batch {args.batch} x 64 tokens "
          f"per rank, AdamW; {args.rounds} rounds x {args.steps} steps after 2 warm-up; {cores} cores")
    print(f"{'case':<6}{'implementation':<42}{'p50 ms':>9}{'p90 ms':>9}{'peak MiB':>10}{'ratio':>8}")
    names = {("ddp", "haiscale"): "haiscale.ddp / hfreduce", ("ddp", "torch"): "torch DDP / gloo",
             ("fsdp", "haiscale"): "haiscale.fsdp / hfreduce", ("fsdp", "torch"): "torch FSDP2 fully_shard / gloo",
             ("1f1b", "haiscale"): "haiscale.pipeline 1F1B / hfreduce",
             ("1f1b", "torch"): "torch.distributed.pipelining 1F1B / gloo"}
    ratio, memory = {}, None
    for kind in kinds:
        ours, peer = figures[kind, "haiscale"], figures[kind, "torch"]
        ratio[kind] = statistics.median(peer["times"]) / statistics.median(ours["times"])
        for impl, f in (("haiscale", ours), ("torch", peer)):
            r = f"{ratio[kind]:>8.2f}" if impl == "haiscale" else ""
            print(f"{kind:<6}{names[kind, impl]:<42}{statistics.median(f['times']) * 1e3:>9.1f}"
                  f"{p(f['times'], 0.9) * 1e3:>9.1f}{f['peak_mib']:>10.0f}{r}")
        if kind == "fsdp":
            memory = 100.0 * ours["peak_mib"] / peer["peak_mib"]
    f50 = statistics.median(floor)
    print(f"compute floor: one rank's step alone {f50 * 1e3:.1f} ms; {world} ranks on {cores} cores -> "
          f"DDP/FSDP steps >= {world * f50 / min(cores, world) * 1e3:.1f} ms of compute")
    for kind in kinds:
        if kind in ("ddp", "fsdp"):
            for impl in ("haiscale", "torch"):
                t = statistics.median(figures[kind, impl]["times"])
                share = min(1.0, world * f50 / min(cores, world) / t)
                print(f"  {kind} {impl}: compute {share * 100:.0f}% of the step, communication and waiting "
                      f"{(1 - share) * 100:.0f}%")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({f"{k[0]}/{k[1]}": v for k, v in figures.items()} | {"floor": floor}, fh, indent=1)
    print(f"(took {time.time() - started:.0f} s)")
    parts = []
    if "ddp" in ratio:
        parts.append(f"ddp vs torch-ddp/gloo {ratio['ddp']:.2f}")
    if "fsdp" in ratio:
        parts.append(f"fsdp vs torch-fsdp2/gloo {ratio['fsdp']:.2f} (memory {memory:.0f}%)")
    if "1f1b" in ratio:
        parts.append(f"1f1b vs torch-pipelining {ratio['1f1b']:.2f}")
    print("haiscale: " + "; ".join(parts))


if __name__ == "__main__":
    main()
