"""Stock PyTorch parallelism over "hfreduce" against single-process training on the full batch.

Every rank also trains the reference model on the whole batch in its own process, so each can
compare its parameters with what one process computes. fp32 throughout; the stated tolerance
covers summation order only (the averages differ from a one-process sum by rounding).
"""


import torch
import torch.distributed as dist
import torch.nn as nn

import haiscale  # noqa: F401

STEPS = 3
LR = 0.1
ATOL = 2e-5
RTOL = 1e-4


def make_model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def batches(world, per_rank=6):
    g = torch.Generator().manual_seed(99)
    return [(torch.randn(world * per_rank, 8, generator=g), torch.randn(world * per_rank, 4, generator=g))
            for _ in range(STEPS)]


def reference(world, per_rank=6):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in batches(world, per_rank):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def compare(name, got, expected, atol=ATOL, rtol=RTOL):
    if not torch.allclose(got, expected, atol=atol, rtol=rtol):
        diff = (got - expected).abs().max().item()
        raise AssertionError(f"rank {dist.get_rank()}: {name} differs from single-process training by {diff}")


def local_slice(t, rank, world):
    n = t.shape[0] // world
    return t[rank * n:(rank + 1) * n]


def train_on_local_slices(model):
    """STEPS of SGD, each rank on its slice of the global batch."""
    rank, world = dist.get_rank(), dist.get_world_size()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in batches(world):
        opt.zero_grad()
        nn.functional.mse_loss(model(local_slice(x, rank, world)), local_slice(y, rank, world)).backward()
        opt.step()


def ddp():
    dist.init_process_group("hfreduce")
    world = dist.get_world_size()
    model = nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.001)  # several buckets
    train_on_local_slices(model)
    ref = reference(world)
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        compare(name, p.detach(), q.detach())
    dist.destroy_process_group()
    return "ok"


def fsdp2():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("hfreduce")
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    model = make_model()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    train_on_local_slices(model)
    ref = reference(world)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        compare(name, p.full_tensor().detach(), q.detach())
    dist.destroy_process_group()
    return "ok"


def dp_tp():
    """A 2-D DeviceMesh: tensor parallel (DTensor) inside "tp", data parallel across "dp"."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    dist.init_process_group("hfreduce")
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank, dp_size = mesh["dp"].get_local_rank(), mesh["dp"].size()
    model = make_model()
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel(),
                                          "4": ColwiseParallel(output_layouts=Replicate())})
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    dp_group = mesh["dp"].get_group()
    for x, y in batches(dp_size):
        opt.zero_grad()
        out = model(local_slice(x, dp_rank, dp_size))
        nn.functional.mse_loss(out, local_slice(y, dp_rank, dp_size)).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad.to_local(), op=dist.ReduceOp.AVG, group=dp_group)
        opt.step()
    ref = reference(dp_size)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        compare(name, p.full_tensor().detach(), q.detach())
    dist.destroy_process_group()
    return "ok"


def pipeline(schedule_name):
    """Two stages (layers 0-1 | 2-4), four micro-batches, torch.distributed.pipelining."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2
    full = make_model()
    layers = [0, 1] if rank == 0 else [2, 3, 4]
    submodule = nn.Sequential(*[full[i] for i in layers])
    stage = PipelineStage(submodule, rank, world, torch.device("cpu"))
    schedule_class = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule_name]
    schedule = schedule_class(stage, n_microbatches=4, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(submodule.parameters(), lr=LR)
    for x, y in batches(1, per_rank=8):
        opt.zero_grad()
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y)
        opt.step()
    ref = reference(1, per_rank=8)
    ref_params = [p for i in layers for p in ref[i].parameters()]
    for (name, p), q in zip(submodule.named_parameters(), ref_params):
        compare(name, p.detach(), q.detach())
    dist.destroy_process_group()
    return "ok"
