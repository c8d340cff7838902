"""A researcher's training script over the "hfreduce" backend: stock PyTorch DDP on a small GPT.

    torchrun --nproc-per-node 4 haiscale/examples/ddp_gpt.py --steps 60
    # or under the platform: hai submit --nodes 2 --gpus-per-node 2 -- .venv/bin/python haiscale/examples/ddp_gpt.py

The data is synthetic but learnable: each sequence counts up by a stride drawn per sequence
(token[i+1] = token[i] + stride mod vocabulary), so the loss falls as the model learns it.
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import haiscale  # noqa: F401  (registers the "hfreduce" backend)
from haiscale.models import GPT, GPTConfig


def batch(generator, config, size):
    start = torch.randint(config.vocab_size, (size, 1), generator=generator)
    stride = torch.randint(1, 8, (size, 1), generator=generator)
    return (start + stride * torch.arange(config.seq_len + 1)) % config.vocab_size


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args()

    dist.init_process_group("hfreduce")  # env:// (torchrun, or the platform's agent)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts rank 0's)
    config = GPTConfig(vocab_size=256, seq_len=32, d_model=128, n_layers=2)
    model = nn.parallel.DistributedDataParallel(GPT(config))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own share of the data
    if rank == 0:
        info = haiscale.backend_info()
        print(f"{world} ranks on {info['nodes']} node(s) over {info['transport']}; "
              f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters", flush=True)
    start = time.time()
    for step in range(1, args.steps + 1):
        tokens = batch(data, config, args.batch)
        loss = model(tokens[:, :-1], tokens[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == 1:
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:4d}  loss {mean.item():.3f}  ({time.time() - start:.1f} s)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
