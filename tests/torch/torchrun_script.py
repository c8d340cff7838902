"""A researcher's script, started by torchrun: env:// rendezvous, one allreduce, one DDP step."""

import torch
import torch.distributed as dist
import torch.nn as nn

import haiscale

dist.init_process_group("hfreduce")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((1000,), float(world * (world + 1) // 2))), t[:4]
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
model(torch.randn(3, 4)).sum().backward()
info = haiscale.backend_info()
print(f"torchrun rank {rank}/{world}: allreduce ok, ddp step ok, {info}", flush=True)
dist.destroy_process_group()
