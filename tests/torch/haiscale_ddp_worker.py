"""haiscale.ddp.DistributedDataParallel over "hfreduce" against single-process training."""

import torch
import torch.distributed as dist
import torch.nn as nn
from training_worker import LR, batches, compare, local_slice, make_model, reference

from haiscale.ddp import DistributedDataParallel


def equivalence(gradient_dtype_name):
    """Several buckets (a 1 KiB cap), AdamW-free SGD, zero_grad dropping the bucket views."""
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    gradient_dtype = {"none": None, "bf16": torch.bfloat16}[gradient_dtype_name]
    model = DistributedDataParallel(make_model(), bucket_cap_mb=1 / 8192, gradient_dtype=gradient_dtype)
    assert len(model._buckets) > 3, len(model._buckets)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(batches(world)):
        opt.zero_grad(set_to_none=step % 2 == 0)
        nn.functional.mse_loss(model(local_slice(x, rank, world)), local_slice(y, rank, world)).backward()
        opt.step()
    ref = reference(world)
    tolerance = {} if gradient_dtype is None else {"atol": 2e-3, "rtol": 2e-2}
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        compare(name, p.detach(), q.detach(), **tolerance)
    dist.destroy_process_group()
    return "ok"


def no_sync_accumulates():
    """Two micro-batches per step, the first under no_sync: the step equals one full-batch step on
    the sum of the two micro-batch losses."""
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(make_model(), bucket_cap_mb=1 / 1024)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data = batches(world * 2)
    for i in range(0, len(data) - 1, 2):
        opt.zero_grad()
        for j, (x, y) in enumerate(data[i:i + 2]):
            ctx = model.no_sync() if j == 0 else torch.enable_grad()
            with ctx:
                nn.functional.mse_loss(model(local_slice(x, rank, world)), local_slice(y, rank, world)).backward()
        opt.step()
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
    for i in range(0, len(data) - 1, 2):
        ref_opt.zero_grad()
        for x, y in data[i:i + 2]:
            # each rank's mean over its slice, averaged over ranks = the mean over the whole batch
            nn.functional.mse_loss(ref(x), y).backward()
        ref_opt.step()
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        compare(name, p.detach(), q.detach())
    dist.destroy_process_group()
    return "ok"


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.body = nn.Linear(8, 16)
        self.used = nn.Linear(16, 4)
        self.unused = nn.Linear(16, 4)

    def forward(self, x):
        return self.used(torch.tanh(self.body(x)))


def unused_parameters(find_unused):
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(TwoHeads(), bucket_cap_mb=1 / 1024, find_unused_parameters=find_unused)
    x, y = batches(world)[0]
    try:
        nn.functional.mse_loss(model(local_slice(x, rank, world)), local_slice(y, rank, world)).backward()
    except RuntimeError as e:
        dist.destroy_process_group()
        return {"error": str(e)}
    grads = {n: p.grad.abs().sum().item() for n, p in model.module.named_parameters()}
    model.stop()
    dist.destroy_process_group()
    return {"error": None, "grads": grads}
